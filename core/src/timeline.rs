//! The memory timeline of one training step: live bytes over the step with its phases marked,
//! and what is live at the step's peak.
//!
//! A timeline answers *when* a configuration reaches its peak and *what* fills it, the
//! question PyTorch users read off `torch.cuda.memory._snapshot()` and its `memory_viz` page.
//! On the CPU the counting allocator gives it exactly: the runner samples the live heap bytes
//! at every phase boundary and at every change of at least [`CPU_GRAIN_BYTES`] (each phase's
//! own high-water mark and the step's exact peak are points of the curve). On CUDA the pool is
//! sampled after a device synchronization at phase boundaries: a lower bound between them.
//!
//! The breakdown at the peak ([`PeakBreakdown`]) splits the measured peak into parts derived
//! from the model's known sizes (parameters, optimizer state, gradients, saved activations from
//! the job's per-block profile) and measured remainders, each part saying which it is; the
//! parts add up to the measured peak by construction.

use serde::{Deserialize, Serialize};

/// The smallest change of the live bytes that the CPU trace records as a point of the curve
/// (bytes); smaller changes accumulate until they reach it. New highs of the step and every
/// phase boundary are recorded whatever their size.
pub const CPU_GRAIN_BYTES: u64 = 16 << 10;

/// Most points a stored timeline keeps (the trace is reduced by [`downsample`]).
pub const MAX_POINTS: usize = 600;

/// A phase of a training step, named at its end ([`Phase::label`] says what it ran). Block
/// ranges are half-open, `first..end`, 0-based.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Phase {
    /// The token and position embeddings.
    Embedding,
    /// The forward pass of blocks `first..end`: with autodiff (their graph kept) or, when
    /// `recompute`, without it (only the segment's input is kept, as its checkpoint).
    Forward {
        /// First block.
        first: u16,
        /// One past the last block.
        end: u16,
        /// Run without autodiff (a recomputed segment's first forward).
        recompute: bool,
    },
    /// The forward pass of every block and the head to the loss, in one autodiff graph
    /// (master-weight mixed precision).
    ForwardAll,
    /// Final norm, head and loss (plain backward: forward only).
    Head,
    /// The head's backward to the last hidden state (segmented steps), with its parameters
    /// stepped at once when `fused`.
    HeadBackward {
        /// The head's parameters were stepped in this phase (optimizer step fused).
        fused: bool,
    },
    /// The backward pass of the whole graph in one `backward()` (plain backward).
    BackwardAll,
    /// The backward pass of blocks `first..end` (recomputed first when `recompute`), their
    /// parameters stepped at once when `fused`.
    Backward {
        /// First block.
        first: u16,
        /// One past the last block.
        end: u16,
        /// The segment's forward ran again first (rematerialization).
        recompute: bool,
        /// The segment's parameters were stepped in this phase.
        fused: bool,
    },
    /// The forward pass without autodiff of blocks `first..end`, an inner segment of a nested
    /// segment, in that segment's backward (nested checkpointing,
    /// [`crate::strategy::Segment::inner`]): only the inner segment's input is kept, as the
    /// checkpoint its own [`Phase::Backward`] recomputes from.
    Recompute {
        /// First block.
        first: u16,
        /// One past the last block.
        end: u16,
    },
    /// The embeddings' backward (segmented steps).
    EmbeddingBackward,
    /// Unscaling and checking the gradients (mixed precision with loss scaling).
    Unscale,
    /// The optimizer step over the parameters whose gradients are still pending (every
    /// parameter, or only the embeddings when the step is fused into backward).
    OptimizerStep,
}

impl Phase {
    /// Whether the phase belongs to the step's forward pass: the embedding, a block's forward
    /// (with autodiff or as a checkpointed segment's first forward), the whole forward, the
    /// head and loss; not a backward phase (rematerialization included), unscaling or the
    /// optimizer step.
    pub fn is_forward(&self) -> bool {
        matches!(
            self,
            Phase::Embedding | Phase::Forward { .. } | Phase::ForwardAll | Phase::Head
        )
    }

    /// What the phase ran, e.g. "backward blocks 4-7 (recomputed, fused update)" (1-based
    /// block numbers, as the reports count layers).
    pub fn label(&self) -> String {
        let blocks = |first: u16, end: u16| {
            if end == first + 1 {
                format!("block {end}")
            } else {
                format!("blocks {}-{}", first + 1, end)
            }
        };
        match *self {
            Phase::Embedding => "embedding".into(),
            Phase::Forward {
                first,
                end,
                recompute,
            } => format!(
                "forward {}{}",
                blocks(first, end),
                if recompute { " (no autodiff)" } else { "" }
            ),
            Phase::ForwardAll => "forward to the loss".into(),
            Phase::Head => "head and loss".into(),
            Phase::HeadBackward { fused } => format!(
                "head backward{}",
                if fused { " (fused update)" } else { "" }
            ),
            Phase::BackwardAll => "backward (one pass)".into(),
            Phase::Backward {
                first,
                end,
                recompute,
                fused,
            } => {
                let mut extra = Vec::new();
                if recompute {
                    extra.push("recomputed");
                }
                if fused {
                    extra.push("fused update");
                }
                if extra.is_empty() {
                    format!("backward {}", blocks(first, end))
                } else {
                    format!("backward {} ({})", blocks(first, end), extra.join(", "))
                }
            }
            Phase::Recompute { first, end } => {
                format!("recompute {} (no autodiff, nested)", blocks(first, end))
            }
            Phase::EmbeddingBackward => "embedding backward".into(),
            Phase::Unscale => "unscale gradients".into(),
            Phase::OptimizerStep => "optimizer step".into(),
        }
    }

    /// The phase as one integer (what a static buffer that cannot allocate stores): kind in
    /// bits 0-7, flags in bits 8-9, first block in bits 16-31, end in bits 32-47.
    pub fn to_bits(&self) -> u64 {
        let (kind, first, end, a, b) = match *self {
            Phase::Embedding => (0, 0, 0, false, false),
            Phase::Forward {
                first,
                end,
                recompute,
            } => (1, first, end, recompute, false),
            Phase::ForwardAll => (2, 0, 0, false, false),
            Phase::Head => (3, 0, 0, false, false),
            Phase::HeadBackward { fused } => (4, 0, 0, fused, false),
            Phase::BackwardAll => (5, 0, 0, false, false),
            Phase::Backward {
                first,
                end,
                recompute,
                fused,
            } => (6, first, end, recompute, fused),
            Phase::EmbeddingBackward => (7, 0, 0, false, false),
            Phase::Unscale => (8, 0, 0, false, false),
            Phase::OptimizerStep => (9, 0, 0, false, false),
            Phase::Recompute { first, end } => (10, first, end, false, false),
        };
        kind | u64::from(a) << 8 | u64::from(b) << 9 | u64::from(first) << 16 | u64::from(end) << 32
    }

    /// The phase [`Phase::to_bits`] encoded; `None` for an integer it never returns.
    pub fn from_bits(bits: u64) -> Option<Phase> {
        let (a, b) = (bits >> 8 & 1 == 1, bits >> 9 & 1 == 1);
        let (first, end) = ((bits >> 16) as u16, (bits >> 32) as u16);
        Some(match bits & 0xff {
            0 => Phase::Embedding,
            1 => Phase::Forward {
                first,
                end,
                recompute: a,
            },
            2 => Phase::ForwardAll,
            3 => Phase::Head,
            4 => Phase::HeadBackward { fused: a },
            5 => Phase::BackwardAll,
            6 => Phase::Backward {
                first,
                end,
                recompute: a,
                fused: b,
            },
            7 => Phase::EmbeddingBackward,
            8 => Phase::Unscale,
            9 => Phase::OptimizerStep,
            10 => Phase::Recompute { first, end },
            _ => return None,
        })
    }

    /// The pass the phase belongs to, for shading: "forward", "backward" or "optimizer".
    pub fn pass(&self) -> &'static str {
        match self {
            Phase::Embedding | Phase::Forward { .. } | Phase::ForwardAll | Phase::Head => "forward",
            Phase::HeadBackward { .. }
            | Phase::BackwardAll
            | Phase::Backward { .. }
            | Phase::Recompute { .. }
            | Phase::EmbeddingBackward
            | Phase::Unscale => "backward",
            Phase::OptimizerStep => "optimizer",
        }
    }
}

/// One phase of a traced step: when it ran and the live bytes at its ends and at its own
/// high-water mark.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PhaseSpan {
    /// The phase.
    pub phase: Phase,
    /// Start, seconds from the step's start.
    pub start_s: f64,
    /// End, seconds from the step's start.
    pub end_s: f64,
    /// Live bytes at the start.
    pub start_bytes: u64,
    /// Live bytes at the end.
    pub end_bytes: u64,
    /// The phase's high-water mark (bytes): exact on the CPU, the largest sample on CUDA.
    pub peak_bytes: u64,
}

/// One part of what is live at the peak.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeakPart {
    /// What the bytes are, e.g. "parameters".
    pub name: String,
    /// Bytes (negative only for a measured remainder smaller than the derived parts before
    /// it, which then says the derivation over-counts).
    pub bytes: i64,
    /// `true`: measured (a difference of exact allocator counts); `false`: derived from sizes.
    pub measured: bool,
    /// How the number was obtained (a formula over sizes, or the counts it is the difference
    /// of).
    pub how: String,
}

/// What is live at a step's peak, in parts that add up to the measured peak.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeakBreakdown {
    /// The phase in which the peak happened (index into [`StepTimeline::phases`]).
    pub phase: usize,
    /// The parts, in order: the steady state (parameters, optimizer state, other), what the
    /// earlier phases of the step left (gradients, saved activations, the rest), and what the
    /// peak's own phase had allocated up to the peak.
    pub parts: Vec<PeakPart>,
}

impl PeakBreakdown {
    /// The sum of the parts (bytes): the measured peak when the breakdown is well formed.
    pub fn total(&self) -> i64 {
        self.parts.iter().map(|p| p.bytes).sum()
    }
}

/// The memory timeline of one traced training step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepTimeline {
    /// The step traced (index into the record's steps).
    pub step: usize,
    /// What the curve's bytes are and how they were sampled.
    pub source: String,
    /// The curve is exact (every change of at least the grain, every new high and every phase
    /// boundary) rather than samples that bound it from below.
    pub exact: bool,
    /// The step's duration (seconds), as traced.
    pub duration_s: f64,
    /// Live bytes when the step began (parameters, optimizer state, batch: the steady state).
    pub start_bytes: u64,
    /// The step's high-water mark (bytes): the record's peak of this step.
    pub peak_bytes: u64,
    /// When the peak happened, seconds from the step's start.
    pub peak_at_s: f64,
    /// The curve: (seconds from the step's start, live bytes), in time order, at most
    /// [`MAX_POINTS`] points.
    pub points: Vec<(f64, u64)>,
    /// The trace dropped points past its buffer (the curve is then coarser, not wrong at its
    /// points).
    #[serde(default)]
    pub truncated: bool,
    /// The phases, in order.
    pub phases: Vec<PhaseSpan>,
    /// The sizes what is live at the peak is derived from ([`StepTimeline::at_peak`]); absent
    /// where they are not known (master-weight mixed precision keeps the parameters in two
    /// dtypes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sizes: Option<KnownSizes>,
    /// The optimizer step was fused into backward (each segment's parameters stepped there).
    #[serde(default)]
    pub fused: bool,
}

impl StepTimeline {
    /// The index of the phase that holds time `t_s` (the last phase that starts at or before
    /// it), `None` without phases.
    pub fn phase_at(&self, t_s: f64) -> Option<usize> {
        if self.phases.is_empty() {
            return None;
        }
        let i = self
            .phases
            .iter()
            .rposition(|p| p.start_s <= t_s)
            .unwrap_or(0);
        Some(i)
    }

    /// What is live at the peak ([`breakdown`] from the recorded sizes); `None` without sizes or
    /// phases.
    pub fn at_peak(&self) -> Option<PeakBreakdown> {
        breakdown(self, self.sizes.as_ref()?, self.fused)
    }

    /// The phase in which the step reached its peak: the first whose own high-water mark is
    /// the step's peak, else the one holding [`StepTimeline::peak_at_s`].
    pub fn peak_phase(&self) -> Option<usize> {
        self.phases
            .iter()
            .position(|p| p.peak_bytes == self.peak_bytes)
            .or_else(|| self.phase_at(self.peak_at_s))
    }
}

/// Reduces `points` (time-ordered) to at most `max` points that keep the curve's shape: the
/// first and last points, the highest point, and per equal slice of the points its lowest and
/// highest (in time order). `max` below 4 keeps the first, highest and last.
pub fn downsample(points: &[(f64, u64)], max: usize) -> Vec<(f64, u64)> {
    if points.len() <= max {
        return points.to_vec();
    }
    let top = points
        .iter()
        .enumerate()
        .max_by(|a, b| a.1 .1.cmp(&b.1 .1).then(b.0.cmp(&a.0)))
        .map_or(0, |(i, _)| i);
    let mut keep = vec![0, points.len() - 1, top];
    let slices = (max.saturating_sub(3) / 2).max(1);
    let inner = &points[1..points.len() - 1];
    for s in 0..slices {
        let (a, b) = (s * inner.len() / slices, (s + 1) * inner.len() / slices);
        if a >= b {
            continue;
        }
        let slice = &inner[a..b];
        let lo = (0..slice.len()).min_by_key(|&i| slice[i].1).unwrap_or(0);
        let hi = (0..slice.len()).max_by_key(|&i| slice[i].1).unwrap_or(0);
        keep.push(1 + a + lo);
        keep.push(1 + a + hi);
    }
    keep.sort_unstable();
    keep.dedup();
    keep.truncate(max.max(3));
    if !keep.contains(&top) {
        keep.pop();
        keep.push(top);
        keep.sort_unstable();
    }
    keep.into_iter().map(|i| points[i]).collect()
}

/// The sizes a [`PeakBreakdown`] is derived from (bytes), known from the model, the optimizer
/// and the job's per-block profile.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KnownSizes {
    /// Every parameter: Σ elements x bytes per element.
    pub parameter_bytes: u64,
    /// The optimizer's state for every parameter, from its definition (AdamW: two moments per
    /// element; Adafactor: its factored second moment).
    pub optimizer_state_bytes: u64,
    /// How `optimizer_state_bytes` was derived, e.g. "AdamW: 2 moments x parameter bytes".
    pub optimizer_state_how: String,
    /// The parameters of each block (bytes; its gradient has the same size).
    pub block_parameter_bytes: Vec<u64>,
    /// The gradients the head's backward leaves (bytes): the final norm's and the head's (the
    /// token embedding's when the head is tied to it).
    pub head_grad_bytes: u64,
    /// The token embedding's bytes when the head is tied to it (its gradient from the head is
    /// held until the embeddings' backward, also in a fused step), else 0.
    pub tied_embedding_bytes: u64,
    /// The token and position embeddings' parameters (bytes).
    pub embedding_parameter_bytes: u64,
    /// The bytes each block's autodiff graph keeps after its forward pass (the profile's
    /// `activation_bytes`).
    pub block_activation_bytes: Vec<u64>,
    /// The bytes of each block's input (a checkpoint's size).
    pub block_input_bytes: Vec<u64>,
}

/// What is live at the peak of `t`, from `sizes`: the steady state split into parameters,
/// optimizer state (both derived) and the rest (measured minus derived); the bytes the earlier
/// phases of the step left at the start of the peak's phase split into gradients and saved
/// activations where the phase says which exist (derived) and the rest (measured minus
/// derived); and what the peak's own phase allocated up to the peak (measured), with the
/// recomputed activations named when the phase recomputes a segment. `None` when the timeline
/// has no phase.
///
/// Which gradients and activations exist at a phase's start follows the executor
/// (`memwall-runner`'s `segment` module): in forward, the graphs (or checkpoints) of the
/// segments before it; in a segment's backward, the graphs of the segments before it and its
/// own (or its checkpoint), the gradients of the head and of the segments after it (none of
/// the blocks' when the step is fused); at the optimizer step, every gradient (or the
/// embeddings' only when fused) and no activation; at the start of a one-pass backward the
/// whole graph and no gradient (inside it activations are freed as gradients appear, which the
/// phase's own part holds).
pub fn breakdown(t: &StepTimeline, sizes: &KnownSizes, fused: bool) -> Option<PeakBreakdown> {
    let index = t.peak_phase()?;
    let span = t.phases[index];
    let steady = t.start_bytes as i64;
    let params = sizes.parameter_bytes as i64;
    let state = sizes.optimizer_state_bytes as i64;
    let mut parts = vec![
        PeakPart {
            name: "parameters".into(),
            bytes: params,
            measured: false,
            how: "Σ parameter elements x bytes per element".into(),
        },
        PeakPart {
            name: "optimizer state".into(),
            bytes: state,
            measured: false,
            how: sizes.optimizer_state_how.clone(),
        },
        PeakPart {
            name: "batch, data and runtime".into(),
            bytes: steady - params - state,
            measured: true,
            how: "live bytes at the step's start minus the parameters and optimizer state".into(),
        },
    ];
    let carried = span.start_bytes as i64 - steady;
    // With gradient accumulation the step runs its forward and backward phases once per
    // micro-batch: what the peak's phase carries is the current micro-batch's, from its
    // embedding on, and the gradient set the earlier micro-batches accumulated.
    let micro_start = if span.phase == Phase::Embedding {
        index
    } else {
        t.phases[..index]
            .iter()
            .rposition(|p| p.phase == Phase::Embedding)
            .unwrap_or(0)
    };
    let accumulated = t.phases[..micro_start]
        .iter()
        .any(|p| matches!(p.phase, Phase::BackwardAll | Phase::EmbeddingBackward));
    let (mut grads, acts) = carried_parts(&t.phases[micro_start..index], &span.phase, sizes, fused);
    if accumulated {
        grads = grads.map(|(bytes, how)| {
            (
                bytes + sizes.parameter_bytes,
                format!(
                    "{how}; and the gradients the earlier micro-batches accumulated, one per \
                     parameter (gradient accumulation)"
                ),
            )
        });
    }
    let mut derived = 0;
    if let Some((bytes, how)) = grads {
        derived += bytes as i64;
        parts.push(PeakPart {
            name: "gradients".into(),
            bytes: bytes as i64,
            measured: false,
            how,
        });
    }
    if let Some((bytes, how)) = acts {
        derived += bytes as i64;
        parts.push(PeakPart {
            name: "saved activations and checkpoints".into(),
            bytes: bytes as i64,
            measured: false,
            how,
        });
    }
    parts.push(PeakPart {
        name: match span.phase {
            _ if derived == 0 && grads_and_acts_unknown(&span.phase) => {
                "left by the earlier phases (activations, the head's graph, not separated)".into()
            }
            Phase::HeadBackward { .. } | Phase::BackwardAll => {
                "left by the earlier phases, not derived (the head's graph: logits, log-softmax)"
                    .into()
            }
            _ => "left by the earlier phases, not derived (workspace, caches)".into(),
        },
        bytes: carried - derived,
        measured: true,
        how: format!(
            "live bytes at the start of \"{}\" minus the step's start{}",
            span.phase.label(),
            if derived > 0 {
                ", minus the derived parts above"
            } else {
                ""
            }
        ),
    });
    let own = t.peak_bytes as i64 - span.start_bytes as i64;
    if let Phase::Backward {
        first,
        end,
        recompute: true,
        ..
    } = span.phase
    {
        let recomputed: u64 = (first as usize..end as usize)
            .filter_map(|i| sizes.block_activation_bytes.get(i))
            .sum();
        parts.push(PeakPart {
            name: "recomputed activations".into(),
            bytes: recomputed as i64,
            measured: false,
            how: format!(
                "the profile's activation bytes of {}",
                blocks_text(first, end)
            ),
        });
        parts.push(PeakPart {
            name: format!("allocated in \"{}\", other", span.phase.label()),
            bytes: own - recomputed as i64,
            measured: true,
            how: "peak minus the phase's start, minus the recomputed activations".into(),
        });
    } else {
        parts.push(PeakPart {
            name: format!("allocated in \"{}\" up to the peak", span.phase.label()),
            bytes: own,
            measured: true,
            how: "peak minus the live bytes at the phase's start".into(),
        });
    }
    Some(PeakBreakdown {
        phase: index,
        parts,
    })
}

fn blocks_text(first: u16, end: u16) -> String {
    if end == first + 1 {
        format!("block {end}")
    } else {
        format!("blocks {}-{}", first + 1, end)
    }
}

/// After a whole-graph forward (master-weight mixed precision) and in unscaling the
/// activations and gradients carried are not separated.
fn grads_and_acts_unknown(p: &Phase) -> bool {
    matches!(p, Phase::ForwardAll | Phase::Unscale)
}

type Derived = Option<(u64, String)>;

/// The gradients and saved activations live at the start of `phase`, given the phases before
/// it (`done`), each with how it was derived; `None` where the phase does not say.
fn carried_parts(
    done: &[PhaseSpan],
    phase: &Phase,
    s: &KnownSizes,
    fused: bool,
) -> (Derived, Derived) {
    let act = |i: usize| s.block_activation_bytes.get(i).copied().unwrap_or(0);
    let input = |i: usize| s.block_input_bytes.get(i).copied().unwrap_or(0);
    let grad = |i: usize| s.block_parameter_bytes.get(i).copied().unwrap_or(0);
    let blocks = s.block_activation_bytes.len();
    // What the forward phases kept, per block range.
    let kept: Vec<(u16, u16, bool)> = done
        .iter()
        .filter_map(|p| match p.phase {
            Phase::Forward {
                first,
                end,
                recompute,
            } => Some((first, end, recompute)),
            _ => None,
        })
        .collect();
    // The inner checkpoints of a nested segment being backpropagated: the outputs of its
    // recomputation without autodiff, each the input of the next inner segment (the first
    // inner segment's input is the segment's own checkpoint, counted with the forward's). The
    // recomputations of the nested segments done before end after every block still to come,
    // so a block bound picks the current segment's.
    let inner: Vec<u16> = done
        .iter()
        .filter_map(|p| match p.phase {
            Phase::Recompute { end, .. } => Some(end),
            _ => None,
        })
        .collect();
    let kept_bytes = |upto: u16| -> u64 {
        let forward: u64 = kept
            .iter()
            .filter(|(first, _, _)| *first < upto)
            .map(|&(first, end, recompute)| {
                if recompute {
                    input(first as usize)
                } else {
                    (first as usize..end as usize).map(act).sum()
                }
            })
            .sum();
        let nested: u64 = inner
            .iter()
            .filter(|end| **end < upto)
            .map(|&end| input(end as usize))
            .sum();
        forward + nested
    };
    // Blocks whose backward has run (their parameter gradients exist): from the first block of
    // the earliest backward phase done.
    let done_from = done
        .iter()
        .filter_map(|p| match p.phase {
            Phase::Backward { first, .. } => Some(first as usize),
            _ => None,
        })
        .min()
        .unwrap_or(blocks);
    match *phase {
        Phase::Embedding | Phase::ForwardAll => (Some((0, "none yet in this step".into())), Some((0, "none yet".into()))),
        Phase::Forward { first, .. } => (
            Some((0, "none yet in this step".into())),
            Some((
                kept_bytes(first),
                format!(
                    "the profile's activation bytes of the stored blocks before block {}, and the inputs of the recomputed segments (checkpoints)",
                    first + 1
                ),
            )),
        ),
        // The whole forward is kept: every stored block's graph and the checkpoints (every
        // block's graph on the plain path, whose forward phases are not segments).
        Phase::Head | Phase::HeadBackward { .. } | Phase::BackwardAll => (
            Some((0, "none yet in this step".into())),
            Some((
                if kept.is_empty() {
                    (0..blocks).map(act).sum()
                } else {
                    kept_bytes(u16::MAX)
                },
                "the profile's activation bytes of every stored block, and the checkpoints".into(),
            )),
        ),
        Phase::Unscale => (None, None),
        Phase::Recompute { first, .. } => {
            let g = if fused {
                (
                    s.tied_embedding_bytes,
                    "the tied token embedding's gradient from the head, if tied (each segment's are applied and dropped in its phase)".into(),
                )
            } else {
                (
                    s.head_grad_bytes + (done_from..blocks).map(grad).sum::<u64>(),
                    format!(
                        "the head's gradients and those of blocks {}-{} (each the size of its parameter)",
                        done_from + 1,
                        blocks
                    ),
                )
            };
            (
                Some(g),
                Some((
                    kept_bytes(first + 1),
                    format!(
                        "the checkpoints up to block {}: the recomputed segments' inputs and the inner checkpoints recomputed so far",
                        first + 1
                    ),
                )),
            )
        }
        Phase::Backward { first: _, end, .. } => {
            let after: u64 = (end as usize..blocks).map(grad).sum();
            let g = if fused {
                (
                    s.tied_embedding_bytes,
                    "the tied token embedding's gradient from the head, if tied (each segment's are applied and dropped in its phase)".into(),
                )
            } else {
                (
                    s.head_grad_bytes + after,
                    format!(
                        "the head's gradients and those of blocks {}-{} (each the size of its parameter)",
                        end + 1,
                        blocks
                    ),
                )
            };
            (
                Some(g),
                Some((
                    kept_bytes(end),
                    format!(
                        "the profile's activation bytes of the stored blocks up to block {end}, and the checkpoints of recomputed segments up to it (inner checkpoints of a nested segment included)"
                    ),
                )),
            )
        }
        Phase::EmbeddingBackward => {
            let g = if fused {
                (s.tied_embedding_bytes, "the tied token embedding's gradient from the head, if tied".into())
            } else {
                (
                    s.head_grad_bytes + (0..blocks).map(grad).sum::<u64>(),
                    "the head's and every block's gradients".into(),
                )
            };
            (Some(g), Some((0, "none (all freed by backward)".into())))
        }
        Phase::OptimizerStep => {
            let g = if fused {
                (
                    s.embedding_parameter_bytes,
                    "the embeddings' (the other parameters were stepped in backward)".into(),
                )
            } else {
                (s.parameter_bytes, "every parameter's bytes (a gradient per parameter)".into())
            };
            (Some(g), Some((0, "none (all freed by backward)".into())))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(phase: Phase, start_s: f64, start: u64, peak: u64, end: u64) -> PhaseSpan {
        PhaseSpan {
            phase,
            start_s,
            end_s: start_s + 1.0,
            start_bytes: start,
            end_bytes: end,
            peak_bytes: peak,
        }
    }

    fn sizes() -> KnownSizes {
        KnownSizes {
            parameter_bytes: 1000,
            optimizer_state_bytes: 2000,
            optimizer_state_how: "AdamW: 2 x parameter bytes".into(),
            block_parameter_bytes: vec![300, 300],
            head_grad_bytes: 400,
            tied_embedding_bytes: 0,
            embedding_parameter_bytes: 100,
            block_activation_bytes: vec![50, 50],
            block_input_bytes: vec![10, 10],
        }
    }

    #[test]
    fn the_parts_add_up_to_the_peak_in_every_phase() {
        let f = |first, end, recompute| Phase::Forward {
            first,
            end,
            recompute,
        };
        let b = |first, end, recompute| Phase::Backward {
            first,
            end,
            recompute,
            fused: false,
        };
        let phases = [
            span(f(0, 1, true), 0.0, 3100, 3160, 3110),
            span(f(1, 2, false), 1.0, 3110, 3170, 3160),
            span(Phase::HeadBackward { fused: false }, 2.0, 3160, 3900, 3560),
            span(b(1, 2, false), 3.0, 3560, 3950, 3870),
            span(b(0, 1, true), 4.0, 3870, 4321, 4100),
            span(Phase::OptimizerStep, 5.0, 4100, 4200, 3100),
        ];
        for peak_phase in 0..phases.len() {
            let mut ps = phases.to_vec();
            for (i, p) in ps.iter_mut().enumerate() {
                if i != peak_phase {
                    p.peak_bytes = p.peak_bytes.min(3000 + i as u64);
                }
            }
            let peak = ps[peak_phase].peak_bytes;
            let t = StepTimeline {
                step: 7,
                source: String::new(),
                exact: true,
                duration_s: 6.0,
                start_bytes: 3100,
                peak_bytes: peak,
                peak_at_s: ps[peak_phase].start_s + 0.5,
                points: vec![],
                truncated: false,
                phases: ps,
                sizes: None,
                fused: false,
            };
            let b = breakdown(&t, &sizes(), false).unwrap();
            assert_eq!(b.phase, peak_phase);
            assert_eq!(b.total(), peak as i64, "phase {peak_phase}: {b:?}");
        }
    }

    #[test]
    fn a_recomputed_segment_s_backward_names_its_recomputed_activations() {
        let t = StepTimeline {
            step: 0,
            source: String::new(),
            exact: true,
            duration_s: 2.0,
            start_bytes: 3100,
            peak_bytes: 4000,
            peak_at_s: 1.5,
            points: vec![],
            truncated: false,
            phases: vec![
                span(
                    Phase::Forward {
                        first: 0,
                        end: 2,
                        recompute: true,
                    },
                    0.0,
                    3100,
                    3200,
                    3110,
                ),
                span(
                    Phase::Backward {
                        first: 0,
                        end: 2,
                        recompute: true,
                        fused: false,
                    },
                    1.0,
                    3510,
                    4000,
                    3600,
                ),
            ],
            sizes: None,
            fused: false,
        };
        let b = breakdown(&t, &sizes(), false).unwrap();
        let part = |n: &str| b.parts.iter().find(|p| p.name == n).unwrap().bytes;
        assert_eq!(part("parameters"), 1000);
        assert_eq!(part("optimizer state"), 2000);
        assert_eq!(part("batch, data and runtime"), 100);
        // The head's and embeddings' gradients (no block after the segment), the checkpoint.
        assert_eq!(part("gradients"), 400);
        assert_eq!(part("saved activations and checkpoints"), 10);
        assert_eq!(part("recomputed activations"), 100);
        assert_eq!(b.total(), 4000);
    }

    /// Nested checkpointing of one three-block segment with one-block inner segments (the
    /// executor recomputes the first two without autodiff; the last one's input is the second's
    /// output): at the last block's backward the segment's checkpoint and the inputs of blocks 2
    /// and 3 are carried, and block 3's activations are recomputed.
    #[test]
    fn a_nested_segment_s_backward_carries_its_inner_checkpoints() {
        let sizes = KnownSizes {
            block_parameter_bytes: vec![300; 3],
            block_activation_bytes: vec![50; 3],
            block_input_bytes: vec![10; 3],
            ..sizes()
        };
        let f = Phase::Forward {
            first: 0,
            end: 3,
            recompute: true,
        };
        let r = |first| Phase::Recompute {
            first,
            end: first + 1,
        };
        let b = |first| Phase::Backward {
            first,
            end: first + 1,
            recompute: true,
            fused: false,
        };
        let mut t = StepTimeline {
            step: 0,
            source: String::new(),
            exact: true,
            duration_s: 6.0,
            start_bytes: 3100,
            peak_bytes: 3800,
            peak_at_s: 3.5,
            points: vec![],
            truncated: false,
            phases: vec![
                span(f, 0.0, 3100, 3200, 3110),
                span(r(0), 1.0, 3510, 3560, 3520),
                span(r(1), 2.0, 3520, 3580, 3530),
                span(b(2), 3.0, 3530, 3800, 3770),
                span(b(1), 4.0, 3770, 3790, 3700),
                span(b(0), 5.0, 3700, 3750, 3400),
            ],
            sizes: None,
            fused: false,
        };
        let part = |b: &PeakBreakdown, n: &str| b.parts.iter().find(|p| p.name == n).unwrap().bytes;
        let at_last = breakdown(&t, &sizes, false).unwrap();
        assert_eq!(at_last.phase, 3);
        // The head's gradients; the segment's checkpoint and the inputs of blocks 2 and 3.
        assert_eq!(part(&at_last, "gradients"), 400);
        assert_eq!(part(&at_last, "saved activations and checkpoints"), 30);
        assert_eq!(part(&at_last, "recomputed activations"), 50);
        assert_eq!(at_last.total(), 3800);
        // At block 2's backward, block 3's gradients are pending and its input is released.
        t.peak_bytes = 3950;
        t.phases[4].peak_bytes = 3950;
        let at_second = breakdown(&t, &sizes, false).unwrap();
        assert_eq!(at_second.phase, 4);
        assert_eq!(part(&at_second, "gradients"), 400 + 300);
        assert_eq!(part(&at_second, "saved activations and checkpoints"), 20);
        // Peaking in the second recomputation: the segment's checkpoint and block 2's input,
        // which it runs from.
        t.peak_bytes = 3900;
        t.phases[4].peak_bytes = 3790;
        t.phases[2].peak_bytes = 3900;
        let in_recompute = breakdown(&t, &sizes, false).unwrap();
        assert_eq!(in_recompute.phase, 2);
        assert_eq!(part(&in_recompute, "saved activations and checkpoints"), 20);
        assert_eq!(part(&in_recompute, "gradients"), 400);
        assert_eq!(in_recompute.total(), 3900);
        assert_eq!(t.phases[2].phase.pass(), "backward");
        assert!(!t.phases[2].phase.is_forward());
    }

    /// Two micro-batches of plain backward (gradient accumulation): at the second one's
    /// backward only its own forward is carried, beside the gradients the first accumulated.
    #[test]
    fn a_later_micro_batch_carries_its_own_activations_and_the_accumulated_gradients() {
        let f = |first| Phase::Forward {
            first,
            end: first + 1,
            recompute: false,
        };
        let micro = |at: f64, start: u64, grads: u64| {
            let s = start + grads;
            vec![
                span(Phase::Embedding, at, s, s + 5, s + 5),
                span(f(0), at + 1.0, s + 5, s + 60, s + 55),
                span(f(1), at + 2.0, s + 55, s + 110, s + 105),
                span(Phase::Head, at + 3.0, s + 105, s + 160, s + 150),
                span(
                    Phase::BackwardAll,
                    at + 4.0,
                    s + 150,
                    3000 + s,
                    s + 1000 - grads,
                ),
            ]
        };
        let mut phases = micro(0.0, 3100, 0);
        phases.extend(micro(5.0, 3100, 1000));
        phases.push(span(Phase::OptimizerStep, 10.0, 5100, 5200, 4100));
        let peak = phases[9].peak_bytes;
        let t = StepTimeline {
            step: 0,
            source: String::new(),
            exact: true,
            duration_s: 11.0,
            start_bytes: 3100,
            peak_bytes: peak,
            peak_at_s: 9.5,
            points: vec![],
            truncated: false,
            phases,
            sizes: None,
            fused: false,
        };
        let b = breakdown(&t, &sizes(), false).unwrap();
        assert_eq!(b.phase, 9);
        let part = |n: &str| b.parts.iter().find(|p| p.name == n).unwrap().bytes;
        assert_eq!(
            part("gradients"),
            1000,
            "the first micro-batch's, accumulated"
        );
        assert_eq!(
            part("saved activations and checkpoints"),
            100,
            "one micro-batch's"
        );
        assert_eq!(b.total(), peak as i64);
    }

    #[test]
    fn a_phase_survives_its_bits() {
        let phases = [
            Phase::Embedding,
            Phase::Forward {
                first: 3,
                end: 9,
                recompute: true,
            },
            Phase::ForwardAll,
            Phase::Head,
            Phase::HeadBackward { fused: true },
            Phase::BackwardAll,
            Phase::Backward {
                first: 0,
                end: 128,
                recompute: false,
                fused: true,
            },
            Phase::Backward {
                first: 7,
                end: 8,
                recompute: true,
                fused: false,
            },
            Phase::Recompute { first: 4, end: 6 },
            Phase::EmbeddingBackward,
            Phase::Unscale,
            Phase::OptimizerStep,
        ];
        for p in phases {
            assert_eq!(Phase::from_bits(p.to_bits()), Some(p));
        }
        assert_eq!(Phase::from_bits(0xff), None);
    }

    #[test]
    fn downsampling_keeps_the_ends_and_the_peak() {
        let pts: Vec<(f64, u64)> = (0..10_000)
            .map(|i| {
                (
                    i as f64,
                    ((i * 7919) % 1000) as u64 + if i == 6_543 { 5000 } else { 0 },
                )
            })
            .collect();
        let d = downsample(&pts, 100);
        assert!(d.len() <= 100, "{}", d.len());
        assert_eq!(d.first(), pts.first());
        assert_eq!(d.last(), pts.last());
        assert!(d.contains(&pts[6_543]));
        assert!(d.windows(2).all(|w| w[0].0 < w[1].0));
        // Short curves are kept whole.
        assert_eq!(downsample(&pts[..50], 100), pts[..50].to_vec());
    }
}
