#!/usr/bin/env python3
"""Two memwall runners on the same job at the same time, one core each (`just bench-pair`).

On a shared or cloud machine, steps of the same job move 10-20% between runs minutes apart (the
host's other tenants, its clock), so runner A before runner B measures the machine as much as
the change. Here both run at once, each pinned to one core (`taskset -c`) with one rayon thread
(`RAYON_NUM_THREADS=1`), and they swap cores every round: whatever the machine does, it does to
both. Per round it prints each runner's samples/s (the record's `summary.samples_per_s`, over
the job's timed steps) and B / A; at the end, the median and range of B / A over all pairs.

It compares one-thread runs: a change to how work is split between threads needs
`bench_cpu.py --memwall-only`, alternating, instead. It needs at least two cores.

Usage (from the repository root):
    python3 reference/bench_pair.py --bundle BUNDLE --config bfloat16 A_RUNNER B_RUNNER [--rounds 3]
where BUNDLE is a flex bundle (`memwall bundle ... --target flex --no-archive`).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bundle", required=True, help="bundle folder (memwall bundle --target flex)")
    p.add_argument("--config", required=True, help="the configuration to run, e.g. bfloat16")
    p.add_argument("--rounds", type=int, default=3, help="rounds; each runs two pairs")
    p.add_argument("a", help="runner A (the baseline): a memwall-job binary")
    p.add_argument("b", help="runner B (the change)")
    args = p.parse_args()
    if (os.cpu_count() or 1) < 2:
        sys.exit("bench_pair.py needs two cores (it pins one runner to each)")
    if shutil.which("taskset") is None:
        sys.exit("bench_pair.py needs taskset (util-linux)")
    runners = [os.path.abspath(args.a), os.path.abspath(args.b)]
    for r in runners:
        if not os.path.isfile(r):
            sys.exit(f"{r}: no such runner")
    manifest = json.load(open(os.path.join(args.bundle, "manifest.json")))
    jobs = [(s["name"], key) for s in manifest["studies"] for config, key in s["jobs"]
            if config == args.config]
    if not jobs:
        sys.exit(f"{args.bundle}: no job for configuration {args.config!r} "
                 f"(bundle it with --only {args.config})")
    study, key = jobs[0]
    job = os.path.join(args.bundle, "jobs", study, key, "job.json")
    work = tempfile.mkdtemp(prefix="memwall-bench-pair-")
    rates = {0: [], 1: []}
    ratios = []
    for rnd in range(args.rounds):
        for first in (0, 1):
            order = [first, 1 - first]
            running = []
            for cpu, which in enumerate(order):
                out = os.path.join(work, f"{rnd}.{cpu}.{'ab'[which]}")
                job_dir = os.path.join(out, "jobs", study, key)
                os.makedirs(job_dir)
                shutil.copyfile(job, os.path.join(job_dir, "job.json"))
                log = open(os.path.join(out, "memwall.log"), "w")
                proc = subprocess.Popen(
                    ["taskset", "-c", str(cpu), runners[which], "sweep-dir",
                     os.path.join(out, "jobs"), "--only", f"{study}/{key}"],
                    cwd=args.bundle, env=dict(os.environ, RAYON_NUM_THREADS="1"),
                    stdout=log, stderr=subprocess.STDOUT)
                running.append((which, proc, job_dir, out))
            got = {}
            for which, proc, job_dir, out in running:
                proc.wait()
                path = os.path.join(job_dir, "record.json")
                rec = json.load(open(path)) if os.path.exists(path) else {}
                if rec.get("status") != "ok" or not rec.get("summary"):
                    sys.exit(f"runner {'AB'[which]} failed: {rec.get('reason') or out}")
                got[which] = rec["summary"]["samples_per_s"]
                rates[which].append(got[which])
            ratios.append(got[1] / got[0])
            print(f"round {rnd + 1}, A on core {order.index(0)}: A {got[0]:.3f}, "
                  f"B {got[1]:.3f} samples/s, B / A {ratios[-1]:.3f}", flush=True)
    print(f"\n{args.config}, {len(ratios)} pairs, one thread each: A median "
          f"{statistics.median(rates[0]):.3f}, B median {statistics.median(rates[1]):.3f} "
          f"samples/s; B / A median {statistics.median(ratios):.3f} "
          f"({min(ratios):.3f}-{max(ratios):.3f})")


if __name__ == "__main__":
    main()
