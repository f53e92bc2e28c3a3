#!/usr/bin/env bash
# `tracekit profile --try` on the sample training script, on a GPU machine, in under 240 s.
#   bash benchmarks/gpu/try_knobs.sh OUTDIR
# Run from the repository root with tracekit (and msgspec) importable (PYTHONPATH). Writes into OUTDIR:
#   env.txt                         GPU, driver, Python, torch, triton versions
#   loader.txt / loader.try.json    the table (text / JSON, schema tracekit.try/1) of run A:
#                                   train_try.py as written (DataLoader-starved), every knob
#   loader*.trace.json.gz, *.log    the trace and log of every run of A (baseline, each knob)
#   gpu.txt / gpu.try.json ...      run B, when time is left: train_try.py --work 0 (GPU-bound) with
#                                   tf32,bf16
#   summary.txt                     what ran, exit codes, seconds
# `tracekit diff` of the baseline vs each knob is left to the machine that reads OUTDIR (the traces
# are all there). Every command has a time limit, so the whole script ends within BUDGET (default 235) seconds.
set -u
OUT=${1:?usage: bash benchmarks/gpu/try_knobs.sh OUTDIR}
BUDGET=${BUDGET:-235}
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
START=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
log() { echo "$*" | tee -a "$OUT/summary.txt"; }

{
    date -u +%Y-%m-%dT%H:%M:%SZ
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
    nproc
    "$PY" -c 'import platform, torch, triton; print("python", platform.python_version()); print("torch", torch.__version__, "cuda", torch.version.cuda); print("triton", triton.__version__)' 2>&1
    "$PY" -c 'import tracekit; print("tracekit", tracekit.__version__, tracekit.__file__)' 2>&1
} >"$OUT/env.txt"

SCRIPT=sample_traces/scripts/train_try.py
# try NAME KNOBS SECONDS [SCRIPT ARGS...]: one --try table, limited to SECONDS
try_run() {
    local name=$1 knobs=$2 secs=$3; shift 3
    local t0=$(date +%s)
    timeout --signal=INT --kill-after=5 "$secs" "$PY" -m tracekit profile --try "$knobs" --timeout 75 \
        --force -o "$OUT/$name.trace.json.gz" "$SCRIPT" "$@" >"$OUT/$name.txt" 2>"$OUT/$name.stderr"
    log "$name rc=$? $(( $(date +%s) - t0 ))s (left $(left)s)"
}

try_run loader tf32,compile,dataloader,bf16,cudnn_benchmark,cudagraphs $(( $(left) - 10 ))
if (( $(left) > 50 )); then
    try_run gpu tf32,bf16 $(( $(left) - 8 )) --work 0
else
    log "gpu SKIPPED (left $(left)s)"
fi
log "done in $(( $(date +%s) - START ))s"
