#!/usr/bin/env python3
"""Where one memwall training step spends its CPU time, by category (`just profile-cpu`).

Reads the text of `perf script -F tid,time,ip,sym,dso` over a `perf record --call-graph dwarf` of
`memwall-job run-job` and keeps the samples whose call stack passes through
`memwall_runner::train::train_step` (the warm-up and timed steps; model setup, data loading and
evaluation are counted apart). Each kept sample gets

- a **category** from its innermost frame: matmul (gemm), layout copies (strided copies that make
  a tensor contiguous), elementwise math (GELU's erf, exp, binary, unary and scalar kernels, masks,
  casts), reductions, memory (allocator, memset/memmove, page faults), threads (rayon, scheduler,
  futex), autodiff bookkeeping (graph, gradient maps, tensor handles), other;
- a **phase** from its stack: forward, backward, optimizer step;
- whether it ran inside one of memwall's custom autodiff operations (`runner/src/model/`:
  memory-efficient attention, layer norm).

Worker threads (rayon, gemm) have stacks that do not reach the step: their samples between the
first and the last step sample are counted with the step, by category, without a phase.

It prints Markdown tables: samples per category (share of the step samples and the CPU
milliseconds per step they stand for, given `--step-ms` and the thread count), per phase, and
the share inside memwall's operations. Samples are CPU time over all threads, so with several
threads the shares are of CPU time, not of wall time.

Usage (from the repository root; `just profile-cpu [CONFIG]` does all of it):
    python3 reference/perf_step_profile.py --job BUNDLE/jobs/STUDY/KEY/job.json [--json out.json]
        records the job with `perf record -F 499 --call-graph dwarf` (the job's paths are
        relative to its bundle) and analyses it;
    python3 reference/perf_step_profile.py --script step.txt --steps 10
        analyses an earlier `perf script -F tid,time,ip,sym,dso` text.
"""

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

# Innermost-frame patterns, tried in order; the first match names the category.
CATEGORIES = [
    ("matmul (gemm)", re.compile(r"gemm|matmul")),
    ("layout copies (to contiguous)",
     re.compile(r"copy_contiguous|to_contiguous|StridedIter|strided_index|Shape::num_dims")),
    ("reductions", re.compile(r"reduce|sum_f32|sum_dim|max_dim|argmax|cumsum")),
    ("elementwise math",
     re.compile(r"erf|expf|exp_|logf|log1p|tanh|sqrt|binary_op|unary_op|scalar_op|broadcast"
                r"|mask_fill|mask_where|macerator|cast|powf|clamp|compare|greater|lower|equal")),
    ("memory (allocator, memset/memmove, page faults)",
     re.compile(r"malloc|free|realloc|calloc|memset|memmove|memcpy|Alloc|alloc::alloc|page|mm_fault"
                r"|clear_page|folio|pte|lruvec|mem_cgroup|munmap|mmap|brk|tlb|anon")),
    ("threads (rayon, scheduler, futex)",
     re.compile(r"rayon|crossbeam|sched|futex|task_switch|spin_unlock|spin_lock|schedule|wake"
                r"|yield|park")),
    ("autodiff bookkeeping",
     re.compile(r"burn_autodiff|hashbrown|HashMap|Arc|Rc<|drop_in_place|Gradients|Checkpointer"
                r"|NodeRef|graph")),
]

PHASES = [
    ("optimizer step", re.compile(r"burn_optim|Optimizer|adamw|adafactor|::optim::")),
    ("backward", re.compile(r"::backward")),
    ("forward", re.compile(r"forward|::loss")),
]

# The operation a sample belongs to: the innermost autodiff step (backward) or autodiff op
# (forward) on its stack, else the innermost memwall function.
BACKWARD_STEP = re.compile(r"(\w+) as burn_autodiff::ops::backward::Backward")
FORWARD_OP = re.compile(r"for burn_autodiff::backend::Autodiff<B,C>>::(\w+)$")
MEMWALL_FN = re.compile(r"memwall_runner::(?:model|train)::[\w:<>]*?(\w+)$")

CUSTOM_OPS = re.compile(r"memwall_runner::model::(attention|norm)::")


HEADER = re.compile(r"^\s*(\d+)\s+([\d.]+):")


def samples(lines):
    """Yields `(tid, time_s, frames)` per sample, frames innermost first as symbol strings."""
    head, frames = None, []
    for line in lines:
        m = HEADER.match(line)
        if m:
            if head:
                yield head[0], head[1], frames
            head, frames = (int(m.group(1)), float(m.group(2))), []
        elif line.startswith("\t") and head:
            parts = line.strip().split(None, 1)
            if len(parts) == 2:
                frames.append(parts[1].rsplit(" (", 1)[0])
    if head:
        yield head[0], head[1], frames


def classify(frames):
    # The innermost frames decide; generic frames (iterator adapters, libm helpers) defer to
    # their callers.
    category = "other"
    for frame in frames[:4]:
        hit = next((name for name, pattern in CATEGORIES if pattern.search(frame)), None)
        if hit:
            category = hit
            break
    phase = "other"
    # The outermost matching frame below train_step decides the phase.
    stack = frames[: next((i for i, f in enumerate(frames) if "train::train_step" in f),
                          len(frames))]
    for name, pattern in PHASES:
        if any(pattern.search(f) for f in stack):
            phase = name
            break
    custom = any(CUSTOM_OPS.search(f) for f in frames)
    return category, phase, custom


def operation(frames):
    """`backward of X`, `X` (a forward autodiff op) or a memwall function: what the sample ran."""
    for f in frames:
        m = BACKWARD_STEP.search(f)
        if m:
            return f"backward of {m.group(1)}"
        m = FORWARD_OP.search(f)
        if m:
            return m.group(1)
    for f in frames:
        m = MEMWALL_FN.search(f)
        if m:
            return f"memwall {m.group(1)}"
    return "(no operation on the stack)"


def record(job, runner, frequency):
    """Runs `job` under perf; returns (path of the perf script text, steps the job runs)."""
    if not shutil.which("perf"):
        sys.exit("perf_step_profile.py needs perf (Debian: apt-get install linux-perf)")
    spec = json.load(open(job))
    steps = spec["train"]["steps"] + spec["train"]["warmup_steps"]
    bundle = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(job)))))
    work = tempfile.mkdtemp(prefix="memwall-profile-")
    data = os.path.join(work, "step.data")
    with open(os.path.join(work, "job.log"), "w") as log:
        code = subprocess.call(
            ["perf", "record", "-F", str(int(frequency)), "--call-graph", "dwarf,65528", "-o",
             data, os.path.abspath(runner), "run-job", "--job", os.path.abspath(job), "--out",
             os.path.join(work, "out")], stdout=log, stderr=subprocess.STDOUT, cwd=bundle)
    if code != 0:
        sys.exit(f"perf record of {job} failed ({code}); see {work}/job.log (perf may need "
                 "kernel.perf_event_paranoid <= 2)")
    text = os.path.join(work, "step.txt")
    with open(text, "w") as out:
        subprocess.check_call(["perf", "script", "-i", data, "-F", "tid,time,ip,sym,dso"],
                              stdout=out, stderr=subprocess.DEVNULL)
    rec = json.load(open(os.path.join(work, "out", "record.json")))
    s = rec.get("summary") or {}
    print(f"{spec['config']} ({spec['backend']}, {spec['strategy']['precision']}): {steps} steps "
          f"under perf, median step {1000.0 * s.get('median_step_s', 0.0):.0f} ms, "
          f"{s.get('samples_per_s', 0.0):.2f} samples/s (perf slows it a little); "
          f"record in {work}\n")
    return text, steps


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--job", help="a job.json of a bundle: record it under perf first")
    src.add_argument("--script", help="output of perf script -F tid,time,ip,sym,dso")
    p.add_argument("--runner", default="target/release/memwall-job")
    p.add_argument("--steps", type=int, default=0,
                   help="with --script: training steps the record covers (warm-up included)")
    p.add_argument("--frequency", type=float, default=499.0, help="perf record -F (Hz)")
    p.add_argument("--top", type=int, default=12, help="operations to list")
    p.add_argument("--json", help="also write the counts here")
    a = p.parse_args()

    script = a.script
    if a.job:
        script, a.steps = record(a.job, a.runner, a.frequency)
    with open(script, errors="replace") as f:
        all_samples = list(samples(f))
    in_step = [any("train::train_step" in fr for fr in frames) for _, _, frames in all_samples]
    times = [t for (_, t, _), hit in zip(all_samples, in_step) if hit]
    main_tids = {tid for (tid, _, _), hit in zip(all_samples, in_step) if hit}
    first, last = (min(times), max(times)) if times else (0.0, -1.0)

    total = len(all_samples)
    outside = collections.Counter()
    cat = collections.Counter()
    phase = collections.Counter()
    custom = collections.Counter()
    ops = collections.Counter()
    workers = 0
    for (tid, t, frames), hit in zip(all_samples, in_step):
        if not hit and (tid in main_tids or not first <= t <= last):
            where = "setup and data" if any("train::prepare" in fr for fr in frames) \
                else "evaluation" if any("train::evaluate" in fr for fr in frames) \
                else "other (startup, record, worker threads outside the steps)"
            outside[where] += 1
            continue
        c, ph, cu = classify(frames)
        if not hit:
            # A worker thread (rayon, gemm) during the steps: its stack does not reach the
            # step, so it has a category but no phase.
            workers += 1
            ph = "worker threads (no phase)"
        cat[c] += 1
        phase[ph] += 1
        custom[cu] += 1
        if hit:
            ops[(operation(frames), c)] += 1
    step = sum(cat.values())
    if step == 0:
        sys.exit(f"{script}: no sample passes through memwall_runner::train::train_step; "
                 "record with --call-graph dwarf and a memwall-job built with symbols")

    def ms(n):
        if not a.steps:
            return "-"
        return f"{1000.0 * n / a.frequency / a.steps:.1f}"

    print(f"{total} samples, {step} in training steps ({100.0 * step / total:.1f}%; "
          f"{workers} of them on worker threads)\n")
    print("| category | share of step CPU time | CPU ms per step |")
    print("|---|---|---|")
    for name, n in cat.most_common():
        print(f"| {name} | {100.0 * n / step:.1f}% | {ms(n)} |")
    print("\n| phase | share of step CPU time | CPU ms per step |")
    print("|---|---|---|")
    for name, n in phase.most_common():
        print(f"| {name} | {100.0 * n / step:.1f}% | {ms(n)} |")
    main_samples = sum(ops.values())
    print(f"\n| operation (main thread) | category | share of main-thread step time | "
          "CPU ms per step |")
    print("|---|---|---|---|")
    for (name, c), n in ops.most_common(a.top):
        print(f"| {name} | {c} | {100.0 * n / main_samples:.1f}% | {ms(n)} |")
    print(f"\ninside memwall's custom operations (attention, layer norm): "
          f"{100.0 * custom[True] / step:.1f}% of step CPU time")
    print("\noutside the steps: " + ", ".join(f"{k} {v} samples" for k, v in outside.items()))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"samples": total, "step_samples": step, "categories": cat,
                       "phases": phase, "custom_ops": custom[True], "outside": outside,
                       "worker_samples": workers,
                       "operations": [[o, c, n] for (o, c), n in ops.most_common()]}, f, indent=1)


if __name__ == "__main__":
    main()
