#!/usr/bin/env python3
"""Where one PyTorch eager training step spends its time, per operation (`just profile-cpu-torch`).

The PyTorch side of issue 54's profile, beside `perf_step_profile.py`'s memwall side: the twin
model of `torch_peak_memory.py` (same plan file, same configuration, same shapes, precision and
optimizer), warmed up, then `--steps` steps under `torch.profiler.profile` (CPU activities only;
on a GPU the CUDA ones too). Each ATen operation's self time is summed over the steps and put in
the categories `perf_step_profile.py` uses where they apply (matmul, attention, layer norm, GELU,
elementwise math, reductions, casts and copies, the optimizer step, other), with its phase
(forward, backward, optimizer) from the `record_function` range it ran in.

Self time is the operation's own time without the operations it called, so the categories add up
to the step. With several threads an ATen operation's time is wall time on the calling thread
(its intra-op threads' work is inside it), not CPU time over all threads as in the perf profile:
compare shares of the step, and the milliseconds per step.

Usage (from the repository root, a bundle built by `memwall bundle`):
    python3 reference/torch_step_profile.py --plan BUNDLE/reference/peak_memory.plan.json \\
        --config bfloat16 [--steps 4] [--json out.json]
"""

import argparse
import collections
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_peak_memory as twin  # noqa: E402

CATEGORIES = [
    ("matmul", ("mm", "bmm", "addmm", "matmul", "linear", "baddbmm")),
    ("attention", ("scaled_dot_product", "flash_attention", "efficient_attention")),
    ("layer norm", ("layer_norm", "native_layer_norm")),
    ("gelu", ("gelu",)),
    ("optimizer", ("Optimizer", "foreach", "fused_adam", "addcdiv", "lerp")),
    ("casts and copies", ("copy_", "to_copy", "_to_copy", "clone", "contiguous", "cat")),
    ("reductions", ("sum", "mean", "max", "log_softmax", "nll_loss", "softmax")),
    ("elementwise", ("add", "mul", "sub", "div", "neg", "sqrt", "rsqrt", "pow", "exp",
                     "fill_", "zero_", "where", "masked", "embedding", "dropout", "threshold")),
]


def category(name):
    """The category of an ATen operation (`aten::_foo_backward` is `foo`'s) or a profiler range."""
    base = name.split("::")[-1].lstrip("_")
    for cat, keys in CATEGORIES:
        if any(base == k or base.startswith(k) for k in keys):
            return cat
    return "other"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--plan", required=True, help="plan file written by `memwall bundle`")
    p.add_argument("--config", required=True, help="configuration name in the plan")
    p.add_argument("--steps", type=int, default=4, help="profiled steps (after 2 warm-up)")
    p.add_argument("--threads", type=int, default=twin.cpu_count())
    p.add_argument("--json", help="also write the table here")
    args = p.parse_args()
    if args.steps < 1:
        sys.exit(f"--steps {args.steps}: at least one step is profiled")
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    plan, cfg = twin.load_plan(args.plan, args.config)
    model_cfg, train = dict(plan["model"]), dict(plan["train"])
    torch.set_num_threads(args.threads)
    dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[cfg["precision"]]
    torch.manual_seed(train["seed"])
    Model = twin.build_model(torch, model_cfg, cfg.get("attention", "sdpa"))
    model = Model(cfg.get("checkpoint")).to(dtype=dtype)
    opt_args = dict(lr=train["lr"], weight_decay=train["weight_decay"])
    if cfg.get("optimizer", "adamw") == "adafactor":
        optimizer = twin.adafactor_class(torch)(model.parameters(), **opt_args)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), foreach=True, **opt_args)
    gen = torch.Generator().manual_seed(train["seed"])
    b, t, vocab = model_cfg["batch"], model_cfg["seq_len"], model_cfg["vocab"]

    def step():
        batch = torch.randint(0, vocab, (b, t + 1), generator=gen)
        with record_function("forward"):
            loss = model(batch[:, :-1], batch[:, 1:])
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer"):
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    for _ in range(2):
        step()
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(args.steps):
            step()
    wall_ms = (time.perf_counter() - t0) * 1e3 / args.steps
    per_cat = collections.Counter()
    per_op = collections.Counter()
    for ev in prof.key_averages():
        if ev.key in ("forward", "backward", "optimizer") or ev.key.startswith("ProfilerStep"):
            continue
        ms = ev.self_cpu_time_total / 1e3 / args.steps
        per_cat[category(ev.key)] += ms
        per_op[ev.key] += ms
    total = sum(per_cat.values())
    print(f"PyTorch {torch.__version__}, {args.threads} threads, {cfg['name']} ({cfg['precision']}), "
          f"{args.steps} steps: {wall_ms:.1f} ms per step (profiled; self time sums to {total:.1f})")
    print("\n| category | ms per step | share |\n|---|---:|---:|")
    for cat, ms in per_cat.most_common():
        print(f"| {cat} | {ms:.2f} | {100 * ms / total:.1f}% |")
    print("\n| operation (top 15) | ms per step | share |\n|---|---:|---:|")
    for op, ms in per_op.most_common(15):
        print(f"| `{op}` | {ms:.2f} | {100 * ms / total:.1f}% |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch_version": torch.__version__, "threads": args.threads,
                       "config": cfg["name"], "step_ms": wall_ms,
                       "categories_ms": dict(per_cat), "operations_ms": dict(per_op)}, f, indent=1)


if __name__ == "__main__":
    main()
