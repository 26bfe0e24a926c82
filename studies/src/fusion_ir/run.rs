//! Running the fusion study: the IR pass over random vectors, the unfused and fused loops,
//! and the chains as Burn tensor ops.

use super::*;

/// `(a + b) * c` unfused: `t = a + b` is written to memory, then `out = t * c`.
pub fn apb_c_unfused(a: &[f32], b: &[f32], c: &[f32], t: &mut [f32], out: &mut [f32]) {
    for ((t, a), b) in t.iter_mut().zip(a).zip(b) {
        *t = a + b;
    }
    for ((o, t), c) in out.iter_mut().zip(t.iter()).zip(c) {
        *o = t * c;
    }
}

/// `a + b*c + 1` unfused: `t1 = b*c`, `t2 = a + t1`, `out = t2 + 1`, each a separate pass.
pub fn a_bc_1_unfused(
    a: &[f32],
    b: &[f32],
    c: &[f32],
    t1: &mut [f32],
    t2: &mut [f32],
    out: &mut [f32],
) {
    for ((t, b), c) in t1.iter_mut().zip(b).zip(c) {
        *t = b * c;
    }
    for ((t2, a), t1) in t2.iter_mut().zip(a).zip(t1.iter()) {
        *t2 = a + t1;
    }
    for (o, t2) in out.iter_mut().zip(t2.iter()) {
        *o = t2 + 1.0;
    }
}

/// Runs `(a+b)*c` and `a+b*c+1` as Burn tensor ops on backend `B` (one op at a time unless the
/// backend fuses them) and compares each result with the fused loop's `expect`
/// ([`memwall_runner::fusion_chains::burn_chains`], which the slim runner's `fusion-chains`
/// runs too).
///
/// # Errors
/// [`DemoError::Worker`] when the device cannot be synchronized or a result cannot be read.
pub fn burn_chains<B: burn::tensor::backend::Backend>(
    device: &B::Device,
    inputs: [&[f32]; 3],
    expect: [&[f32]; 2],
    repeats: usize,
    count_heap: bool,
) -> Result<Vec<BurnChain>, DemoError> {
    memwall_runner::fusion_chains::burn_chains::<B>(device, inputs, expect, repeats, count_heap)
        .map_err(DemoError::Worker)
}

/// Runs the study: the fusion pass, the loop timings, the Burn chains and the matrix product's
/// chain (in this order, from one seeded generator).
///
/// # Errors
/// [`DemoError::InvalidParam`] for zero `n` or `ir_n`; [`DemoError::Check`] when a fused result
/// differs from the unfused one; [`DemoError::Worker`] when Burn fails on the CPU.
pub fn measure(p: &FusionParams) -> Result<FusionResult, DemoError> {
    validate(p)?;
    ensure(p.n > 0 && p.ir_n > 0, "n", "array lengths must be positive")?;
    let mut rng = XorShift(SEED);
    let ir = measure_ir(p, &mut rng)?;
    let (loops, arrays) = measure_loops(p, &mut rng)?;
    let burn = measure_burn(p, &arrays)?;
    let matmul = measure_matmul(
        (p.matmul_size, p.matmul_size, p.matmul_k),
        p.repeats,
        &mut rng,
    )?;
    Ok(FusionResult {
        params: p.clone(),
        ir,
        loops,
        burn,
        matmul: Some(matmul),
    })
}

/// Whether two arrays are equal bit for bit.
pub(super) fn bit_equal(x: &[f32], y: &[f32]) -> bool {
    x.iter().zip(y).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Fuses `a + b*c + 1` and `(a + b)*c` and checks, over `ir_n` random elements, that the fused
/// graphs evaluate bit-identically to the unfused ones.
pub(super) fn measure_ir(p: &FusionParams, rng: &mut XorShift) -> Result<IrResult, DemoError> {
    let g = Graph::a_plus_b_times_c_plus_1();
    let f = g.fuse();
    let (a, b, c) = (
        random_vec(rng, p.ir_n),
        random_vec(rng, p.ir_n),
        random_vec(rng, p.ir_n),
    );
    let vars = [
        ("a", a.as_slice()),
        ("b", b.as_slice()),
        ("c", c.as_slice()),
    ];
    let (u, ku) = g.eval(&vars, p.ir_n)?;
    let (fv, kf) = f.eval(&vars, p.ir_n)?;
    let mismatches = u
        .iter()
        .zip(&fv)
        .filter(|(x, y)| x.to_bits() != y.to_bits())
        .count();
    if mismatches > 0 {
        return Err(DemoError::Check(format!(
            "fused IR differs from unfused in {mismatches} elements"
        )));
    }
    let g2 = Graph::a_plus_b_times_c();
    let f2 = g2.fuse();
    let (u2, _) = g2.eval(&vars, p.ir_n)?;
    let (fv2, _) = f2.eval(&vars, p.ir_n)?;
    if !bit_equal(&u2, &fv2) {
        return Err(DemoError::Check("fused (a+b)*c differs".into()));
    }
    Ok(IrResult {
        unfused_graph: g,
        fused_graph: f,
        unfused_kernels: ku,
        fused_kernels: kf,
        mismatches,
        fused_apb_c_graph: f2,
    })
}

/// The loop timing's arrays, kept for the Burn part: the inputs and the fused `a+b*c+1` output.
pub(super) struct ChainArrays {
    pub(super) a: Vec<f32>,
    pub(super) b: Vec<f32>,
    pub(super) c: Vec<f32>,
    pub(super) a_bc_1: Vec<f32>,
}

/// Times both chains as unfused and fused loops over `n` random elements (buffers allocated
/// before timing) and checks that the variants agree bit for bit.
pub(super) fn measure_loops(
    p: &FusionParams,
    rng: &mut XorShift,
) -> Result<(LoopsResult, ChainArrays), DemoError> {
    let n = p.n;
    let (a, b, c) = (random_vec(rng, n), random_vec(rng, n), random_vec(rng, n));
    let (mut t1, mut t2, mut out_u, mut out_f) =
        (vec![0f32; n], vec![0f32; n], vec![0f32; n], vec![0f32; n]);
    let (tu1, _) = median_time(p.repeats, || apb_c_unfused(&a, &b, &c, &mut t1, &mut out_u));
    let (tf1, _) = median_time(p.repeats, || apb_c_fused(&a, &b, &c, &mut out_f));
    let eq1 = bit_equal(&out_u, &out_f);
    let (tu2, _) = median_time(p.repeats, || {
        a_bc_1_unfused(&a, &b, &c, &mut t1, &mut t2, &mut out_u)
    });
    let (tf2, _) = median_time(p.repeats, || a_bc_1_fused(&a, &b, &c, &mut out_f));
    let eq2 = bit_equal(&out_u, &out_f);
    if !eq1 || !eq2 {
        return Err(DemoError::Check(
            "fused loop result differs from unfused".into(),
        ));
    }
    let chains = Chain::ALL
        .into_iter()
        .zip([(tu1, tf1), (tu2, tf2)])
        .map(|(chain, (unfused_s, fused_s))| LoopChain {
            chain,
            unfused_bytes_per_element: F32_BYTES * chain.unfused_accesses(),
            fused_bytes_per_element: F32_BYTES * chain.fused_accesses(),
            unfused_s,
            fused_s,
        })
        .collect();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let arrays = ChainArrays {
        a,
        b,
        c,
        a_bc_1: out_f,
    };
    Ok((LoopsResult { cores, chains }, arrays))
}

/// Runs both chains as Burn tensor ops on flex and, when a GPU is present, on CUDA, checked
/// against the fused loops' outputs.
fn measure_burn(p: &FusionParams, arrays: &ChainArrays) -> Result<BurnResult, DemoError> {
    let ChainArrays { a, b, c, a_bc_1 } = arrays;
    // a_bc_1 holds a+b*c+1 from the last timed fused loop; (a+b)*c needs its own buffer.
    let mut apb_c = vec![0f32; a.len()];
    apb_c_fused(a, b, c, &mut apb_c);
    let inputs = [a.as_slice(), b.as_slice(), c.as_slice()];
    let expect = [apb_c.as_slice(), a_bc_1.as_slice()];
    let flex =
        burn_chains::<burn::backend::Flex>(&Default::default(), inputs, expect, p.repeats, true)?;
    let cuda = memwall_runner::fusion_chains::burn_cuda_chains(inputs, expect, p.repeats);
    Ok(BurnResult {
        flex,
        cuda,
        imported_cuda: None,
    })
}
