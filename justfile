# memwall: reproduce, measure and publish the memory-wall experiments of DL training.
# One cargo profile (release) serves tests, runs and the binary carried to GPU machines.

set shell := ["bash", "-euo", "pipefail", "-c"]

memwall := "./target/release/memwall"

# Run every study on this machine (cpu profile without a GPU) and render its reports.
default: reproduce

# Build the release binaries (memwall and the slim runner memwall-job).
build:
    cargo build --release --locked --bins

# Run every study in experiments/ on this machine into target/memwall/runs (ignored by git) and
# render its reports there, beside the published evidence (extra flags go to `memwall
# reproduce`; `--publish` writes the committed runs/ and reports/ instead: maintainers only).
reproduce *FLAGS: build
    {{memwall}} reproduce {{FLAGS}}

# Run one study, e.g. `just run experiments/peak_memory.toml --profile smoke`.
run EXPERIMENT *FLAGS: build
    {{memwall}} run {{EXPERIMENT}} {{FLAGS}}

# Re-render every report and the index (reports/index.md, index.html) from the committed
# records in runs/ (no job is run; the same records give the same files on any day).
report: build
    {{memwall}} report

# Fail (naming each file and its first differing line) when a committed report is not what the
# committed records give.
report-check: build
    {{memwall}} report --check

# Every headline claim with its measure's provenance, its rule and band, and its verdict; fail
# when a claim about the world is judged on arithmetic or a rule cannot fail.
claims-check: build
    {{memwall}} claims --check

# The reports as a Hugo site: page bundles and the index in target/site/content, built with
# Debian's hugo (`apt-get install -y hugo`) into target/site/public.
publish: build
    rm -rf target/site
    {{memwall}} publish --to target/site/content
    hugo --source site --contentDir "$PWD/target/site/content" --destination "$PWD/target/site/public" --noBuildLock
    @echo "open target/site/public/reports/index.html"

# `publish`, then fail on any Hugo warning, a missing figure, a study missing from the index or
# a formula that lost its asterisks (.ci/hugo-check).
publish-check: build
    rm -rf target/site
    {{memwall}} publish --to target/site/content
    .ci/hugo-check target/site/content

# The test suite (unit, integration, end-to-end smoke study, and the committed report pages in
# headless Chromium: `apt-get install -y chromium` first, as .ci/run does).
test:
    cargo test --release --locked --all-targets

# Formatting and lints, and the workspace's shape (`just structure`).
lint: structure
    cargo fmt --all -- --check
    cargo clippy --release --locked --all-targets -- -D warnings

# The workspace's shape: no circle among the modules of a crate (Cargo refuses one among
# crates), no source file over 1,000 lines of code outside its tests. `--print` shows the arrows.
structure *flags:
    python3 .ci/structure.py {{flags}}

# Screenshots of every report page at 1280 px (headless Chromium) into target/screenshots/.
screenshots:
    mkdir -p target/screenshots
    for page in reports/*/index.html; do \
        name=$(basename "$(dirname "$page")"); \
        chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,8000 \
            --screenshot="target/screenshots/$name.png" "file://$PWD/$page" 2>/dev/null; \
    done
    ls -l target/screenshots

# The manual: the mdBook in docs/ into target/book/html (`cargo install mdbook
# mdbook-linkcheck2 --locked` first, as .ci/run does). Fails on any warning mdbook prints and
# on a link to a missing file (mdbook-linkcheck2).
book:
    #!/usr/bin/env bash
    set -euo pipefail
    out=$(mdbook build docs 2>&1) || { echo "$out"; exit 1; }
    echo "$out"
    if grep -E "WARN|ERROR" <<<"$out" >/dev/null; then echo "mdbook printed a warning: fix it" >&2; exit 1; fi

# Check the machine: devices, backends.
doctor: build
    {{memwall}} doctor

# The data sets of datasets.toml that no folder of the data search path holds, downloaded into
# the user cache (~/.cache/memwall) with their sizes and SHA-256 checked; MEMWALL_DATA_URL (or
# `memwall data fetch --from URL`) names a mirror. `memwall data list` shows where each is.
data: build
    {{memwall}} data fetch

# The whole TinyStories validation files (needs internet) into data/, which the `full` profile
# reads (data/TinyStories-valid.txt); not in datasets.toml: their sizes and SHA-256 are not
# recorded yet.
data-full:
    mkdir -p data
    curl -fL --retry 3 -C - -o data/TinyStories-valid.txt https://huggingface.co/datasets/roneneldan/TinyStories/resolve/main/TinyStories-valid.txt
    curl -fL --retry 3 -C - -o data/TinyStoriesV2-GPT4-valid.txt https://huggingface.co/datasets/roneneldan/TinyStories/resolve/main/TinyStoriesV2-GPT4-valid.txt
    ls -l data

# A bundle for a GPU machine without Rust: runner, jobs, corpus, the committed autotune cache,
# PyTorch twin, plan.tsv and run.sh, in target/gpu-bundle/ (the book, docs/src/operations/gpu-runs.md, "On a GPU machine
# without Rust"), e.g. `just gpu-bundle experiments/peak_memory.toml --profile full`. There,
# `./gpu-bundle/run.sh --results DIR`; here `memwall import DIR/results.tar.gz DIR/cache.tar.gz`.
gpu-bundle *FLAGS:
    cargo build --release --locked --bin memwall
    {{memwall}} bundle {{FLAGS}}

# The whole GPU programme as one bundle (the book: docs/src/operations/gpu-runs.md): the slim CUDA runner, then every
# study of the suite (peak_memory, checkpoint_interval, mixed_precision) at the `full` profile
# with the PyTorch twin, in tiers (1: the source's rows, each with its PyTorch eager twin).
# There, one command: `./gpu-bundle/run.sh --results DIR` (stops before 9 minutes; again to go
# on; `--dry-run` prints the plan); here, after each run:
# `memwall import DIR/results.tar.gz DIR/cache.tar.gz`.
gpu-suite *FLAGS: carry
    cargo build --release --locked --bin memwall
    {{memwall}} bundle --suite {{FLAGS}}

# Build the slim runner carried to GPU machines: `memwall-job` with the CUDA and flex backends
# only, opt-level 3 with fat LTO (the `carry` profile), stripped: target/carry/memwall-job.
carry:
    cargo build --profile carry --locked -p memwall-runner --bin memwall-job --no-default-features --features cuda
    ls -l target/carry/memwall-job

# Every study afresh (a GPU runs `full`, the CPU `--cpu-profile`, default smoke), one entry
# appended to history/ (date and git revision), history/runs/reports/nightly/ with the change
# since the last run; --fail-on-regression exits non-zero on a regression.
nightly *FLAGS: build
    {{memwall}} nightly {{FLAGS}}

# The nightly on a GPU node that has Rust: every study afresh at the `full` profile on CUDA, one
# history entry, the trend page (where the node has no Rust: `just gpu-suite` here, `run.sh`
# there, `memwall import RESULTS --nightly` here; the book: docs/src/operations/nightly.md).
nightly-gpu *FLAGS: build
    {{memwall}} nightly --device cuda {{FLAGS}}

# Write the files of a scheduler (systemd, cron, slurm or github) that run the nightly every night
# in this checkout, e.g. `just nightly-install systemd --at 03:00`; prints the command that
# enables them (the book: docs/src/operations/nightly.md).
nightly-install SCHEDULER *FLAGS: build
    {{memwall}} nightly install --scheduler {{SCHEDULER}} {{FLAGS}}

# Installs Debian's slurm-wlm and munge (needs root), starts slurmctld, slurmd and munge on
# loopback in a scratch folder, and runs a smoke study through `memwall sweep --emit slurm`.
# A single-node Slurm and a smoke study run through it as a job array.
slurm-test *ARGS: build
    .ci/slurm-test {{ARGS}}

# memwall beside PyTorch eager on the CPU, alternating per configuration (a benchmark, not a
# test; needs `python3 -m pip install --user torch`): the peak_memory cpu profile's control,
# bfloat16, checkpoint, fused_checkpoint and memory_budget_60 (AdamW, as PyTorch's default),
# each run as `memwall run` runs it (plan stage, then the job), `ROUNDS` rounds; prints samples/s
# of both, the ratio with its range, and both peaks. `SHAPE=large` runs the same at a larger
# model (8 layers, d_model 512, sequence 256: 25M parameters in the blocks; reference/bench_shape.py).
bench-cpu ROUNDS="2" SHAPE="cpu": build
    rm -rf target/bench-{{SHAPE}}
    mkdir -p target/bench-{{SHAPE}}
    if [ "{{SHAPE}}" = large ]; then python3 reference/bench_shape.py experiments/peak_memory.toml target/bench-large/peak_memory.toml; elif [ "{{SHAPE}}" != cpu ]; then echo "SHAPE is cpu or large, not {{SHAPE}}" >&2; exit 2; fi
    {{memwall}} bundle $([ "{{SHAPE}}" = large ] && echo "target/bench-large/peak_memory.toml --data ${MEMWALL_DATA:-../shared/data/tinystories/TinyStories-valid-excerpt.txt}" || echo experiments/peak_memory.toml) --target flex --profile cpu --out target/bench-{{SHAPE}}/bundle --no-archive --runner target/release/memwall-job --only control,bfloat16,checkpoint,fused_checkpoint,memory_budget_60
    python3 reference/bench_cpu.py --bundle target/bench-{{SHAPE}}/bundle --rounds {{ROUNDS}} --json target/bench-{{SHAPE}}/bench.json

# Two runners (memwall-job binaries, e.g. one built from main and one from a branch) on one
# configuration of the peak_memory cpu profile at the same time, one core and one thread each,
# swapping cores every round (reference/bench_pair.py): B / A per pair, for changes to a
# kernel measured on a shared machine whose speed drifts between runs. `SHAPE=large` as in
# bench-cpu.
bench-pair A B CONFIG="bfloat16" SHAPE="cpu" ROUNDS="3": build
    rm -rf target/bench-pair
    mkdir -p target/bench-pair
    if [ "{{SHAPE}}" = large ]; then python3 reference/bench_shape.py experiments/peak_memory.toml target/bench-pair/peak_memory.toml; elif [ "{{SHAPE}}" != cpu ]; then echo "SHAPE is cpu or large, not {{SHAPE}}" >&2; exit 2; fi
    {{memwall}} bundle $([ "{{SHAPE}}" = large ] && echo "target/bench-pair/peak_memory.toml --data ${MEMWALL_DATA:-../shared/data/tinystories/TinyStories-valid-excerpt.txt}" || echo experiments/peak_memory.toml) --target flex --profile cpu --out target/bench-pair/bundle --no-archive --runner target/release/memwall-job --only {{CONFIG}}
    python3 reference/bench_pair.py --bundle target/bench-pair/bundle --config {{CONFIG}} --rounds {{ROUNDS}} {{A}} {{B}}

# Re-measure PyTorch eager's rows of the training studies' `cpu` profile on this CPU (needs
# `python3 -m pip install --user torch`; minutes, not a test): `memwall twin --device cpu`
# plans each study's cpu-profile jobs as a flex bundle does, runs reference/torch_peak_memory.py
# --device cpu once per configuration on memwall's thread count, checks each row (this CPU's
# name as memwall's records carry it, the plan's model) and stores it in
# runs/<study>/pytorch/<cpu>.<config>.json (`--runs DIR` for another store), then re-renders
# the reports, whose CPU sections show PyTorch's samples/s beside memwall's. E.g.
# `just twin-cpu --study peak_memory --only control_adafactor --runs /tmp/scratch`;
# `--dry-run` prints the plans (and what is left out, with the reason) and runs nothing.
twin-cpu *FLAGS: build
    {{memwall}} reference --device cpu {{FLAGS}}

# Where one CPU training step's time goes (needs perf; a profile, not a test): records one
# peak_memory cpu-profile job (`CONFIG`, default the f32 control) on flex under `perf record
# --call-graph dwarf` and prints CPU time by category (matmul, layout copies, elementwise math,
# memory, threads, autodiff bookkeeping), by phase, and the top operations.
profile-cpu CONFIG="control": build
    rm -rf target/profile-cpu
    {{memwall}} bundle experiments/peak_memory.toml --target flex --profile cpu --out target/profile-cpu --no-archive --runner target/release/memwall-job --only {{CONFIG}}
    python3 reference/perf_step_profile.py --job "$(ls -d target/profile-cpu/jobs/peak_memory/*/ | head -1)job.json" --json target/profile-cpu/profile.json

# PyTorch's side of `profile-cpu` (needs PyTorch): the twin of the same configuration, shape,
# precision and optimizer under torch.profiler, self time per ATen operation and category.
profile-cpu-torch CONFIG="control": build
    rm -rf target/profile-cpu-torch
    {{memwall}} bundle experiments/peak_memory.toml --target flex --profile cpu --out target/profile-cpu-torch --no-archive --runner target/release/memwall-job --only {{CONFIG}}
    python3 reference/torch_step_profile.py --plan target/profile-cpu-torch/reference/peak_memory.plan.json --config {{CONFIG}} --json target/profile-cpu-torch/profile.json
