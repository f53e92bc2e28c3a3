#!/usr/bin/env bash
# `tracekit profile --try` on the sample training script, on a GPU machine, in under BUDGET seconds
# (default 145), with a small OUTDIR (text and JSON, two small traces: well under 16 MiB).
#   bash benchmarks/gpu/try_knobs.sh OUTDIR
# Run from the repository root with tracekit (and msgspec) importable (PYTHONPATH).
#   KNOBS   knobs to try (default tf32,dataloader,compile: the slowest, compile, last)
#   ARGS    arguments of train_try.py (default --work 0: the GPU-bound variant, where TF32 and
#           torch.compile can show; ARGS="" runs the DataLoader-starved variant)
# Writes into OUTDIR:
#   env.txt                   GPU, driver, Python, torch, triton versions
#   try.txt / try.try.json    the --try table (text / JSON, schema tracekit.try/1); try.stderr
#   try*.log                  each run's output (the script's, the profiler's), tails only
#   diff-KNOB.txt / .json     `tracekit diff` of the baseline vs each knob (while time is left)
#   try.trace.json.gz, try.try-tf32.trace.json.gz   two traces, when each is under 4 MiB
#   summary.txt               what ran, exit codes, seconds, sizes
# The other traces stay in a scratch folder (printed in summary.txt) and are not copied.
set -u
OUT=${1:?usage: bash benchmarks/gpu/try_knobs.sh OUTDIR}
BUDGET=${BUDGET:-145}
PY=${PYTHON:-python3}
KNOBS=${KNOBS:-tf32,dataloader,compile}
ARGS=${ARGS---work 0}
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tracekit_try.XXXXXX")
START=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
log() { echo "$*" | tee -a "$OUT/summary.txt"; }

{
    date -u +%Y-%m-%dT%H:%M:%SZ
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
    nproc
    "$PY" -c 'import platform, torch, triton; print("python", platform.python_version()); print("torch", torch.__version__, "cuda", torch.version.cuda); print("triton", triton.__version__)' 2>&1
} >"$OUT/env.txt"

log "scratch $WORK; knobs $KNOBS; script args: $ARGS"
t0=$(date +%s)
# shellcheck disable=SC2086  # ARGS is a list of words
timeout --signal=INT --kill-after=5 $(( $(left) - 12 )) "$PY" -m tracekit profile --try "$KNOBS" \
    --timeout 60 --force -o "$WORK/try.trace.json.gz" sample_traces/scripts/train_try.py $ARGS \
    >"$OUT/try.txt" 2>"$OUT/try.stderr"
log "try rc=$? $(( $(date +%s) - t0 ))s (left $(left)s)"
cp "$WORK/try.try.json" "$OUT/" 2>/dev/null
for f in "$WORK"/*.log; do [ -e "$f" ] && tail -c 20000 "$f" >"$OUT/$(basename "$f")"; done
for trace in "$WORK"/try.try-*.trace.json.gz; do
    [ -e "$trace" ] || continue
    knob=${trace##*.try-}; knob=${knob%.trace.json.gz}
    (( $(left) > 8 )) || { log "diff $knob SKIPPED (left $(left)s)"; continue; }
    timeout 15 "$PY" -m tracekit diff -q --json "$WORK/try.trace.json.gz" "$trace" >"$OUT/diff-$knob.json" 2>&1
    log "diff $knob --json rc=$? (left $(left)s)"
    (( $(left) > 8 )) || continue
    timeout 15 "$PY" -m tracekit diff -q "$WORK/try.trace.json.gz" "$trace" >"$OUT/diff-$knob.txt" 2>&1
done
for trace in "$WORK/try.trace.json.gz" "$WORK/try.try-tf32.trace.json.gz"; do
    [ -e "$trace" ] || continue
    size=$(stat -c %s "$trace")
    if (( size < 4194304 )); then cp "$trace" "$OUT/"; else log "$(basename "$trace") not copied: $size bytes"; fi
done
log "sizes: $(du -sh "$WORK" | cut -f1) scratch, $(du -sh "$OUT" | cut -f1) in OUTDIR"
log "done in $(( $(date +%s) - START ))s"
