//! What a job's strategy cannot run with, checked before any work: the combinations of options
//! that no executor implements, each with the fix in its message.

use crate::device::BackendKind;
use memwall_core::spec::{JobSpec, Recompute};

/// Reasons a strategy cannot run on a backend, checked before any work.
pub(super) fn unsupported(spec: &JobSpec) -> Option<String> {
    let s = &spec.strategy;
    if s.fusion && spec.backend != BackendKind::Cuda {
        return Some(format!(
            "kernel fusion: Burn's fusion backend applies to the CubeCL backends (CUDA here); the {} CPU backend has none",
            spec.backend
        ));
    }
    if spec.memory_limit_bytes.is_some() && spec.backend.is_gpu() {
        return Some(format!(
            "memory_limit_bytes is the CPU's limit (its counting allocator); on {} the device's memory is the limit: remove the field from the job",
            spec.backend
        ));
    }
    if s.needs_plan() && spec.plan.is_none() && !spec.profile_only {
        return Some("this strategy runs a segment plan, which the plan stage makes before the run (`memwall run` or `memwall-job sweep-dir`: the job's profiling pass where the plan needs measured costs, then the planner); this job file has none".into());
    }
    if s.policy.is_some() {
        if s.master_weights {
            return Some("a policy runs the unit executor on the model's own parameters; master-weight mixed precision runs plain backward on a 16-bit copy: remove master_weights or the policy".into());
        }
        if s.attention.is_naive() || s.layer_norm.is_composed() {
            return Some("a policy runs the unit executor, which calls memwall's memory-efficient attention and layer norm (saves_input or saves_output) unit by unit: remove `attention = \"naive\"` / `layer_norm = \"composed\"` or the policy".into());
        }
        if !spec.profile_only && spec.plan.is_some() && spec.unit_plan.is_none() {
            return Some("the strategy has a policy but the job has no unit plan (`unit_plan`): make the plan with the plan stage (`memwall run` or `memwall-job sweep-dir`)".into());
        }
    }
    let nested = spec
        .plan
        .as_ref()
        .is_some_and(|p| p.segments.iter().any(|seg| seg.inner.is_some()));
    if nested && s.policy.is_some() {
        return Some("the plan nests checkpoints inside segments (`inner`), which the block-granular segment executor runs; a policy runs the unit executor: remove the policy or the nesting".into());
    }
    if let Some(plan) = &spec.plan {
        if let Err(e) = memwall_core::strategy::check_segments(&plan.segments, spec.model.layers) {
            return Some(format!("the job's plan: {e}"));
        }
    }
    if s.nested_checkpoint.is_some()
        && !matches!(s.recompute, Recompute::EveryK(_) | Recompute::Sqrt)
    {
        return Some("nested_checkpoint splits the segments of `checkpoint = K`: set checkpoint, or remove nested_checkpoint".into());
    }
    let n = spec.train.accumulation_steps;
    if n == 0 || !spec.model.batch.is_multiple_of(n.max(1)) {
        return Some(format!(
            "gradient accumulation: {n} micro-batches do not split the batch of {} sequences evenly: set accumulation_steps to a divisor of the batch",
            spec.model.batch
        ));
    }
    if n > 1 && (s.fused_optimizer || s.master_weights || s.policy.is_some()) {
        return Some("gradient accumulation runs plain backward or a checkpoint plan and steps once after every micro-batch: remove fused_optimizer, master_weights or the policy, or accumulation_steps".into());
    }
    if let Some(chunks) = s.head_chunks {
        if s.master_weights {
            return Some("head_chunks runs the head outside autodiff on the model's own parameters; master-weight mixed precision runs plain backward on a 16-bit copy: remove master_weights or head_chunks".into());
        }
        let tokens = spec.model.batch / n.max(1) * spec.model.seq_len;
        if chunks == 0 || chunks > tokens {
            return Some(format!(
                "head_chunks = {chunks}: use 1 to {tokens}, the tokens of one (micro-)batch, so that every chunk holds at least one token's logits"
            ));
        }
    }
    if s.recompute.is_balanced() && s.fused_optimizer {
        return Some("Burn's BalancedCheckpointing is an autodiff strategy of plain backward; it cannot run with the fused optimizer step".into());
    }
    None
}
