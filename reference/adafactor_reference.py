#!/usr/bin/env python3
"""Reference numbers for memwall's Adafactor (runner/src/train/adafactor.rs).

The algorithm is forgather's Adafactor as its peak_memory study runs it (jdinalt/forgather,
src/forgather/ml/optim/adafactor.py, built by
examples/tiny_experiments/peak_memory/templates/project.yaml with lr 2e-4 and weight decay
0.01): Shazeer and Stern 2018 (arXiv:1804.04235), Algorithm 4 for matrices (factored row and
column second moments) and Algorithm 5 for vectors, beta2_t = min(1 - t^-0.8, 0.999),
epsilon_1 = 1e-30 added to the squared gradient, update clipping at d = 1, no first moment,
an absolute learning rate (no relative step) and decoupled weight decay
p <- p (1 - lr wd) - lr U. A tensor of rank > 2 is factored as the [n, m] matrix of its
leading dimensions flattened by its last one, as forgather does.

`torch.optim.Adafactor` is not this algorithm with any settings: it always multiplies the step
by max(eps2, RMS(p)) * min(lr, 1/sqrt(t)) (the paper's relative step) and places epsilon_1
differently. So the numbers are computed by a plain-torch re-implementation:
`adafactor_step` of reference/torch_peak_memory.py (which the PyTorch twin column trains
with), in float64. Two independent computations check it before anything is written:

1. the paper's formulas written out literally here (`paper_step`: R_t = (G^2 + eps1 1 1^T) 1_m,
   C_t = 1^T (G^2 + eps1 1 1^T), V_t = R_t C_t / (1^T R_t) as an explicit matrix,
   U_t = G / sqrt(V_t)), float64, every tensor: agreement to 1e-12 relative;
2. transformers' `Adafactor` (scale_parameter=False, relative_step=False, warmup_init=False,
   the given lr and weight_decay; its defaults eps=(1e-30, 1e-3), clip_threshold=1,
   decay_rate=-0.8, beta1=None), float64, on the matrix and the vector (it factors a rank-3
   tensor per leading index, not flattened, and does not clamp beta2_t at 0.999, which binds
   only after 5623 steps): agreement to 1e-12 relative. Skipped, and said so in the JSON,
   when transformers is not installed.

Inputs: a [3, 4] matrix, a [4] vector and a [2, 3, 4] tensor, initial values and 5 steps of
gradients drawn from a seeded generator in float32 (so f32 represents them exactly), each
step's gradients scaled by 1, 0.3, 4, 0.05, 20 so that update clipping acts on some steps
(recorded per step and tensor as `clipped`). Two cases: forgather's settings (lr 2e-4, weight
decay 0.01) and a large step (lr 0.05, weight decay 0.1) whose parameter changes are large
enough for the Rust test to compare the changes themselves, not only the parameters.

Writes runner/tests/data/adafactor_reference.json (the parameters after every step, float64
values); runner/tests/adafactor.rs runs memwall's optimizer on the same inputs.

Usage: python3 reference/adafactor_reference.py [--out PATH]
"""

import argparse
import json
import os
import sys

import torch

sys.dont_write_bytecode = True  # no __pycache__ beside the scripts
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_peak_memory import (  # noqa: E402
    ADAFACTOR_BETA2_MAX, ADAFACTOR_CLIP, ADAFACTOR_DECAY_RATE, ADAFACTOR_EPS1, adafactor_beta2,
    adafactor_step)

SHAPES = {"matrix": [3, 4], "vector": [4], "tensor3": [2, 3, 4]}
GRAD_SCALES = [1.0, 0.3, 4.0, 0.05, 20.0]
CASES = [
    {"name": "forgather", "lr": 2e-4, "weight_decay": 0.01},
    {"name": "large_step", "lr": 0.05, "weight_decay": 0.1},
]
SEED = 20180411
TOLERANCE = 1e-12
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runner", "tests", "data",
                   "adafactor_reference.json")


def inputs():
    """Initial values and gradients per tensor, float32 values held as float64."""
    gen = torch.Generator().manual_seed(SEED)
    out = {}
    for name, shape in SHAPES.items():
        init = torch.randn(shape, generator=gen, dtype=torch.float32)
        grads = [torch.randn(shape, generator=gen, dtype=torch.float32) * s for s in GRAD_SCALES]
        out[name] = (init.double(), [g.double() for g in grads])
    return out


def paper_step(p, g, state, lr, weight_decay):
    """The paper's Algorithm 4 / 5 written out with ones-vectors (float64, independent of
    `adafactor_step`); a rank-3 tensor as its [n, m] flattening."""
    t = state.get("t", 0) + 1
    state["t"] = t
    beta = min(1.0 - t ** ADAFACTOR_DECAY_RATE, ADAFACTOR_BETA2_MAX)
    if g.dim() >= 2:
        G = g.reshape(-1, g.shape[-1])
        n, m = G.shape
        ones_n = torch.ones(n, 1, dtype=g.dtype)
        ones_m = torch.ones(m, 1, dtype=g.dtype)
        G2 = G * G + ADAFACTOR_EPS1 * (ones_n @ ones_m.T)
        R = beta * state.get("R", torch.zeros(n, 1, dtype=g.dtype)) + (1 - beta) * (G2 @ ones_m)
        C = beta * state.get("C", torch.zeros(1, m, dtype=g.dtype)) + (1 - beta) * (ones_n.T @ G2)
        state["R"], state["C"] = R, C
        V = (R @ C) / (ones_n.T @ R)
        U = (G / V.sqrt()).reshape(g.shape)
    else:
        V = beta * state.get("V", torch.zeros_like(g)) + (1 - beta) * (g * g + ADAFACTOR_EPS1)
        state["V"] = V
        U = g / V.sqrt()
    rms = (U * U).mean().sqrt()
    U_hat = U / max(1.0, float(rms) / ADAFACTOR_CLIP)
    return p * (1 - lr * weight_decay) - lr * U_hat


def max_rel(a, b):
    return float(((a - b).abs() / b.abs().clamp(min=1e-300)).max())


def run_case(case, data):
    lr, wd = case["lr"], case["weight_decay"]
    result = {}
    for name, (init, grads) in data.items():
        p = init.clone()
        q = init.clone()
        state, paper_state = {}, {}
        after, clipped = [], []
        for g in grads:
            rms = adafactor_step(torch, p, g, state, lr, wd)
            q = paper_step(q, g, paper_state, lr, wd)
            err = max_rel(q, p)
            assert err < TOLERANCE, f"{case['name']}/{name}: paper formulas differ by {err}"
            after.append(p.flatten().tolist())
            clipped.append(rms > ADAFACTOR_CLIP)
        result[name] = {"after": after, "clipped": clipped}
    return result


def transformers_check(case, data, result):
    """Max relative difference of transformers' Adafactor from `result` (matrix, vector)."""
    try:
        from transformers.optimization import Adafactor
    except ImportError as e:
        return {"status": "skipped", "reason": f"transformers is not installed ({e})"}
    worst = 0.0
    for name in ("matrix", "vector"):
        init, grads = data[name]
        p = torch.nn.Parameter(init.clone())
        opt = Adafactor([p], lr=case["lr"], weight_decay=case["weight_decay"],
                        scale_parameter=False, relative_step=False, warmup_init=False)
        for step, g in enumerate(grads):
            p.grad = g.clone()
            opt.step()
            want = torch.tensor(result[name]["after"][step], dtype=torch.float64)
            err = max_rel(p.detach().flatten(), want)
            assert err < TOLERANCE, f"{case['name']}/{name} step {step + 1}: transformers differs by {err}"
            worst = max(worst, err)
    import transformers
    return {"status": "agrees", "transformers_version": transformers.__version__,
            "tensors": ["matrix", "vector"], "max_relative_difference": worst}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args(argv)
    data = inputs()
    cases = []
    for case in CASES:
        result = run_case(case, data)
        check = transformers_check(case, data, result)
        cases.append({**case, "tensors": result, "transformers_check": check})
    clipped = sum(c for case in cases for t in case["tensors"].values() for c in t["clipped"])
    assert clipped > 0, "no step exercised update clipping"
    doc = {
        "format": "memwall-adafactor-reference/1",
        "generated_by": "reference/adafactor_reference.py",
        "torch_version": torch.__version__,
        "algorithm": {
            "source": "Shazeer and Stern 2018 (arXiv:1804.04235) Algorithms 4 and 5, as "
                      "forgather's src/forgather/ml/optim/adafactor.py runs it",
            "decay_rate": ADAFACTOR_DECAY_RATE, "beta2_max": ADAFACTOR_BETA2_MAX,
            "eps1": ADAFACTOR_EPS1, "clip_threshold": ADAFACTOR_CLIP,
            "beta2_first_steps": [adafactor_beta2(t) for t in range(1, len(GRAD_SCALES) + 1)],
            "relative_step": False, "first_moment": False,
            "weight_decay": "decoupled: p <- p (1 - lr wd) - lr U",
        },
        "seed": SEED,
        "grad_scales": GRAD_SCALES,
        "shapes": SHAPES,
        "initial": {n: d[0].flatten().tolist() for n, d in data.items()},
        "grads": {n: [g.flatten().tolist() for g in d[1]] for n, d in data.items()},
        "cases": cases,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {os.path.normpath(args.out)}: {len(cases)} cases, "
          f"{clipped} clipped tensor-steps; transformers: "
          + ", ".join(c["transformers_check"]["status"] for c in cases))
    return 0


if __name__ == "__main__":
    sys.exit(main())
