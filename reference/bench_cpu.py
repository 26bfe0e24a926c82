#!/usr/bin/env python3
"""memwall beside PyTorch eager on the CPU, alternating, per configuration (`just bench-cpu`).

A benchmark, not a test. For each configuration of a bundle that `memwall bundle --target flex`
wrote (the same model, steps and optimizer in both frameworks: `reference/<study>.plan.json`
and the job files), and for each round, it runs memwall's job as `memwall run` does (`memwall-job
sweep-dir` on a copy of the job: the plan stage, with its profiling pass where the strategy's plan
needs measured costs, then the job in its own process) and then PyTorch's (`torch_peak_memory.py --device cpu`, one process), one after the
other, so that both see the same machine state. It prints per configuration:

- samples/s of each framework: the median over the rounds, with the range (min-max);
- PyTorch / memwall: the ratio of the medians, with the range of the per-round ratios;
- peaks: memwall's exact peak allocated bytes (its counting allocator's high-water mark over a
  step) and PyTorch's process high-water mark (`ru_maxrss` of its process: resident memory
  including the interpreter and libtorch, an upper bound of what training needs; PyTorch keeps
  no allocator statistics on the CPU). The two are different quantities and are labelled so.

Usage (from the repository root, after `cargo build --release --locked --bins`):
    python3 reference/bench_cpu.py --bundle target/bench-cpu [--rounds 2] [--json out.json]
        [--memwall-only]

It needs PyTorch (`python3 -m pip install --user torch`) and says so when it is missing;
`--memwall-only` runs memwall's side alone (what `cli/tests/bench_cpu.rs` runs at smoke size,
so the bench's path cannot break unnoticed). It exits 1 when a configuration gives no row.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def child_rusage_run(cmd, log, cwd=None):
    """Runs `cmd` in `cwd` with stdout+stderr to `log`; returns (exit status, wall s, max RSS
    bytes of that process)."""
    t0 = time.perf_counter()
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    # Linux reports ru_maxrss in KiB.
    return code, wall, usage.ru_maxrss * 1024


def spread(values):
    return f"{min(values):.2f}-{max(values):.2f}" if len(values) > 1 else "-"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bundle", required=True, help="bundle folder (memwall bundle --target flex)")
    p.add_argument("--runner", default="target/release/memwall-job")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--json", help="also write the rows here")
    p.add_argument("--memwall-only", action="store_true",
                   help="run memwall's jobs only (no PyTorch needed)")
    a = p.parse_args()
    try:
        if not a.memwall_only:
            import torch  # noqa: F401
    except ImportError:
        sys.exit("bench_cpu.py needs PyTorch: python3 -m pip install --user torch "
                 "(about 1.5 GB; it runs on the CPU)")
    manifest = json.load(open(os.path.join(a.bundle, "manifest.json")))
    if manifest["target"] == "cuda":
        sys.exit(f"{a.bundle}: a CUDA bundle; bundle with --target flex for the CPU benchmark")
    runner = os.path.abspath(a.runner)
    if not os.path.isfile(runner):
        sys.exit(f"{runner}: no runner; build it with `cargo build --release --locked --bins`")
    script = os.path.join(a.bundle, "reference", "torch_peak_memory.py")
    if not a.memwall_only and not os.path.isfile(script):
        sys.exit(f"{a.bundle}: no reference/torch_peak_memory.py; bundle with --torch-script")
    rows, missing = [], []
    work = tempfile.mkdtemp(prefix="memwall-bench-cpu-")
    for study in manifest["studies"]:
        plan_file = os.path.join(a.bundle, "reference", f"{study['name']}.plan.json")
        in_plan = None
        if not a.memwall_only:
            in_plan = {c["name"] for c in json.load(open(plan_file))["configs"]}
        for config, key in study["jobs"]:
            if in_plan is not None and config not in in_plan:
                print(f"{config}: no PyTorch twin in {plan_file}")
                missing.append(config)
                continue
            job = os.path.join(a.bundle, "jobs", study["name"], key, "job.json")
            ours, theirs, ours_peak, theirs_rss = [], [], [], []
            for r in range(a.rounds):
                out = os.path.join(work, f"{config}.{r}")
                # A fresh copy of the job per round (sweep-dir skips a job with a record); the
                # job's paths are relative to the bundle folder, where it runs.
                job_dir = os.path.join(out, "jobs", study["name"], key)
                os.makedirs(job_dir, exist_ok=True)
                shutil.copyfile(job, os.path.join(job_dir, "job.json"))
                code, _, _ = child_rusage_run(
                    [runner, "sweep-dir", os.path.join(out, "jobs"),
                     "--only", f"{study['name']}/{key}"],
                    os.path.join(out, "memwall.log"), cwd=a.bundle)
                record = os.path.join(job_dir, "record.json")
                rec = json.load(open(record)) if os.path.exists(record) else {}
                s = rec.get("summary") or {}
                if rec.get("status") != "ok" or not s:
                    print(f"{config}: memwall {rec.get('status', 'failed')} "
                          f"({rec.get('reason') or os.path.join(out, 'memwall.log')})")
                    break
                ours.append(s["samples_per_s"])
                ours_peak.append(s["peak_allocated_bytes"])
                if a.memwall_only:
                    print(f"{config} round {r + 1}: memwall {ours[-1]:.2f} samples/s", flush=True)
                    continue
                row_file = os.path.join(out, "torch.json")
                code, _, rss = child_rusage_run(
                    [sys.executable, os.path.abspath(script), "--plan", os.path.abspath(plan_file),
                     "--config", config, "--device", "cpu", "--out", row_file],
                    os.path.join(out, "torch.log"))
                row = json.load(open(row_file)) if code == 0 and os.path.exists(row_file) else {}
                if row.get("status") != "ok":
                    print(f"{config}: PyTorch {row.get('status', 'failed')} "
                          f"({row.get('reason') or os.path.join(out, 'torch.log')})")
                    break
                theirs.append(row["samples_per_s"])
                theirs_rss.append(rss)
                print(f"{config} round {r + 1}: memwall {ours[-1]:.2f}, PyTorch "
                      f"{theirs[-1]:.2f} samples/s", flush=True)
            if len(ours) != a.rounds or (not a.memwall_only and len(theirs) != a.rounds):
                missing.append(config)
                continue
            if a.memwall_only:
                rows.append({
                    "study": study["name"], "config": config, "rounds": len(ours),
                    "memwall_samples_per_s": ours,
                    "memwall_peak_allocated_bytes": max(ours_peak),
                })
                continue
            ratios = [t / o for t, o in zip(theirs, ours)]
            rows.append({
                "study": study["name"], "config": config, "rounds": len(ours),
                "memwall_samples_per_s": ours, "pytorch_samples_per_s": theirs,
                "ratio_of_medians": statistics.median(theirs) / statistics.median(ours),
                "ratios": ratios,
                "memwall_peak_allocated_bytes": max(ours_peak),
                "pytorch_max_rss_bytes": max(theirs_rss),
            })
    if a.memwall_only:
        print()
        print("| configuration | memwall samples/s | memwall peak allocated (exact), MiB |")
        print("|---|---|---|")
        for r in rows:
            o = r["memwall_samples_per_s"]
            print(f"| {r['config']} | {statistics.median(o):.2f} ({spread(o)}) | "
                  f"{r['memwall_peak_allocated_bytes'] / 2**20:.1f} |")
    else:
        print_table(rows, manifest, a.rounds)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    if missing:
        print(f"no row for: {', '.join(missing)}", file=sys.stderr)
    return 0 if rows and not missing else 1


def print_table(rows, manifest, rounds):
    print()
    print(f"memwall ({manifest['target']}) beside PyTorch eager (CPU), "
          f"{rounds} alternating round(s), median (range)")
    print()
    print("| configuration | memwall samples/s | PyTorch samples/s | PyTorch / memwall | "
          "memwall peak allocated (exact), MiB | PyTorch process max RSS, MiB |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        o, t = r["memwall_samples_per_s"], r["pytorch_samples_per_s"]
        print(f"| {r['config']} | {statistics.median(o):.2f} ({spread(o)}) | "
              f"{statistics.median(t):.2f} ({spread(t)}) | {r['ratio_of_medians']:.2f}x "
              f"({spread(r['ratios'])}) | {r['memwall_peak_allocated_bytes'] / 2**20:.1f} | "
              f"{r['pytorch_max_rss_bytes'] / 2**20:.0f} |")


if __name__ == "__main__":
    sys.exit(main())
