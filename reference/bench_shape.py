#!/usr/bin/env python3
"""Writes a copy of an experiment file whose `cpu` profile trains a larger model, for `just
bench-cpu`'s second shape (a benchmark input, not a study: it lives under target/).

The `cpu` profile of `peak_memory` (8 layers, d_model 128, sequence 128: 1.9M parameters in the
blocks) is small enough that framework overhead weighs on every step; the larger shape (8 layers,
d_model 512, 8 heads, d_ff 2048, sequence 256, batch 8, 25.2M parameters in the blocks) is where
the matmuls dominate, as at the source's size.

Usage: python3 reference/bench_shape.py experiments/peak_memory.toml OUT.toml
"""

import re
import sys

LARGE = ("model = { layers = 8, d_model = 512, heads = 8, d_ff = 2048, seq_len = 256, "
         "batch = 8, vocab = 2048 }")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().splitlines()[-1])
    src, out = sys.argv[1], sys.argv[2]
    text = open(src).read()
    section = re.search(r"^\[profiles\.cpu\]\n(?:.*\n)*?model = \{[^\n]*\}$", text, re.M)
    if not section:
        sys.exit(f"{src}: no `model = {{ ... }}` line under [profiles.cpu] to replace")
    start = section.group(0).rfind("model = {")
    a, b = section.start() + start, section.end()
    with open(out, "w") as f:
        f.write(text[:a] + LARGE + text[b:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
