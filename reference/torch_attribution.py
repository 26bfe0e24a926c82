#!/usr/bin/env python3
"""PyTorch side of memwall's attribution benchmark: where the time of a training step goes.

Times, in PyTorch eager, the operations `memwall-job bench` times in Burn, at the shapes of the
model of a memwall job file (job.json: `model` = layers, d_model, heads, d_ff, seq_len, batch,
vocab, tie_embeddings), in f32 and bf16, and prints one JSON line per (op, shape, dtype, pass)
in memwall's attribution row format (memwall-attribution/1, "framework": "pytorch"); the
operation list, shapes and FLOP formulas are memwall_core::record::attribution's:

- matmul (torch.matmul -> cuBLAS on CUDA), for the q/k/v/o projections (`attn_qkvo`), the MLP
  (`mlp_up`, `mlp_down`) and the head (`lm_head`), with `m = batch * seq_len` tokens:
  forward X @ W ([M, K, N] = [m, k, n]), backward_input dY @ W.T ([m, n, k]), backward_weight
  X.T @ dY ([k, m, n], the flattened product torch.nn.Linear's backward computes);
  the tied head as the model computes it: h @ E.T, dY @ E, h.T @ dY. FLOPs 2*M*K*N.
- attention: F.scaled_dot_product_attention(q, k, v, is_causal=True) forward, and backward
  (torch.autograd.grad of the output with a ones gradient, as Burn's backward() seeds);
  attention_naive: softmax(mask(Q K^T / sqrt(d))) V materialized (softmax in f32), likewise.
  Shape [b, h, t, d/h]; FLOPs as FlashAttention-2 counts them (Dao 2023, section 4.1, and
  flash-attention's benchmarks/benchmark_flash_attention.py): forward 4*b*h*t^2*dh / 2 (causal),
  backward 2.5 times that.
- layer_norm: F.layer_norm over d_model with weight and bias, forward and backward; shape
  [m, d]; no FLOPs, `bytes` = inputs read and outputs written once (2 or 3 tensors of m*d).
- gelu: F.gelu (exact, erf) on the MLP's hidden activations [m, d_ff], forward and backward;
  `bytes` as layer_norm's (2 or 3 tensors of m*d_ff).
- head_merge: x.transpose(1, 2).reshape(b, t, d) of a [b, h, t, d/h] tensor, the permuted-to-
  contiguous copy of merging the heads (forward only; 4 per block and step: the merge, and the
  backward of the q, k, v split); `bytes` = 2 tensors of m*d.
- train_step: one step of the model of reference/torch_peak_memory.py (plain backward, AdamW,
  SDPA attention), random tokens; FLOPs (6N + 6*layers*seq*d) per token times the tokens.

Each is run --warmup times untimed, then --repeats times, each between two
torch.cuda.synchronize() calls (on the CPU, wall time); the row holds the median. f32 matmuls
run at "highest" precision (no TF32) unless --tf32, as reference/torch_peak_memory.py does.

Usage:
    python3 torch_attribution.py --job runs/peak_memory/<key>/job.json --out torch.jsonl \\
        [--device auto|cuda|cpu] [--repeats 10] [--warmup 3] [--dtypes f32,bf16] \\
        [--only matmul,attention,attention_naive,layer_norm,gelu,head_merge,train_step] [--tf32] [--tiny]

--tiny replaces the job's model with the smoke profile's (2 layers, d_model 32) to check the
script on a CPU. Every failure is a row (status "failed" or "unsupported"); exit status 0
whenever rows were written, 2 for bad arguments or job file.
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

FORMAT = "memwall-attribution/1"
TINY_MODEL = {"layers": 2, "d_model": 32, "heads": 2, "d_ff": 64, "seq_len": 32, "batch": 2,
              "vocab": 320, "tie_embeddings": True}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--job", required=True, help="a memwall job.json (its `model` is used)")
    p.add_argument("--out", help="write the JSON lines here too (replaced)")
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--dtypes", default="f32,bf16")
    p.add_argument("--only", help="comma-separated ops (default: all)")
    p.add_argument("--tf32", action="store_true", help="allow TF32 for f32 matmuls")
    p.add_argument("--tiny", action="store_true", help="the smoke model (a CPU check)")
    args = p.parse_args(argv)
    if args.repeats < 1 or args.warmup < 0:
        p.error("--repeats must be >= 1 and --warmup >= 0")
    for d in args.dtypes.split(","):
        if d not in ("f32", "bf16", "f16"):
            p.error(f"--dtypes: `{d}` is not f32, bf16 or f16")
    return args


def fail(message):
    print(message, file=sys.stderr)
    sys.exit(2)


def load_model(path):
    try:
        with open(path) as f:
            job = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        fail(f"{path}: cannot read the job file ({e})")
    m = job.get("model")
    fields = ("layers", "d_model", "heads", "d_ff", "seq_len", "batch", "vocab")
    if not isinstance(m, dict):
        fail(f"{path}: field `model` is missing")
    for f in fields:
        if not isinstance(m.get(f), int) or m[f] < 1:
            fail(f"{path}: field `model.{f}` is not a positive integer")
    if m["d_model"] % m["heads"]:
        fail(f"{path}: field `model.heads` does not divide d_model")
    m = {f: m[f] for f in fields}
    m["tie_embeddings"] = bool(job["model"].get("tie_embeddings", True))
    return job, m


def train_flops_per_token(m):
    """memwall_core's ModelConfig::train_flops_per_token: 6N + 6 * layers * seq * d."""
    d, f, v, l, t = m["d_model"], m["d_ff"], m["vocab"], m["layers"], m["seq_len"]
    n = l * (4 * d * d + 2 * d * f) + v * d
    return 6.0 * n + 6.0 * l * t * d


def attention_flops(b, h, t, dh, backward):
    forward = 4.0 * b * h * t * t * dh / 2.0
    return 2.5 * forward if backward else forward


def operations(m):
    """memwall_core::record::attribution::operations, without Burn's backward_weight_flat."""
    b, t, d, h, f, v, l = (m["batch"], m["seq_len"], m["d_model"], m["heads"], m["d_ff"],
                           m["vocab"], m["layers"])
    tokens, dh = b * t, d // h
    ops = []
    for name, k, n, calls in (("attn_qkvo", d, d, 4 * l), ("mlp_up", d, f, l),
                              ("mlp_down", f, d, l), ("lm_head", d, v, 1)):
        for pas, shape in (("forward", [tokens, k, n]), ("backward_input", [tokens, n, k]),
                           ("backward_weight", [k, tokens, n])):
            ops.append(dict(op="matmul", name=name, pass_=pas, shape=shape,
                            flops=2.0 * shape[0] * shape[1] * shape[2], elements=None,
                            calls=calls, k=k, n=n))
    for op in ("attention", "attention_naive"):
        for pas, bwd in (("forward", False), ("backward", True)):
            ops.append(dict(op=op, name="causal", pass_=pas, shape=[b, h, t, dh],
                            flops=attention_flops(b, h, t, dh, bwd), elements=None, calls=l))
    for pas, tensors in (("forward", 2), ("backward", 3)):
        ops.append(dict(op="layer_norm", name="pre_norm", pass_=pas, shape=[tokens, d],
                        flops=None, elements=tensors * tokens * d, calls=2 * l + 1))
    for pas, tensors in (("forward", 2), ("backward", 3)):
        ops.append(dict(op="gelu", name="mlp", pass_=pas, shape=[tokens, f], flops=None,
                        elements=tensors * tokens * f, calls=l))
    ops.append(dict(op="head_merge", name="layout_copy", pass_="forward", shape=[b, h, t, dh],
                    flops=None, elements=2 * tokens * d, calls=4 * l))
    ops.append(dict(op="train_step", name="plain", pass_="step", shape=[b, t],
                    flops=train_flops_per_token(m) * tokens, elements=None, calls=1))
    return ops


def device_name(torch, device):
    """The device's name as torch_peak_memory.py (and memwall's records) name it."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from torch_peak_memory import device_name as reference_device_name
    return reference_device_name(torch, device)


def measure(torch, device, warmup, repeats, setup, run):
    """Times run(setup()) between two synchronizations; returns the timed repeats' seconds."""
    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    times = []
    for i in range(warmup + repeats):
        arg = setup()
        sync()
        t0 = time.perf_counter()
        out = run(arg)
        sync()
        dt = time.perf_counter() - t0
        del out
        if i >= warmup:
            times.append(dt)
    return times


def time_op(torch, spec, m, dtype, device, args):
    F = torch.nn.functional
    rnd = lambda *shape, grad=False: torch.randn(*shape, device=device, dtype=dtype,
                                                 requires_grad=grad)
    b, t, d, h = m["batch"], m["seq_len"], m["d_model"], m["heads"]
    tokens, dh = b * t, d // h
    go = lambda setup, run: measure(torch, device, args.warmup, args.repeats, setup, run)
    op, pas = spec["op"], spec["pass_"]
    with torch.no_grad() if op == "matmul" else torch.enable_grad():
        if op == "matmul":
            k, n = spec["k"], spec["n"]
            if spec["name"] == "lm_head" and m["tie_embeddings"]:
                x, e, dy = rnd(tokens, k), rnd(n, k), rnd(tokens, n)
                run = {"forward": lambda _: x @ e.t(), "backward_input": lambda _: dy @ e,
                       "backward_weight": lambda _: x.t() @ dy}[pas]
                return go(lambda: None, run), "torch.matmul (cuBLAS on CUDA); tied head h @ E.T"
            x, w, dy = rnd(tokens, k), rnd(k, n), rnd(tokens, n)
            run = {"forward": lambda _: x @ w, "backward_input": lambda _: dy @ w.t(),
                   "backward_weight": lambda _: x.t() @ dy}[pas]
            return go(lambda: None, run), "torch.matmul (cuBLAS on CUDA) on the flat [b*t, k] input"
        if op in ("attention", "attention_naive"):
            q, k_, v = (rnd(b, h, t, dh, grad=True) for _ in range(3))
            if op == "attention":
                fwd = lambda: F.scaled_dot_product_attention(q, k_, v, is_causal=True)
                note = "F.scaled_dot_product_attention(is_causal=True)"
            else:
                mask = torch.ones(t, t, dtype=torch.bool, device=device).triu(1)

                def fwd():
                    s = (q @ k_.transpose(-2, -1)) / math.sqrt(dh)
                    s = s.masked_fill(mask, float("-inf"))
                    return torch.softmax(s.float(), dim=-1).to(q.dtype) @ v
                note = "naive: softmax(mask(Q K^T / sqrt(d))) V materialized, softmax in f32"
            if pas == "forward":
                return go(lambda: None, lambda _: fwd()), note
            return go(fwd, lambda out: torch.autograd.grad(out, (q, k_, v),
                                                           torch.ones_like(out))), note
        if op == "layer_norm":
            x = rnd(b, t, d, grad=True)
            gamma = torch.ones(d, device=device, dtype=dtype, requires_grad=True)
            beta = torch.zeros(d, device=device, dtype=dtype, requires_grad=True)
            fwd = lambda: F.layer_norm(x, (d,), gamma, beta, 1e-5)
            note = "F.layer_norm (weight and bias)"
            if pas == "forward":
                return go(lambda: None, lambda _: fwd()), note
            return go(fwd, lambda y: torch.autograd.grad(y, (x, gamma, beta),
                                                         torch.ones_like(y))), note
        if op == "gelu":
            x = rnd(tokens, m["d_ff"], grad=True)
            fwd = lambda: F.gelu(x)
            note = "F.gelu (exact, erf)"
            if pas == "forward":
                return go(lambda: None, lambda _: fwd()), note
            return go(fwd, lambda y: torch.autograd.grad(y, (x,), torch.ones_like(y))), note
        if op == "head_merge":
            x = rnd(b, h, t, dh)
            return (go(lambda: None, lambda _: x.transpose(1, 2).reshape(b, t, d)),
                    "x.transpose(1, 2).reshape(b, t, d): the permuted-to-contiguous copy")
        if op == "train_step":
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            from torch_peak_memory import build_model
            torch.manual_seed(0)
            model = build_model(torch, m, "sdpa")(None).to(device=device, dtype=dtype)
            opt = torch.optim.AdamW(model.parameters(), foreach=True, lr=1e-4, weight_decay=0.1)
            gen = torch.Generator(device="cpu").manual_seed(0)
            batch = torch.randint(0, m["vocab"], (b, t + 1), generator=gen).to(device)

            def step(_):
                loss = model(batch[:, :-1], batch[:, 1:])
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                return loss.detach()
            return go(lambda: None, step), ("one step of reference/torch_peak_memory.py's model "
                                            "(SDPA, plain backward, AdamW foreach)")
    raise ValueError(f"unknown op {op}")


def main(argv=None):
    args = parse_args(argv)
    job, m = load_model(args.job)
    if args.tiny:
        m = dict(TINY_MODEL)
    only = set(args.only.split(",")) if args.only else None
    base = {"format": FORMAT, "framework": "pytorch", "framework_version": "unknown",
            "backend": "cpu", "device": "unknown", "model": m}
    rows = []
    out = open(args.out + f".tmp-{os.getpid()}", "w") if args.out else None

    def emit(row):
        line = json.dumps(row)
        print(line, flush=True)
        if out:
            out.write(line + "\n")
            out.flush()
        rows.append(row)
        t = row.get("median_s")
        print(f"{row['op']} {row['name']} {row['pass']} {row['dtype']}: "
              + (f"{t * 1e3:.3f} ms" + (f", {row['tflops']:.2f} TFLOP/s" if row.get("tflops")
                                          else "") if t else f"{row['status']} ({row.get('reason')})"),
              file=sys.stderr)

    try:
        import torch
    except ImportError as e:
        torch, reason = None, f"PyTorch is not installed ({e})"
    if torch is not None:
        base["framework_version"] = torch.__version__
        use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
        if args.device == "cuda" and not torch.cuda.is_available():
            torch, reason = None, "torch.cuda.is_available() is False"
    if torch is not None:
        device = torch.device("cuda" if use_cuda else "cpu")
        base["backend"] = device.type
        base["device"] = device_name(torch, device)
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
        torch.backends.cudnn.allow_tf32 = args.tf32
        torch.set_float32_matmul_precision("high" if args.tf32 else "highest")
    for dname in args.dtypes.split(","):
        dtype = None if torch is None else {"f32": torch.float32, "bf16": torch.bfloat16,
                                            "f16": torch.float16}[dname]
        for spec in operations(m):
            if only and spec["op"] not in only:
                continue
            row = dict(base, op=spec["op"], name=spec["name"], shape=spec["shape"], dtype=dname,
                       status="failed", median_s=None, repeats=0, flops=spec["flops"],
                       tflops=None, calls_per_step=spec["calls"])
            row["pass"] = spec["pass_"]
            if spec["elements"] is not None:
                row["bytes"] = float(spec["elements"] * (4 if dname == "f32" else 2))
            if torch is None:
                row.update(status="unsupported", reason=reason)
                emit(row)
                continue
            try:
                times, note = time_op(torch, spec, m, dtype, device, args)
                s = statistics.median(times)
                row.update(status="ok", median_s=s, repeats=len(times))
                if spec["flops"] is not None and s > 0:
                    row["tflops"] = spec["flops"] / s / 1e12
                precision = ("TF32 allowed" if args.tf32 else "f32 matmuls at highest precision "
                             "(no TF32)") if dname == "f32" else dname
                row["note"] = f"{note}; {precision}"
            except Exception as e:  # noqa: BLE001 - every failure is a row
                oom = "out of memory" in str(e).lower()
                row["reason"] = (("out of memory: " if oom else "")
                                 + f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")[:500]
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            emit(row)
    if out:
        out.close()
        os.replace(out.name, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
