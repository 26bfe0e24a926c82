# run.sh's helpers: counting, a step's expected seconds, and `bounded`.
# count NAME: files NAME in the job folders (jobs/<study>/<key>/NAME).
count() { { find jobs -mindepth 3 -maxdepth 3 -name "$1" 2>/dev/null || true; } | wc -l; }

# expected_of STUDY/KEY PLANNED: a job's expected seconds, from jobs/queue.tsv where it lists
# the job (what the runner's deadline check reads), else the plan's.
expected_of() {
    local e
    e=$(awk -F'\t' -v k="$1" '$1 == k { print $2; exit }' jobs/queue.tsv 2>/dev/null || true)
    if [[ "$e" =~ ^[0-9]+([.][0-9]+)?$ ]]; then printf '%.0f\n' "$e"; else echo "$2"; fi
}

# run_until SECONDS COMMAND...: runs COMMAND (stdin from /dev/null) in a process group of its
# own and kills the whole group (the runner's job process, PyTorch's compile workers) once
# SECONDS have passed; returns COMMAND's status (137 when killed).
run_until() {
    local secs="$1"; shift
    local end=$(( $(date +%s) + secs ))
    setsid "$@" < /dev/null &
    local pid=$!
    (
        while kill -0 "$pid" 2>/dev/null; do
            if [ "$(date +%s)" -ge "$end" ]; then kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null; break; fi
            sleep 1
        done
    ) &
    local watcher=$! rc=0
    wait "$pid" || rc=$?
    kill "$watcher" 2>/dev/null || true
    wait "$watcher" 2>/dev/null || true
    return "$rc"
}

# due LABEL OUT EXPECTED_S: whether a step that writes OUT is to run now: not when OUT exists
# (it finished before) or EXPECTED_S do not fit before the deadline (saying which).
due() {
    local label="$1" out="$2" expected="$3"
    if [ -s "$out" ]; then echo "$label: finished before, skipped"; return 1; fi
    if [ "$(left)" -lt "$expected" ]; then
        echo "$label: expected $expected s, $(left) s left: left for the next run"; return 1
    fi
    if [ "$(left)" -le 0 ]; then echo "$label: no time left: left for the next run"; return 1; fi
}

# bounded LABEL OUT EXPECTED_S LOG KEEP_FAILED COMMAND...: runs `COMMAND --out OUT.partial` when
# OUT is missing and EXPECTED_S fit before the deadline, stopping it at the deadline. OUT appears
# only when the command ends, so a run stopped at the deadline leaves nothing and runs again next
# time; a failed run keeps what it wrote when KEEP_FAILED is 1 (a PyTorch row saying why).
bounded() {
    local label="$1" out="$2" expected="$3" log="$4" keep="$5"; shift 5
    due "$label" "$out" "$expected" || return 0
    echo "$label: running"
    rm -f "$out.partial"
    local t0; t0=$(date +%s)
    if run_until "$(left)" "$@" --out "$out.partial" > "$log" 2>&1; then
        if [ -s "$out.partial" ]; then
            mv "$out.partial" "$out"
            echo "$label: done in $(( $(date +%s) - t0 )) s"
        else
            rm -f "$out.partial"
            echo "$label: ended without writing its output ($log)"
        fi
    elif [ "$(left)" -le 0 ]; then
        rm -f "$out.partial"
        echo "$label: still running at the deadline: stopped, nothing kept"
    elif [ "$keep" = 1 ] && [ -s "$out.partial" ]; then
        mv "$out.partial" "$out"
        echo "$label: failed ($log)"
    else
        rm -f "$out.partial"
        echo "$label: did not finish ($log)"
    fi
}

# run.sh's packing: the three archives, each written beside and renamed into place.
# fits_return NAME: whether $RESULTS/NAME is within what a GPU session brings back per file.
fits_return() {
    local n; n=$(stat -c %s "$RESULTS/$1")
    if [ "$n" -gt "$RETURN_LIMIT" ]; then
        echo "warning: $1 is $n bytes, over the $RETURN_LIMIT a GPU session brings back per file"
        return 1
    fi
}

# pack_results: the manifest, the plan, every job folder with a record, the PyTorch rows and
# the attribution and chains files (no cache, no partial file), as results.tar.gz; when that
# would pass what a GPU session brings back per file, the job folders are split over
# results.tar.gz, results-2.tar.gz, ... (each with the manifest and the plan, so each imports
# alone; the other files in the first).
pack_results() {
    local base=(manifest.json "$PLAN") extra=() jobs=() d
    if [ -f jobs/queue.tsv ]; then base+=(jobs/queue.tsv); fi
    for d in jobs/*/*/; do
        if [ -f "$d/record.json" ]; then jobs+=("${d%/}"); fi
    done
    for d in reference/results attribution fusion_ir; do
        if [ -d "$d" ]; then extra+=("$d"); fi
    done
    rm -f "$RESULTS"/"${RESULTS_ARCHIVE%.tar.gz}"-[0-9]*.tar.gz
    write_archive "$RESULTS_ARCHIVE" "${base[@]}" "${extra[@]}" "${jobs[@]}"
    local n; n=$(stat -c %s "$RESULTS/$RESULTS_ARCHIVE")
    if [ "$n" -le "$RETURN_LIMIT" ]; then return 0; fi
    # Split: job folders in order, each part under 9/10 of the limit before compression.
    local cap=$(( RETURN_LIMIT * 9 / 10 )) part=1 size=0 group=() bytes name
    for d in "${jobs[@]}"; do
        bytes=$(du -sb "$d" | cut -f1)
        if [ "${#group[@]}" -gt 0 ] && [ $(( size + bytes )) -gt "$cap" ]; then
            write_part
            part=$(( part + 1 )); group=(); size=0
        fi
        group+=("$d"); size=$(( size + bytes ))
    done
    write_part
    echo "$RESULTS_ARCHIVE split into $part part(s) of at most $RETURN_LIMIT bytes: $(results_archives)"
    for name in $(results_archives); do fits_return "$name" || true; done
}

# write_part: part $part of pack_results (its variables: base, extra, group), the first with the
# PyTorch rows, attribution and chains files.
write_part() {
    if [ "$part" = 1 ]; then
        write_archive "$(part_name 1)" "${base[@]}" "${extra[@]}" "${group[@]}"
    else
        write_archive "$(part_name "$part")" "${base[@]}" "${group[@]}"
    fi
}

# part_name N: results.tar.gz for part 1, results-N.tar.gz after it.
part_name() {
    if [ "$1" = 1 ]; then echo "$RESULTS_ARCHIVE"; else echo "${RESULTS_ARCHIVE%.tar.gz}-$1.tar.gz"; fi
}

# results_archives: the results archives in $RESULTS, part 1 first.
results_archives() {
    local names=("$RESULTS_ARCHIVE") f
    for f in "$RESULTS"/"${RESULTS_ARCHIVE%.tar.gz}"-[0-9]*.tar.gz; do
        if [ -f "$f" ]; then names+=("$(basename "$f")"); fi
    done
    echo "${names[@]}"
}

# write_archive NAME FILES...: $RESULTS/NAME from FILES, written beside and renamed into place.
write_archive() {
    local name="$1"; shift
    tar czf "$RESULTS/$name.partial" --exclude='*.tmp-*' --exclude='*.partial' "$@"
    mv -f "$RESULTS/$name.partial" "$RESULTS/$name"
}

# pack_logs: the last 256 KiB of every log of the jobs (finished, failed or stopped), the
# PyTorch rows, the attribution benchmark and the chains.
pack_logs() {
    local tmp=".logs-pack" f
    rm -rf "$tmp"; mkdir -p "$tmp"
    while IFS= read -r -d '' f; do
        mkdir -p "$tmp/$(dirname "$f")"
        tail -c 262144 "$f" > "$tmp/$f"
    done < <(find jobs reference/results attribution fusion_ir -name '*.log' -print0 2>/dev/null || true)
    tar czf "$RESULTS/$LOGS_ARCHIVE.partial" -C "$tmp" .
    mv -f "$RESULTS/$LOGS_ARCHIVE.partial" "$RESULTS/$LOGS_ARCHIVE"
    rm -rf "$tmp"
    fits_return "$LOGS_ARCHIVE" || true
}

# pack_cache: the CubeCL cache files this run added or changed (autotune results; compiled
# kernels too with MEMWALL_PACK_KERNELS=1) and the manifest, so that `memwall import` takes it.
# What was carried in and left unchanged is not packed again.
pack_cache() {
    [ -d cache/cubecl ] || return 0
    local list=".cache-pack.list"
    if [ -n "${MEMWALL_PACK_KERNELS:-}" ]; then
        find cache/cubecl -type f -newer .run-start > "$list"
    else
        find cache/cubecl -type f -newer .run-start -path '*/autotune/*' > "$list"
    fi
    if [ -s "$list" ]; then
        tar czf "$RESULTS/$CACHE_ARCHIVE.partial" manifest.json -T "$list"
        mv -f "$RESULTS/$CACHE_ARCHIVE.partial" "$RESULTS/$CACHE_ARCHIVE"
        if ! fits_return "$CACHE_ARCHIVE"; then
            rm -f "$RESULTS/$CACHE_ARCHIVE"
            echo "$CACHE_ARCHIVE left out (the records come back without it)"
        fi
    fi
    rm -f "$list"
}

# pack_step: after every step (one stopped at the deadline too), the records, the logs and the
# autotune entries the step added, so that a command cut short loses none of its tunings.
pack_step() { pack_results; pack_logs; pack_cache; }

# A GPU bundle carries its runner gzip-compressed (bin/memwall-job.gz: about a third of the
# stripped binary, which with the working tree would pass the 64 MiB a GPU session carries):
# unpacked once, beside it, before the first job.
unpack_runner() {
    local gz=./bin/memwall-job.gz
    if [ ! -x ./bin/memwall-job ] && [ -f "$gz" ]; then
        gzip -dc "$gz" > ./bin/memwall-job.partial && chmod +x ./bin/memwall-job.partial \
            && mv ./bin/memwall-job.partial ./bin/memwall-job \
            || die "cannot unpack $gz (gzip -dc): $(gzip -t "$gz" 2>&1 | head -1)"
        echo "runner: unpacked bin/memwall-job ($(wc -c < ./bin/memwall-job) bytes) from $gz"
    fi
}

# run.sh's device checks (CUDA: the driver, a GPU, NVRTC and the toolkit's root).
# The device (not for a dry run): CUDA needs the driver, a GPU and NVRTC.
check_device() {
    unpack_runner
    [ -x "$RUNNER" ] || die "runner $RUNNER not found or not executable"
    echo "disk: $(df -h . | awk 'NR==2 {print $4}') free here; the records of a job take well under 1 MB"
    if [ "$TARGET" = cuda ]; then
        command -v nvidia-smi >/dev/null 2>&1 \
            || die "nvidia-smi not found: the NVIDIA driver is needed for CUDA jobs"
        nvidia-smi -L >/dev/null 2>&1 || die "nvidia-smi -L failed: no usable NVIDIA GPU ($(nvidia-smi -L 2>&1 | head -1))"
        echo "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)"
        local gpu; gpu="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
        if [ -n "$RESUME_GPU" ] && [ "$gpu" != "$RESUME_GPU" ]; then
            echo "warning: this bundle was written for the $RESUME_GPU and left out the rows stored for it ($(grep -c '^left' "$PLAN" || true) in $PLAN); this is a $gpu, where those rows are not measured (bundle with --gpu-model \"$gpu\" to measure them here)"
        fi
        # NVRTC compiles CubeCL's kernels at run time; it is loaded by name, so its folder must
        # be on the loader's path.
        local nvrtc="" d lib
        for d in ${NVRTC_DIR:-} ${CUDA_HOME:-} ${CUDA_HOME:+$CUDA_HOME/lib64} ${CUDA_PATH:+$CUDA_PATH/lib64} \
                 /usr/local/cuda/lib64 /usr/local/cuda-*/lib64 /usr/local/cuda/targets/*/lib \
                 /usr/lib/x86_64-linux-gnu /usr/lib64; do
            if ls "$d"/libnvrtc.so* >/dev/null 2>&1; then nvrtc="$d"; break; fi
        done
        if [ -z "$nvrtc" ]; then
            lib="$( (ldconfig -p 2>/dev/null || true) | awk '/libnvrtc/ {print $NF}' | head -1 || true)"
            if [ -n "$lib" ]; then nvrtc="$(dirname "$lib")"; fi
        fi
        [ -n "$nvrtc" ] || die "NVRTC (libnvrtc.so) not found: install the CUDA toolkit or set NVRTC_DIR to the folder holding libnvrtc.so"
        export LD_LIBRARY_PATH="$nvrtc${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        echo "NVRTC: $(ls "$nvrtc"/libnvrtc.so* | head -1)"
        # The toolkit's root (its include/ holds the headers NVRTC compiles bf16 kernels with).
        if [ -z "${CUDA_PATH:-}" ]; then
            for d in ${CUDA_HOME:-} /usr/local/cuda /usr/local/cuda-*; do
                if [ -d "$d/include" ]; then export CUDA_PATH="$d"; break; fi
            done
        fi
        echo "CUDA_PATH: ${CUDA_PATH:-not found (NVRTC uses its own include path)}"
    fi
    if [ -z "${MEMWALL_SKIP_TORCH:-}" ] && python3 -c "import torch" >/dev/null 2>&1; then
        TORCH=1
        echo "PyTorch: $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null)"
    elif [ -n "${MEMWALL_SKIP_TORCH:-}" ]; then
        echo "PyTorch twin left out (MEMWALL_SKIP_TORCH)"
    else
        echo "python3 cannot import torch here: the PyTorch twin column is left out"
    fi
}

# run.sh's steps: each runs one item of the plan (or, in a dry run, prints it and counts
# whether it fits).
TORCH=0
if [ "$TARGET" = cuda ]; then TORCH_DEVICE=cuda; else TORCH_DEVICE=cpu; fi
# Dry run: seconds of the budget not yet planned, and per tier what fits and what does not.
if [ -n "$DEADLINE" ]; then SIM_LEFT=$(( DEADLINE - START )); else SIM_LEFT=999999999; fi
SIM_FIT=0; SIM_MISS=0; SIM_STEPS_MISSED=(); TIER_S=0; TIER_MISSED=0; ALL_S=0

# plan_line LABEL EXPECTED_S DONE: one step of a dry run (DONE 1: it finished before); sets
# PLAN_FITS to 1 when the step would run.
PLAN_FITS=0
plan_line() {
    local label="$1" expected="$2" done="$3"
    PLAN_FITS=0
    if [ "$done" = 1 ]; then printf '  %-58s finished before\n' "$label"; return 0; fi
    TIER_S=$(( TIER_S + expected )); ALL_S=$(( ALL_S + expected ))
    if [ "$expected" -le "$SIM_LEFT" ]; then
        SIM_LEFT=$(( SIM_LEFT - expected )); SIM_FIT=$(( SIM_FIT + expected ))
        PLAN_FITS=1
        printf '  %-58s %5d s  fits\n' "$label" "$expected"
    else
        SIM_MISS=$(( SIM_MISS + expected )); TIER_MISSED=$(( TIER_MISSED + 1 ))
        SIM_STEPS_MISSED+=("$label")
        printf '  %-58s %5d s  does not fit (%d s of the budget left)\n' "$label" "$expected" "$SIM_LEFT"
    fi
}

# A GPU job's kernel kind pays CubeCL's cold start (JIT compilation and autotuning) once per
# session, in the first job of the kind that runs. The plan puts it on the first job of each
# kind (the plan line's COLD seconds); when that job does not run here (it finished before, or
# does not fit), the next job of the kind that runs is owed it instead: KIND_COLD holds each
# kind's cold start from the plan, KIND_WARM the kinds a job of which has run.
declare -A KIND_COLD=() KIND_WARM=()
if [ -f "$PLAN" ]; then
    while IFS=$'\t' read -r kind _ _ _ k c; do
        if [ "$kind" = job ] && [ -n "${k:-}" ] && [ "$k" != - ] && [[ "${c:-0}" =~ ^[0-9]+$ ]] && [ "${c:-0}" -gt 0 ]; then
            KIND_COLD["$k"]=$c
        fi
    done < "$PLAN"
fi

# job_expected REL PLANNED KIND COLD: a job's expected seconds in this session: its own
# (expected_of), less the cold start the plan put on it (COLD), plus its kind's cold start
# while no job of the kind has run.
job_expected() {
    local e; e=$(expected_of "$1" "$2")
    local kind="${3:--}" cold="${4:-0}"
    if [ "$kind" = - ]; then echo "$e"; return 0; fi
    local base=$(( e - cold ))
    [ "$base" -ge 0 ] || base=0
    if [ -z "${KIND_WARM[$kind]:-}" ]; then base=$(( base + ${KIND_COLD[$kind]:-0} )); fi
    echo "$base"
}

# set_queued REL SECONDS: the job's line of jobs/queue.tsv set to SECONDS, so that the runner's
# deadline check expects what this session owes.
set_queued() {
    [ -f jobs/queue.tsv ] || return 0
    awk -F'\t' -v OFS='\t' -v k="$1" -v s="$2" '$1 == k { $2 = s } { print }' jobs/queue.tsv > jobs/queue.tsv.new
    mv jobs/queue.tsv.new jobs/queue.tsv
}

step_job() {
    local rel="$1" config="$2" kind="${4:--}" expected
    expected=$(job_expected "$1" "$3" "$kind" "${5:-0}")
    if [ "$DRY" = 1 ]; then
        plan_line "memwall $config" "$expected" "$([ -f "jobs/$rel/record.json" ] && echo 1 || echo 0)"
        if [ "$PLAN_FITS" = 1 ] && [ "$kind" != - ]; then KIND_WARM["$kind"]=1; fi
        return 0
    fi
    if [ "$(left)" -le 0 ]; then echo "memwall $config: no time left: left for the next run"; return 0; fi
    if [ "$kind" != - ]; then set_queued "$rel" "$expected"; fi
    # The runner stops a job at the deadline itself; the process group is killed half the
    # packing time later should it not.
    local rc=0
    run_until $(( $(left) + PACK_S / 2 )) "$RUNNER" sweep-dir jobs --only "$rel" ${DEADLINE:+--until "$DEADLINE"} || rc=$?
    if [ "$rc" = 137 ]; then
        echo "memwall $config: still running after the deadline: stopped, no record (it runs again next time)"
    elif [ "$rc" != 0 ]; then
        echo "memwall $config: the runner exited with status $rc"
    fi
    # A job that ran (its record exists, whatever its status) compiled and tuned its kind.
    if [ "$kind" != - ] && [ -f "jobs/$rel/record.json" ]; then KIND_WARM["$kind"]=1; fi
    pack_step
}

step_torch() {
    local study="$1" config="$2" expected="$3" how="$4"
    local out="reference/results/$study.$config.json"
    if [ "$DRY" = 1 ]; then
        if [ -n "${MEMWALL_SKIP_TORCH:-}" ]; then return 0; fi
        plan_line "pytorch $config ($how)" "$expected" "$([ -s "$out" ] && echo 1 || echo 0)"
        return 0
    fi
    [ "$TORCH" = 1 ] || return 0
    mkdir -p reference/results
    local log="reference/results/$study.$config.log"
    if [ "$TORCH_SHARED" = 1 ]; then
        served "pytorch $config ($how)" "$out" "$expected" "$log" "reference/$study.plan.json" "$config"
    else
        bounded "pytorch $config ($how)" "$out" "$expected" "$log" 1 \
            python3 reference/torch_peak_memory.py --plan "reference/$study.plan.json" \
            --config "$config" --device "$TORCH_DEVICE"
    fi
    pack_step
}

# The twins' Python process. On CUDA the twins of a run share one (`torch_peak_memory.py
# --serve`): Python, `import torch` and the CUDA context once instead of once per twin; each row
# still covers its own configuration (the script resets the allocator's statistics, the
# compiler's caches and the memory budget between them). On the CPU each twin has a process of
# its own, since its peak is that process's resident high-water mark. MEMWALL_TORCH_PROCESS=each
# or =shared overrides.
case "${MEMWALL_TORCH_PROCESS:-}" in
    shared) TORCH_SHARED=1;;
    each) TORCH_SHARED=0;;
    '') if [ "$TARGET" = cuda ]; then TORCH_SHARED=1; else TORCH_SHARED=0; fi;;
    *) die "MEMWALL_TORCH_PROCESS is \`$MEMWALL_TORCH_PROCESS\`: \`shared\` or \`each\`";;
esac
TORCH_PID=""; TORCH_IN=""; TORCH_OUT=""; TORCH_SERVED=0

# torch_stop: ends the shared process (its process group: PyTorch's compile workers too).
torch_stop() {
    [ -n "$TORCH_PID" ] || return 0
    kill -KILL -- "-$TORCH_PID" 2>/dev/null || kill -KILL "$TORCH_PID" 2>/dev/null || true
    wait "$TORCH_PID" 2>/dev/null || true
    exec {TORCH_IN}>&- {TORCH_OUT}<&-
    TORCH_PID=""; TORCH_IN=""; TORCH_OUT=""
}

# torch_start: the shared process, started when none is alive, in a process group of its own;
# its requests and answers go through TORCH_IN and TORCH_OUT (copies of the coprocess's pipes,
# which outlive it and reach subshells).
torch_start() {
    if [ -n "$TORCH_PID" ] && kill -0 "$TORCH_PID" 2>/dev/null; then return 0; fi
    torch_stop
    coproc TORCH_COPROC { exec setsid python3 -u reference/torch_peak_memory.py --serve \
        --device "$TORCH_DEVICE" 2>> reference/results/torch-process.log; }
    TORCH_PID=$TORCH_COPROC_PID
    exec {TORCH_IN}>&"${TORCH_COPROC[1]}" {TORCH_OUT}<&"${TORCH_COPROC[0]}"
    TORCH_SERVED=0
    echo "PyTorch process $TORCH_PID started for the twins"
}
trap torch_stop EXIT

# served LABEL OUT EXPECTED_S LOG PLAN CONFIG: `bounded` for a twin in the shared process: asks
# it for CONFIG of PLAN and waits for its answer until the deadline, when the process is stopped
# (the next twin starts another). The row it writes (ok, or a failure saying why) becomes OUT.
served() {
    local label="$1" out="$2" expected="$3" log="$4" plan="$5" config="$6"
    due "$label" "$out" "$expected" || return 0
    torch_start
    TORCH_SERVED=$(( TORCH_SERVED + 1 ))
    echo "$label: running (twin $TORCH_SERVED of PyTorch process $TORCH_PID)"
    rm -f "$out.partial"
    local t0 answer="" rc=0; t0=$(date +%s)
    if ! ( trap '' PIPE; printf '%s\t%s\t%s\t%s\n' "$plan" "$config" "$out.partial" "$log" >&"$TORCH_IN" ) 2>/dev/null; then
        torch_stop
        echo "$label: the PyTorch process had ended (reference/results/torch-process.log): left for the next run"
        return 0
    fi
    IFS= read -r -t "$(( $(left) > 0 ? $(left) : 1 ))" -u "$TORCH_OUT" answer || rc=$?
    if [ "$rc" -gt 128 ]; then
        torch_stop; rm -f "$out.partial"
        echo "$label: still running at the deadline: stopped, nothing kept"
    elif [ "$rc" != 0 ]; then
        torch_stop; rm -f "$out.partial"
        echo "$label: the PyTorch process ended during it (reference/results/torch-process.log, $log)"
    elif [ "${answer%%$'\t'*}" = done ] && [ -s "$out.partial" ]; then
        mv "$out.partial" "$out"
        echo "$label: done in $(( $(date +%s) - t0 )) s (${answer#*$'\t'})"
    else
        rm -f "$out.partial"
        echo "$label: did not finish: ${answer#*$'\t'} ($log)"
    fi
}

step_attribution() {
    local side="$1" job="$2" expected="$3" out log
    out="attribution/$side.jsonl"; log="attribution/$side.log"
    if [ "$DRY" = 1 ]; then
        if [ "$side" = pytorch ] && [ -n "${MEMWALL_SKIP_TORCH:-}" ]; then return 0; fi
        plan_line "attribution benchmark ($side)" "$expected" "$([ -s "$out" ] && echo 1 || echo 0)"
        return 0
    fi
    mkdir -p attribution
    if [ "$side" = burn ]; then
        bounded "attribution burn" "$out" "$expected" "$log" 0 "$RUNNER" bench --job "$job"
    elif [ "$TORCH" = 1 ] && [ -f reference/torch_attribution.py ]; then
        bounded "attribution pytorch" "$out" "$expected" "$log" 0 \
            python3 reference/torch_attribution.py --job "$job" --device "$TORCH_DEVICE"
    fi
    pack_step
}

step_chains() {
    local expected="$1" out="fusion_ir/chains.json"
    if [ "$DRY" = 1 ]; then
        plan_line "fusion_ir chains" "$expected" "$([ -s "$out" ] && echo 1 || echo 0)"
        return 0
    fi
    mkdir -p fusion_ir
    local backend=flex; if [ "$TARGET" = cuda ]; then backend=cuda; fi
    bounded "fusion chains" "$out" "$expected" fusion_ir/chains.log 0 \
        "$RUNNER" fusion-chains --backend "$backend"
    pack_step
}

TIER=""; TIER_TITLE=""
begin_tier() {
    TIER="$1"; TIER_TITLE="$2"; TIER_S=0; TIER_MISSED=0
    echo "== tier $TIER: $TIER_TITLE"
}
end_tier() {
    [ -n "$TIER" ] || return 0
    if [ "$DRY" = 1 ]; then
        if [ "$TIER_MISSED" = 0 ]; then
            printf '   tier %s: %.1f min expected; all of it fits\n' "$TIER" "$(awk -v s="$TIER_S" 'BEGIN { print s / 60 }')"
        else
            printf '   tier %s: %.1f min expected; %d step(s) do not fit\n' "$TIER" "$(awk -v s="$TIER_S" 'BEGIN { print s / 60 }')" "$TIER_MISSED"
        fi
    else
        echo "tier $TIER packed: $(count record.json) record(s), $( (ls reference/results/*.json 2>/dev/null || true) | wc -l) PyTorch row(s) in $RESULTS/$RESULTS_ARCHIVE"
    fi
}

# run.sh's main part: the device checks, the plan's steps in order, the summary.
[ -f "$PLAN" ] || die "$PLAN not found beside run.sh: rebuild the bundle with this memwall"
LEFT=$(grep -c '^left' "$PLAN" || true)
if [ "$DRY" = 1 ]; then
    if [ "$LEFT" -gt 0 ]; then
        echo "left out, stored already${RESUME_GPU:+ for the $RESUME_GPU} ($LEFT):"
        awk -F'\t' '$1 == "left" { printf "  %s %s: %s\n", $2, $3, $4 }' "$PLAN"
    fi
    echo "plan of $(count job.json) job(s)${MINUTES:+ against $MINUTES minutes ($PACK_S s kept for packing)}:"
else
    if [ "$LEFT" -gt 0 ]; then echo "$LEFT row(s) left out, stored already${RESUME_GPU:+ for the $RESUME_GPU} (--dry-run lists them)"; fi
    check_device
    touch .run-start
    BEFORE=$(count record.json)
    pack_step
fi
while IFS=$'\t' read -r -u 3 kind a b c d e; do
    case "$kind" in
        ''|'#'*|left) continue;;
        tier) end_tier; begin_tier "$a" "$b";;
        job) step_job "$a" "$b" "$c" "$d" "$e";;
        torch) step_torch "$a" "$b" "$c" "$d";;
        attr-burn) step_attribution burn "$a" "$b";;
        attr-torch) step_attribution pytorch "$a" "$b";;
        chains) step_chains "$a";;
        *) die "$PLAN: unknown step \`$kind\`";;
    esac
done 3< "$PLAN"
end_tier
torch_stop

if [ "$DRY" = 1 ]; then
    fit=$(awk -v s="$SIM_FIT" 'BEGIN { printf "%.1f", s / 60 }')
    all=$(awk -v s="$ALL_S" 'BEGIN { printf "%.1f", s / 60 }')
    if [ "${#SIM_STEPS_MISSED[@]}" = 0 ]; then
        echo "in all: $all min expected; everything fits${MINUTES:+ in $MINUTES minutes}"
    else
        n=${#SIM_STEPS_MISSED[@]}
        first=$(printf '%s, ' "${SIM_STEPS_MISSED[@]:0:5}")
        echo "in all: $all min expected; $fit min fit in $MINUTES minutes; $n step(s) do not fit: ${first%, }$([ "$n" -gt 5 ] && echo ", ...")"
    fi
    exit 0
fi

AFTER=$(count record.json); TOTAL=$(count job.json)
echo "jobs: $(( AFTER - BEFORE )) finished in this run, $BEFORE finished before; $AFTER of $TOTAL job(s) have a record after $(( $(date +%s) - START )) s"
echo "packed $AFTER record(s) and $( (ls reference/results/*.json 2>/dev/null || true) | wc -l) PyTorch row(s) into $RESULTS: $(results_archives)"
if [ "$AFTER" -lt "$TOTAL" ]; then
    echo "run ./run.sh${MINUTES:+ --minutes N} again to go on with the other $(( TOTAL - AFTER ))"
fi
archives="$(results_archives)"
if [ -f "$RESULTS/$CACHE_ARCHIVE" ]; then archives="$archives $CACHE_ARCHIVE"; fi
echo "next, in the repository: memwall import $archives"
