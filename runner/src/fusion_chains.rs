//! The `fusion_ir` study's elementwise chains as Burn tensor ops, runnable on a GPU machine
//! that has only the slim runner: `memwall-job fusion-chains` ([`cli`]).
//!
//! The study (`memwall-studies`' `fusion_ir`) times `(a+b)*c` and `a+b*c+1` over `n` f32 elements
//! as plain loops and as Burn tensor ops on flex and, where a GPU is present, on CUDA with and
//! without Burn's fusion backend. This module holds what the Burn part needs, so the study and
//! the runner share one implementation:
//!
//! - the study's inputs: its generator ([`XorShift`] seeded with [`SEED`]) draws the IR check's
//!   three arrays of `ir_n` values, then the three input arrays of `n` ([`study_inputs`]);
//! - the fused reference loops ([`apb_c_fused`], [`a_bc_1_fused`], [`expected`]) that Burn's
//!   results are compared with;
//! - the timing ([`burn_chains`], generic over the backend) and the CUDA pair ([`burn_cuda_chains`]:
//!   `burn::backend::Cuda`, which fuses, and `CubeBackend`, which runs one kernel per op).
//!
//! `memwall-job fusion-chains --n N --repeats R --out FILE.json [--ir-n N] [--backend cuda|flex]`
//! writes one [`FusionChainsRun`] (`memwall-fusion-chains/1`): the chains, or why they were not
//! measured (no GPU, no driver, a runner built without CUDA), and exits 0 in both cases. A
//! bundle's import stores it as `runs/fusion_ir/cuda_chains.json`, and the study's report shows
//! it where its own record has no CUDA measurement. `--backend flex` times the same code path
//! on the CPU (labelled `"backend": "flex"`; flex has no fusion backend, so `fused` is empty),
//! so the command can be checked without a GPU.
//!
//! May import: [`crate::device`] (the CUDA probe), [`crate::measure`] (the counting allocator,
//! medians, the build revision), `memwall_core`, Burn (CUDA, `burn-cubecl` and `cubecl` with the
//! `cuda` feature).

pub use memwall_core::record::fusion_chains::{
    BurnChain, Chain, ChainsBackend, CudaChains, FusionChainsRun, CUDA_CHAINS_FILE,
    FUSION_CHAINS_FORMAT,
};
use std::path::PathBuf;
use std::process::ExitCode;

/// Seed of the study's generator.
pub const SEED: u64 = 0x9E37_79B9_7F4A_7C15;

/// Elements per array at the study's `full` profile (its `[params]`: `n = 16777216`).
pub const DEFAULT_N: usize = 1 << 24;
/// Timed repeats at the study's `full` profile (its `[params]`: `repeats = 5`).
pub const DEFAULT_REPEATS: usize = 5;
/// The study's default `ir_n` (no profile of `experiments/fusion_ir.toml` but `smoke` sets it).
pub const DEFAULT_IR_N: usize = 100_000;

/// Largest `n`: the study's loop timings hold four f32 arrays of `n` elements (2^27 elements:
/// 512 MiB each, 2 GiB in all).
pub const MAX_N: usize = 1 << 27;

/// Deterministic xorshift64* generator for reproducible test data (no `rand` dependency).
#[derive(Debug, Clone)]
pub struct XorShift(pub u64);

impl XorShift {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [0, 1).
    pub fn unit_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// `n` values uniform in [-1, 1), one draw of `rng` each.
pub fn random_vec(rng: &mut XorShift, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| (rng.unit_f64() * 2.0 - 1.0) as f32)
        .collect()
}

/// The study's input arrays `a`, `b`, `c` of `n` elements: its generator ([`SEED`]) after the
/// three arrays of `ir_n` its IR check draws first.
pub fn study_inputs(n: usize, ir_n: usize) -> [Vec<f32>; 3] {
    let mut rng = XorShift(SEED);
    for _ in 0..3 * ir_n {
        rng.next_u64();
    }
    let a = random_vec(&mut rng, n);
    let b = random_vec(&mut rng, n);
    let c = random_vec(&mut rng, n);
    [a, b, c]
}

/// `(a + b) * c` fused: one loop, no intermediate array.
pub fn apb_c_fused(a: &[f32], b: &[f32], c: &[f32], out: &mut [f32]) {
    for (((o, a), b), c) in out.iter_mut().zip(a).zip(b).zip(c) {
        *o = (a + b) * c;
    }
}

/// `a + b*c + 1` fused: one loop.
pub fn a_bc_1_fused(a: &[f32], b: &[f32], c: &[f32], out: &mut [f32]) {
    for (((o, a), b), c) in out.iter_mut().zip(a).zip(b).zip(c) {
        *o = a + b * c + 1.0;
    }
}

/// The fused loops' results over `inputs` (`a`, `b`, `c`): `(a+b)*c`, then `a+b*c+1`, what
/// Burn's results are compared with.
pub fn expected(inputs: [&[f32]; 3]) -> [Vec<f32>; 2] {
    let [a, b, c] = inputs;
    let (mut e1, mut e2) = (vec![0f32; a.len()], vec![0f32; a.len()]);
    apb_c_fused(a, b, c, &mut e1);
    a_bc_1_fused(a, b, c, &mut e2);
    [e1, e2]
}

/// Runs `(a+b)*c` and `a+b*c+1` as Burn tensor ops on backend `B` (one op at a time unless the
/// backend fuses them) and compares each result with the fused loop's `expect`. With
/// `count_heap`, each chain's heap high-water mark above the bytes live before it is read from
/// the counting allocator ([`crate::measure`]; it sees the CPU backends' memory only).
///
/// # Errors
/// A message when the device cannot be synchronized or a result cannot be read.
pub fn burn_chains<B: burn::tensor::backend::Backend>(
    device: &B::Device,
    inputs: [&[f32]; 3],
    expect: [&[f32]; 2],
    repeats: usize,
    count_heap: bool,
) -> Result<Vec<BurnChain>, String> {
    use burn::tensor::{Tensor, TensorData};
    let n = inputs[0].len();
    let up = |v: &[f32]| Tensor::<B, 1>::from_data(TensorData::new(v.to_vec(), [n]), device);
    let (a, b, c) = (up(inputs[0]), up(inputs[1]), up(inputs[2]));
    let sync = || B::sync(device).map_err(|e| format!("device synchronization: {e:?}"));
    sync()?;
    type Ops<'a, B> = (Chain, Box<dyn Fn() -> Tensor<B, 1> + 'a>);
    let chains: [Ops<B>; 2] = [
        (
            Chain::APlusBTimesC,
            Box::new(|| (a.clone() + b.clone()) * c.clone()),
        ),
        (
            Chain::APlusBTimesCPlus1,
            Box::new(|| a.clone() + b.clone() * c.clone() + 1.0),
        ),
    ];
    let mut out = Vec::new();
    for ((expr, chain), want) in chains.into_iter().zip(expect) {
        // Warm-up: kernel compilation (CUDA), allocator pools. The output is kept until the
        // device has run the chain, so a fusing backend compiles the kernel it will time.
        let warm = chain();
        sync()?;
        drop(warm);
        let mut times = Vec::with_capacity(repeats.max(1));
        let mut alloc = 0u64;
        let mut last = None;
        for _ in 0..repeats.max(1) {
            drop(last.take());
            let before = crate::measure::allocated_bytes();
            crate::measure::reset_peak();
            let t0 = std::time::Instant::now();
            let r = chain();
            sync()?;
            times.push(t0.elapsed().as_secs_f64());
            alloc = alloc.max(crate::measure::peak_allocated_bytes().saturating_sub(before));
            last = Some(r);
        }
        let got = last
            .expect("at least one repeat")
            .into_data()
            .to_vec::<f32>()
            .map_err(|e| format!("reading {expr}: {e:?}"))?;
        let max_abs_diff = got
            .iter()
            .zip(want)
            .map(|(x, y)| (x - y).abs() as f64)
            .fold(0.0, f64::max);
        out.push(BurnChain {
            expr,
            time_s: crate::measure::median(&times),
            alloc_bytes_per_element: count_heap.then(|| alloc as f64 / n as f64),
            max_abs_diff,
        });
    }
    Ok(out)
}

/// Burn's CUDA backend with its fusion backend (`Cuda`) and without it (`CubeBackend`), when
/// a GPU is present, or the reason it was not measured.
///
/// # Errors
/// Why: no CUDA driver or device ([`crate::device::probe_cuda`]), a device or read failure,
/// a panic of the CUDA backend.
#[cfg(feature = "cuda")]
pub fn burn_cuda_chains(
    inputs: [&[f32]; 3],
    expect: [&[f32]; 2],
    repeats: usize,
) -> Result<CudaChains, String> {
    use burn::backend::cuda::CudaDevice;
    type Unfused = burn_cubecl::CubeBackend<cubecl::cuda::CudaRuntime, f32, i32, u8>;
    let info = crate::device::probe_cuda().map_err(|e| e.to_string())?;
    let name = info
        .names
        .first()
        .cloned()
        .unwrap_or_else(|| "CUDA device 0".into());
    let device = CudaDevice::new(0);
    let run = || -> Result<_, String> {
        Ok((
            burn_chains::<burn::backend::Cuda>(&device, inputs, expect, repeats, false)?,
            burn_chains::<Unfused>(&device, inputs, expect, repeats, false)?,
        ))
    };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
        Ok(Ok((fused, unfused))) => Ok(CudaChains {
            device: name,
            fused,
            unfused,
        }),
        Ok(Err(e)) => Err(e),
        Err(_) => Err("the CUDA backend panicked".into()),
    }
}

/// Without the `cuda` feature: the reason.
///
/// # Errors
/// Always: this build has no CUDA backend.
#[cfg(not(feature = "cuda"))]
pub fn burn_cuda_chains(_: [&[f32]; 3], _: [&[f32]; 2], _: usize) -> Result<CudaChains, String> {
    Err(NO_CUDA_FEATURE.into())
}

/// Why a build without the `cuda` feature measures no CUDA chains.
#[cfg(not(feature = "cuda"))]
const NO_CUDA_FEATURE: &str = "this binary was built without the `cuda` feature";

/// What `memwall-job fusion-chains` runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The backend.
    pub backend: ChainsBackend,
    /// Elements per array.
    pub n: usize,
    /// Timed repeats per chain.
    pub repeats: usize,
    /// The study's `ir_n` (values drawn before the inputs).
    pub ir_n: usize,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            backend: ChainsBackend::Cuda,
            n: DEFAULT_N,
            repeats: DEFAULT_REPEATS,
            ir_n: DEFAULT_IR_N,
        }
    }
}

/// Flex on the CPU: the chains as flex runs them (one kernel per op), heap bytes counted.
fn flex_chains(
    inputs: [&[f32]; 3],
    expect: [&[f32]; 2],
    repeats: usize,
) -> Result<CudaChains, String> {
    let unfused =
        burn_chains::<burn::backend::Flex>(&Default::default(), inputs, expect, repeats, true)?;
    Ok(CudaChains {
        device: crate::device::cpu_model(),
        fused: Vec::new(),
        unfused,
    })
}

/// Why the CUDA chains cannot run here, found before the inputs are generated.
fn cuda_unavailable() -> Option<String> {
    #[cfg(feature = "cuda")]
    {
        crate::device::probe_cuda().err().map(|e| e.to_string())
    }
    #[cfg(not(feature = "cuda"))]
    {
        Some(NO_CUDA_FEATURE.into())
    }
}

/// Runs the chains on `opts.backend` over the study's inputs: the chains, or why they were
/// not measured (a result that fails its own check becomes that reason, so the file always
/// reads back).
pub fn run(opts: &Options) -> FusionChainsRun {
    let t0 = std::time::Instant::now();
    let chains = match (opts.backend, cuda_unavailable()) {
        (ChainsBackend::Cuda, Some(why)) => Err(why),
        (backend, _) => {
            let inputs = study_inputs(opts.n, opts.ir_n);
            let inputs = [&inputs[0][..], &inputs[1][..], &inputs[2][..]];
            let expect = expected(inputs);
            let expect = [&expect[0][..], &expect[1][..]];
            match backend {
                ChainsBackend::Cuda => burn_cuda_chains(inputs, expect, opts.repeats),
                ChainsBackend::Flex => flex_chains(inputs, expect, opts.repeats),
            }
        }
    };
    let mut out = FusionChainsRun {
        format: FUSION_CHAINS_FORMAT.into(),
        backend: opts.backend,
        n: opts.n,
        ir_n: opts.ir_n,
        repeats: opts.repeats,
        finished_at: chrono::Utc::now().to_rfc3339(),
        wall_s: t0.elapsed().as_secs_f64(),
        runner_revision: crate::measure::BUILD_REVISION.into(),
        burn_version: crate::BURN_VERSION.into(),
        chains,
    };
    if let Err((field, why)) = out.check() {
        out.chains = Err(format!(
            "the measurement failed its check: field `{field}`: {why}"
        ));
    }
    out
}

const USAGE: &str = "usage: memwall-job fusion-chains [--n N] [--repeats R] [--ir-n N] \
                     [--backend cuda|flex] --out FILE.json";

fn usage(why: &str) -> ExitCode {
    eprintln!("fusion-chains: {why}\n{USAGE}");
    ExitCode::from(2)
}

/// Parses the arguments after `fusion-chains`.
///
/// # Errors
/// What is wrong: an unknown flag, a missing value, a count out of the study's ranges
/// (`n` 1..=[`MAX_N`], `repeats` 1..=100, `ir_n` 1..=2^24), no `--out`.
pub fn parse_args(args: &[String]) -> Result<(Options, PathBuf), String> {
    let mut opts = Options::default();
    let mut out = None;
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let count = |lo: usize, hi: usize| -> Result<usize, String> {
            let v: usize = value
                .replace('_', "")
                .parse()
                .map_err(|_| format!("{flag}: `{value}` is not a count"))?;
            if (lo..=hi).contains(&v) {
                Ok(v)
            } else {
                Err(format!("{flag}: {v} is outside {lo}..={hi}"))
            }
        };
        match flag.as_str() {
            "--n" => opts.n = count(1, MAX_N)?,
            "--repeats" => opts.repeats = count(1, 100)?,
            "--ir-n" => opts.ir_n = count(1, 1 << 24)?,
            "--backend" => {
                opts.backend = match value.as_str() {
                    "cuda" => ChainsBackend::Cuda,
                    "flex" => ChainsBackend::Flex,
                    other => return Err(format!("--backend: `{other}` is not cuda or flex")),
                }
            }
            "--out" => out = Some(PathBuf::from(value)),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    let out = out.ok_or("--out FILE.json is required")?;
    Ok((opts, out))
}

/// `memwall-job fusion-chains`: runs the chains, writes the [`FusionChainsRun`] to `--out`
/// and prints a summary. Exits 0 when the file is written, measured or not (the reason is in
/// the file), 2 for wrong arguments, 1 when the file cannot be written.
pub fn cli(args: &[String]) -> ExitCode {
    let (opts, out) = match parse_args(args) {
        Ok(x) => x,
        Err(why) => return usage(&why),
    };
    eprintln!(
        "fusion-chains: {} over {} f32 elements, median of {} (inputs: the fusion_ir study's, ir_n {})",
        opts.backend.as_str(),
        opts.n,
        opts.repeats,
        opts.ir_n
    );
    let result = run(&opts);
    let json = match serde_json::to_vec_pretty(&result) {
        Ok(j) => j,
        Err(e) => {
            eprintln!("error: the result does not serialize: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = memwall_core::record::write_atomic(&out, &json) {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    match &result.chains {
        Ok(c) => {
            for (label, list) in [("fused", &c.fused), ("unfused", &c.unfused)] {
                for b in list.iter() {
                    println!(
                        "{} {label} on {}: {:.3} ms, max abs. difference {:.1e}",
                        b.expr,
                        c.device,
                        b.time_s * 1e3,
                        b.max_abs_diff
                    );
                }
            }
        }
        Err(why) => println!("not measured: {why}"),
    }
    println!("wrote {} in {:.1} s", out.display(), result.wall_s);
    ExitCode::SUCCESS
}
