#!/usr/bin/env python3
"""PyTorch twin for memwall's peak_memory study: one configuration at a time.

Trains memwall's decoder-only transformer (pre-norm, q/k/v/o without bias, GELU MLP without
bias, LayerNorm with bias, learned positions, head tied to the token embedding, loss in f32)
in PyTorch eager, for the configuration named by --config in the plan file that
`memwall bundle` writes (reference/<study>.plan.json), and prints one JSON row
(format memwall-torch-row/1) that `memwall import` stores beside memwall's records:

- optimizer: the configuration's `optimizer` (absent in older plans: `adamw`) with its `lr`
  and `weight_decay` (absent: the plan's `train.lr` / `train.weight_decay`): `adamw` is
  `torch.optim.AdamW`; `adafactor` is `Adafactor` below, the algorithm of memwall's
  `runner/src/train/adafactor.rs` (Shazeer and Stern 2018 as forgather runs it), because
  `torch.optim.Adafactor` always scales its step by the parameters' RMS and by
  min(lr, 1/sqrt(t)) (the paper's relative step), which forgather's study does not use;

- precision: parameters and activations in f32 / f16 / bf16 (`model.to(dtype)`), loss in f32;
  f32 matmuls at "highest" precision (no TF32), as in the source study;
- checkpoint K: `torch.utils.checkpoint` (non-reentrant) around every segment of K blocks;
- fused_optimizer: an optimizer step per parameter in `register_post_accumulate_grad_hook`
  (the gradient is freed right after its step), instead of one optimizer step after backward;
- compile: `torch.compile(model)`;
- activation_memory_budget B: `torch._functorch.config.activation_memory_budget = B` with
  `torch.compile` (the partitioner's memory budget);
- attention: `sdpa` (`F.scaled_dot_product_attention`, causal) or `naive` (scores materialized).

Measured: `torch.cuda.max_memory_allocated()` / `max_memory_reserved()` over the whole run
(bytes; null without CUDA), the median wall time of the measured steps (device synchronized
before and after each step, seconds), samples/s = batch / median step time, and the first
step's wall time (compilation included). Tokens are random (seeded): memory and speed do not
depend on the text.

On the CPU (`--device cpu`, what `memwall twin --device cpu` runs) PyTorch keeps no
allocator statistics (torch.cuda's and torch.accelerator's are for accelerators; the profiler's
`profile_memory` does not give a whole-run peak), so the row's peak is what the process can
tell: `max_rss_bytes`, the resident high-water mark of this process at the end of the run
(`getrusage(RUSAGE_SELF).ru_maxrss`, KiB on Linux, times 1024), which includes the interpreter,
libtorch and its kernels: an upper bound of what the training needs. Beside it,
`rss_after_import_bytes` is the resident set right after `import torch`, before the model
exists (`/proc/self/statm`). `device` is the CPU's `model name` in /proc/cpuinfo, the name
memwall's CPU records carry; `device_type` is "cpu" or "cuda"; `threads` is
`torch.get_num_threads()` after `torch.set_num_threads(--threads)` (default: the CPUs this
process may run on, which is memwall's count).

`process_order` is the configuration's place among those its Python process ran (1: the
first, or the only one); `wall_s` is its wall time in that process (seconds, `import torch` and
the CUDA context included for the first). With `--serve` one process runs configuration after
configuration (what a GPU bundle's run.sh does with a tier's twins: Python, `import torch` and
the CUDA context once instead of once per twin). Between configurations it frees the model and
optimizer, resets torch.compile's caches (`torch._dynamo.reset()`), the partitioner's memory
budget and the allocator's peak statistics, and empties the CUDA cache, so each row's
`max_memory_allocated`/`max_memory_reserved` cover that configuration's run alone. The process's
resident high-water mark cannot be reset: `max_rss_bytes` is left null after the first
configuration (so a served CPU row is not a CPU peak; run.sh serves only on CUDA).

Usage:
    python3 torch_peak_memory.py --plan reference/peak_memory.plan.json --config control \
        [--out row.json] [--device auto|cuda|cpu] [--threads N] [--tiny] [--pareto]
    python3 torch_peak_memory.py --serve [--device auto|cuda|cpu] [--threads N] [--tiny]

--serve reads one request per line on standard input, `PLAN<TAB>CONFIG<TAB>OUT<TAB>LOG`: it
runs CONFIG of PLAN, writes the row to OUT (atomically) and everything it prints to LOG, then
answers one line on standard output, `done<TAB>STATUS` (the row's status) or `error<TAB>WHY`
(bad plan or configuration: no row); it ends at the end of its input.

--pareto (for a configuration with `activation_memory_budget`) also records PyTorch's own
memory-budget Pareto front, what PARTITIONER_MEMORY_BUDGET_PARETO=1 plots (the source's "Memory
Budget Pareto"), as numbers in the row's `memory_budget_pareto` (see ParetoCapture); the
partitioner's bisection runs inside the first step, so that row's `first_step_s` includes it
(each graph's `bisection_s`).

--tiny replaces the plan's model with a 2-layer, d_model-64 model and 1 + 2 steps (to check
the script on a CPU). Exit status 0 whenever a row was written (also for out of memory);
2 for bad arguments or plan.
"""

import argparse
import contextlib
import datetime
import gc
import json
import math
import os
import statistics
import sys
import time

ROW_FORMAT = "memwall-torch-row/1"
PLAN_FORMAT = "memwall-torch-plan/1"
TINY_MODEL = {"layers": 2, "d_model": 64, "heads": 2, "d_ff": 128, "seq_len": 32, "batch": 2,
              "vocab": 320, "tie_embeddings": True}
TINY_TRAIN = {"steps": 2, "warmup_steps": 1}


# Adafactor (Shazeer and Stern 2018, "Adafactor: Adaptive Learning Rates with Sublinear Memory
# Cost", arXiv:1804.04235, Algorithms 4 and 5) with the settings of forgather's Adafactor
# (jdinalt/forgather, src/forgather/ml/optim/adafactor.py) as its peak_memory study builds it
# (lr 2e-4, weight decay 0.01, every other argument at its default). The same constants as
# memwall's runner/src/train/adafactor.rs; reference/adafactor_reference.py checks this
# implementation against the paper's formulas and transformers' Adafactor.
ADAFACTOR_DECAY_RATE = -0.8   # beta2_t = 1 - t^-0.8 (paper Section 7.1)
ADAFACTOR_BETA2_MAX = 0.999   # forgather clamps beta2_t at betas[1] (not in the paper)
ADAFACTOR_EPS1 = 1e-30        # added to every squared gradient (paper's epsilon_1)
ADAFACTOR_CLIP = 1.0          # update clipping threshold d (paper Section 6)


def adafactor_beta2(t):
    """The second-moment decay of step t (1-based): min(1 - t^-0.8, 0.999)."""
    return min(1.0 - t ** ADAFACTOR_DECAY_RATE, ADAFACTOR_BETA2_MAX)


def adafactor_step(torch, p, grad, state, lr, weight_decay):
    """One Adafactor step on parameter `p` (in place) with gradient `grad`; `state` is the
    parameter's dict (empty before the first step). Returns RMS(U_t) before clipping.

    Computed in f32 (f64 for f64 parameters) whatever `p`'s dtype, statistics in f32:
    - rank >= 2, seen as [n, m] (leading dimensions flattened, as forgather does):
      R_t = b R_{t-1} + (1 - b) (G^2 + eps1) 1_m  ([n], row sums),
      C_t = b C_{t-1} + (1 - b) 1_n^T (G^2 + eps1)  ([m], column sums),
      U_t = G / sqrt(R_t C_t / (1_n^T R_t)), as G * rsqrt(R_t / sum R_t) (x) rsqrt(C_t)
      (Algorithm 4; the outer product of the two scales never underflows where R_t C_t would);
    - rank 1: V_t = b V_{t-1} + (1 - b) (G^2 + eps1), U_t = G / sqrt(V_t) (Algorithm 5);
    - U_t / max(1, RMS(U_t) / d) (Section 6);
    - p <- p (1 - lr weight_decay) - lr U_t (decoupled weight decay, absolute lr: forgather's
      relative_step = False).
    No first moment.
    """
    dtype = torch.promote_types(p.dtype, torch.float32)
    g = grad.to(dtype)
    t = state.get("step", 0) + 1
    state["step"] = t
    beta2 = adafactor_beta2(t)
    sq = g * g + ADAFACTOR_EPS1
    if g.dim() >= 2:
        m = g.shape[-1]
        sq = sq.reshape(-1, m)
        row_new, col_new = sq.sum(dim=1), sq.sum(dim=0)
        row = state.get("row")
        col = state.get("col")
        row = (1.0 - beta2) * row_new if row is None else beta2 * row + (1.0 - beta2) * row_new
        col = (1.0 - beta2) * col_new if col is None else beta2 * col + (1.0 - beta2) * col_new
        state["row"], state["col"] = row, col
        scale = torch.outer(torch.rsqrt(row / row.sum()), torch.rsqrt(col))
        update = (g.reshape(-1, m) * scale).reshape(g.shape)
    else:
        v = state.get("row")
        v = (1.0 - beta2) * sq if v is None else beta2 * v + (1.0 - beta2) * sq
        state["row"] = v
        update = g / v.sqrt()
    rms = update.square().mean().sqrt()
    update = update / (rms / ADAFACTOR_CLIP).clamp(min=1.0)
    p.copy_((p.to(dtype) * (1.0 - lr * weight_decay) - lr * update).to(p.dtype))
    return float(rms)


def adafactor_class(torch):
    """`torch.optim.Optimizer` running `adafactor_step` on every parameter with a gradient."""

    class Adafactor(torch.optim.Optimizer):
        def __init__(self, params, lr, weight_decay=0.0):
            super().__init__(params, dict(lr=lr, weight_decay=weight_decay))

        @torch.no_grad()
        def step(self, closure=None):
            loss = closure() if closure is not None else None
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        adafactor_step(torch, p, p.grad, self.state[p], group["lr"],
                                       group["weight_decay"])
            return loss

    return Adafactor


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--plan", help="plan file written by `memwall bundle`")
    p.add_argument("--config", help="configuration name in the plan")
    p.add_argument("--serve", action="store_true",
                   help="run the configurations requested on standard input in this process")
    p.add_argument("--out", help="write the JSON row here too (atomically)")
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    p.add_argument("--threads", type=int,
                   help="CPU: torch.set_num_threads (default: the CPUs this process may use)")
    p.add_argument("--tiny", action="store_true", help="tiny model and steps (a CPU check)")
    p.add_argument("--pareto", action="store_true",
                   help="for a configuration with an activation memory budget, also record "
                        "the partitioner's memory-budget Pareto front (memory_budget_pareto; "
                        "slow: its bisection is part of the first step)")
    args = p.parse_args(argv)
    if not args.serve and (args.plan is None or args.config is None):
        p.error("--plan and --config are required (or --serve)")
    return args


def load_plan(path, config):
    try:
        with open(path) as f:
            plan = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"{path}: cannot read the plan ({e})")
    if plan.get("format") != PLAN_FORMAT:
        sys.exit(f"{path}: field `format`: {plan.get('format')!r} is not {PLAN_FORMAT}")
    for field in ("study", "model", "train", "configs"):
        if field not in plan:
            sys.exit(f"{path}: field `{field}` is missing")
    names = [c["name"] for c in plan["configs"]]
    cfg = next((c for c in plan["configs"] if c["name"] == config), None)
    if cfg is None:
        sys.exit(f"{path}: no configuration `{config}` (have: {', '.join(names)})")
    return plan, cfg


def device_name(torch, device):
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    # The same name memwall records for a CPU job (runner/src/device.rs `cpu_model`: the text
    # between the first and second colon of /proc/cpuinfo's first "model name" line, trimmed;
    # the architecture where there is none).
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    parts = line.split(":")
                    if len(parts) > 1:
                        return parts[1].strip()
                    break
    except OSError:
        pass
    import platform
    return platform.machine() or "cpu"


def cpu_count():
    """The CPUs this process may run on (what memwall's runner counts)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def resident_bytes():
    """This process's resident set now (bytes), or None where /proc/self/statm is missing."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def max_rss_bytes():
    """This process's resident high-water mark (bytes): ru_maxrss, KiB on Linux."""
    try:
        import resource
    except ImportError:
        return None
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(kib) * (1 if sys.platform == "darwin" else 1024)


def build_model(torch, m, attention):
    nn = torch.nn
    F = torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            d = m["d_model"]
            self.heads = m["heads"]
            self.norm_attn = nn.LayerNorm(d)
            self.q = nn.Linear(d, d, bias=False)
            self.k = nn.Linear(d, d, bias=False)
            self.v = nn.Linear(d, d, bias=False)
            self.o = nn.Linear(d, d, bias=False)
            self.norm_mlp = nn.LayerNorm(d)
            self.mlp_in = nn.Linear(d, m["d_ff"], bias=False)
            self.mlp_out = nn.Linear(m["d_ff"], d, bias=False)

        def forward(self, x):
            b, t, d = x.shape
            hd = d // self.heads
            h = self.norm_attn(x)
            q, k, v = (p(h).view(b, t, self.heads, hd).transpose(1, 2)
                       for p in (self.q, self.k, self.v))
            if attention == "naive":
                scores = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
                mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
                scores = scores.masked_fill(mask, float("-inf"))
                a = torch.softmax(scores.float(), dim=-1).to(q.dtype) @ v
            else:
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
            return x + self.mlp_out(F.gelu(self.mlp_in(self.norm_mlp(x))))

    class Model(nn.Module):
        def __init__(self, checkpoint):
            super().__init__()
            d = m["d_model"]
            self.tokens = nn.Embedding(m["vocab"], d)
            self.positions = nn.Embedding(m["seq_len"], d)
            self.blocks = nn.ModuleList(Block() for _ in range(m["layers"]))
            self.norm_final = nn.LayerNorm(d)
            self.head = None if m.get("tie_embeddings", True) else nn.Linear(d, m["vocab"], bias=False)
            self.checkpoint = checkpoint
            # memwall's initialization of the embeddings: normal, std 0.02.
            nn.init.normal_(self.tokens.weight, std=0.02)
            nn.init.normal_(self.positions.weight, std=0.02)

        def segment(self, start, end):
            def run(x):
                for blk in self.blocks[start:end]:
                    x = blk(x)
                return x
            return run

        def forward(self, inputs, targets):
            t = inputs.shape[1]
            pos = torch.arange(t, device=inputs.device)
            x = self.tokens(inputs) + self.positions(pos)
            k = self.checkpoint
            if k:
                from torch.utils.checkpoint import checkpoint
                for start in range(0, len(self.blocks), k):
                    x = checkpoint(self.segment(start, start + k), x, use_reentrant=False)
            else:
                x = self.segment(0, len(self.blocks))(x)
            h = self.norm_final(x)
            w = self.tokens.weight if self.head is None else self.head.weight
            logits = (h @ w.t()).float()
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    return Model


class ParetoCapture:
    """PyTorch's own memory-budget Pareto dump, kept as numbers.

    With `torch._functorch.config.visualize_memory_budget_pareto` (what
    `PARTITIONER_MEMORY_BUDGET_PARETO=1` sets; the source's "Memory Budget Pareto", 004) the
    min-cut partitioner bisects the budget over [0, 1] for every joint graph it partitions,
    solving its knapsack at each budget, and plots each distinct plan's memory ratio (its saved
    activations above the graph's inputs, as a fraction of the default partitioner's:
    `get_mem_ratio` in torch/_functorch/partitioners.py) against the runtime estimate of what it
    recomputes (FLOPs under the default `flops` estimator, `torch.utils.flop_counter`), then
    saves the plot as SVG through matplotlib. This keeps the plotted points instead: a stand-in
    `matplotlib.pyplot` records what `plt.plot` is given, and the partitioner's debug trace of
    each knapsack solve (`AOT_PARTITIONER_DEBUG`, which only logs) gives the graph's input and
    default activation sizes, so each ratio also reads in bytes. One entry per joint graph, in
    the order the partitioner ran them.
    """

    def __init__(self, torch):
        import sys
        import types
        import torch._functorch.config as functorch_config
        import torch._functorch.partitioners as partitioners
        self.graphs, self.sizes = [], {}
        self._sys, self._partitioners, self._config = sys, partitioners, functorch_config
        self._saved = (functorch_config.visualize_memory_budget_pareto,
                       partitioners.AOT_PARTITIONER_DEBUG,
                       partitioners.create_structured_trace_for_min_cut_info,
                       {k: sys.modules.get(k) for k in ("matplotlib", "matplotlib.pyplot")})
        capture = self

        def trace(**kw):
            if not capture.sizes:
                capture.started = time.perf_counter()
            capture.sizes = {"min": kw["min_act_size"], "max": kw["max_act_size"]}

        plt = types.ModuleType("matplotlib.pyplot")

        def plot(x, y, *_, **__):
            name = str(partitioners.get_aot_graph_name())
            lo, hi = capture.sizes.get("min"), capture.sizes.get("max")
            points, seen = [], set()
            for ratio, recompute in zip(x, y):
                if (ratio, recompute) in seen:
                    continue
                seen.add((ratio, recompute))
                point = {"memory_ratio": float(ratio), "recompute_flops": float(recompute)}
                if lo is not None and hi is not None:
                    # Sizes are in 1e9 bytes (`estimate_activations_size`).
                    point["saved_bytes_above_inputs"] = int(round(float(ratio) * (hi - lo) * 1e9))
                points.append(point)
            started = getattr(capture, "started", None)
            capture.sizes = {}
            capture.graphs.append({
                "graph": name,
                "bisection_s": None if started is None else time.perf_counter() - started,
                "input_bytes": None if lo is None else int(round(lo * 1e9)),
                "default_saved_bytes": None if hi is None else int(round(hi * 1e9)),
                "points": points,
            })

        class Figure:
            def savefig(self, *_, **__):
                pass

        for f in ("figure", "annotate", "xlabel", "ylabel", "title", "grid", "show"):
            setattr(plt, f, lambda *_, **__: None)
        plt.plot = plot
        plt.gcf = Figure
        mpl = types.ModuleType("matplotlib")
        mpl.pyplot = plt
        sys.modules["matplotlib"], sys.modules["matplotlib.pyplot"] = mpl, plt
        functorch_config.visualize_memory_budget_pareto = True
        partitioners.AOT_PARTITIONER_DEBUG = True
        partitioners.create_structured_trace_for_min_cut_info = trace

    def close(self):
        """Puts back what the capture replaced."""
        visualize, debug, trace, modules = self._saved
        self._config.visualize_memory_budget_pareto = visualize
        self._partitioners.AOT_PARTITIONER_DEBUG = debug
        self._partitioners.create_structured_trace_for_min_cut_info = trace
        for k, v in modules.items():
            if v is None:
                self._sys.modules.pop(k, None)
            else:
                self._sys.modules[k] = v


# Configurations this process has run (`process_order` of the next row is one more), and the
# partitioner's memory budget as torch sets it (restored for a configuration without one).
RUNS_IN_PROCESS = 0
DEFAULT_MEMORY_BUDGET = None


def run(args):
    global RUNS_IN_PROCESS
    t_start = time.perf_counter()
    plan, cfg = load_plan(args.plan, args.config)
    RUNS_IN_PROCESS += 1
    order = RUNS_IN_PROCESS
    model_cfg = dict(plan["model"])
    train = dict(plan["train"])
    if args.tiny:
        model_cfg.update(TINY_MODEL)
        train.update(TINY_TRAIN)
    # The configuration's optimizer settings (plans before they were per configuration: AdamW
    # with the plan's train settings).
    optimizer_name = cfg.get("optimizer", "adamw")
    for k in ("lr", "weight_decay"):
        if cfg.get(k) is not None:
            train[k] = cfg[k]
    row = {
        "format": ROW_FORMAT, "study": plan["study"], "config": cfg["name"], "status": "failed",
        "reason": None, "device": "unknown", "device_type": None, "threads": None,
        "torch_version": "unknown", "parameters": None,
        "max_memory_allocated_bytes": None, "max_memory_reserved_bytes": None,
        "max_rss_bytes": None, "rss_after_import_bytes": None,
        "median_step_s": None, "samples_per_s": None, "first_step_s": None, "final_loss": None,
        "model": model_cfg,
        "train": {k: train[k] for k in ("steps", "warmup_steps", "lr", "weight_decay", "seed")},
        "finished_at": None, "process_order": order, "wall_s": None,
    }
    row = run_measured(args, plan, cfg, model_cfg, train, optimizer_name, row)
    if order > 1:
        # The process's high-water mark holds the configurations before this one.
        row["max_rss_bytes"] = None
    row["wall_s"] = time.perf_counter() - t_start
    return row


def run_measured(args, plan, cfg, model_cfg, train, optimizer_name, row):
    """The row of configuration `cfg` measured in this process (see the module's text)."""
    global DEFAULT_MEMORY_BUDGET
    try:
        import torch
    except ImportError as e:
        row["status"], row["reason"] = "unsupported", f"PyTorch is not installed ({e})"
        return row
    row["rss_after_import_bytes"] = resident_bytes()
    row["torch_version"] = torch.__version__
    if args.device == "cuda" and not torch.cuda.is_available():
        row["status"], row["reason"] = "unsupported", "torch.cuda.is_available() is False"
        return row
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda" if use_cuda else "cpu")
    row["device"] = device_name(torch, device)
    row["device_type"] = device.type
    if not use_cuda:
        threads = args.threads if args.threads else cpu_count()
        if threads < 1:
            row["status"], row["reason"] = "failed", f"--threads {threads} is not at least 1"
            return row
        torch.set_num_threads(threads)
        row["threads"] = torch.get_num_threads()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[cfg["precision"]]
    torch.manual_seed(train["seed"])
    if use_cuda:
        torch.cuda.reset_peak_memory_stats(device)

    def peaks():
        row["max_rss_bytes"] = max_rss_bytes()
        if use_cuda:
            row["max_memory_allocated_bytes"] = int(torch.cuda.max_memory_allocated(device))
            row["max_memory_reserved_bytes"] = int(torch.cuda.max_memory_reserved(device))

    pareto = None
    try:
        budget = cfg.get("activation_memory_budget")
        if budget is not None or DEFAULT_MEMORY_BUDGET is not None:
            import torch._functorch.config as functorch_config
            if DEFAULT_MEMORY_BUDGET is None:
                DEFAULT_MEMORY_BUDGET = functorch_config.activation_memory_budget
            functorch_config.activation_memory_budget = (
                float(budget) if budget is not None else DEFAULT_MEMORY_BUDGET)
        Model = build_model(torch, model_cfg, cfg.get("attention", "sdpa"))
        model = Model(cfg.get("checkpoint")).to(device=device, dtype=dtype)
        row["parameters"] = sum(p.numel() for p in model.parameters())
        opt_args = dict(lr=train["lr"], weight_decay=train["weight_decay"])
        if optimizer_name == "adamw":
            def make_optimizer(params, foreach):
                return torch.optim.AdamW(params, foreach=foreach, **opt_args)
        elif optimizer_name == "adafactor":
            Adafactor = adafactor_class(torch)

            def make_optimizer(params, foreach):
                return Adafactor(params, **opt_args)
        else:
            raise ValueError(f"optimizer {optimizer_name!r} is not adamw or adafactor")
        if cfg.get("fused_optimizer"):
            optimizers = {p: make_optimizer([p], False) for p in model.parameters()}

            def step_now(p):
                optimizers[p].step()
                optimizers[p].zero_grad(set_to_none=True)

            for p in model.parameters():
                p.register_post_accumulate_grad_hook(step_now)
            optimizer = None
        else:
            optimizer = make_optimizer(model.parameters(), True)
        forward = torch.compile(model) if cfg.get("compile") else model
        wants = getattr(args, "pareto", False) and budget is not None and cfg.get("compile")
        pareto = ParetoCapture(torch) if wants else None
        gen = torch.Generator(device="cpu").manual_seed(train["seed"])
        b, t, vocab = model_cfg["batch"], model_cfg["seq_len"], model_cfg["vocab"]
        times, loss_value = [], None
        for step in range(train["warmup_steps"] + train["steps"]):
            batch = torch.randint(0, vocab, (b, t + 1), generator=gen).to(device)
            if use_cuda:
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            loss = forward(batch[:, :-1], batch[:, 1:])
            loss.backward()
            if optimizer is not None:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            if use_cuda:
                torch.cuda.synchronize(device)
            dt = time.perf_counter() - t0
            loss_value = float(loss.detach())
            if step == 0:
                row["first_step_s"] = dt
                if pareto is not None:
                    pareto.close()
                    row["memory_budget_pareto"] = pareto.graphs
            if step >= train["warmup_steps"]:
                times.append(dt)
        peaks()
        median = statistics.median(times)
        row.update(status="ok", median_step_s=median, samples_per_s=b / median,
                   final_loss=loss_value if math.isfinite(loss_value) else None)
    except Exception as e:  # noqa: BLE001 - every failure is a row, as memwall's records are
        if pareto is not None:
            pareto.close()
        peaks()
        oom = isinstance(e, getattr(torch.cuda, "OutOfMemoryError", ())) or "out of memory" in str(e)
        row["status"] = "out_of_memory" if oom else "failed"
        row["reason"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:500]
    return row


def finish(row, out):
    """Stamps `row`'s end time, prints it, and writes it to `out` (atomically) when given."""
    row["finished_at"] = datetime.datetime.now(datetime.timezone.utc).isoformat()
    text = json.dumps(row, indent=2)
    print(text)
    if out:
        tmp = f"{out}.tmp-{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, out)


def release():
    """Frees what the last configuration left: its objects, torch.compile's caches, the CUDA
    allocator's cached blocks (a no-op before `import torch` or without CUDA)."""
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is None:
        return
    with contextlib.suppress(Exception):
        torch._dynamo.reset()
    with contextlib.suppress(Exception):
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def serve(args):
    """--serve: the requests on standard input, one configuration each (module's text)."""
    # The answers go to the original standard output; everything else the process writes
    # (Python's prints, libtorch's warnings on file descriptors 1 and 2) to each request's log.
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    for line in sys.stdin:
        parts = line.rstrip("\n").split("\t")
        if parts == [""]:
            continue
        if len(parts) != 4:
            print(f"error\trequest {line.strip()!r} is not PLAN<TAB>CONFIG<TAB>OUT<TAB>LOG",
                  file=answers)
            continue
        plan, config, out, log = parts
        answer = "error\tno row"
        with open(log, "w", buffering=1) as f, contextlib.redirect_stdout(f), \
                contextlib.redirect_stderr(f):
            saved = os.dup(2)
            os.dup2(f.fileno(), 2)
            os.dup2(f.fileno(), 1)
            try:
                request = argparse.Namespace(**{**vars(args), "plan": plan, "config": config})
                row = run(request)
                finish(row, out)
                answer = f"done\t{row['status']}"
            except SystemExit as e:
                answer = f"error\t{e}"
                print(e)
            except Exception as e:  # noqa: BLE001 - a failure outside the measured run
                answer = f"error\t{type(e).__name__}: {e}"
                print(answer)
            finally:
                release()
                os.dup2(saved, 2)
                os.dup2(saved, 1)
                os.close(saved)
        print(answer.replace("\n", " "), file=answers)
    return 0


def main(argv=None):
    args = parse_args(argv)
    if args.serve:
        return serve(args)
    finish(run(args), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
