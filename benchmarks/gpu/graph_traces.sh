#!/usr/bin/env bash
# Record the CUDA-graph decode traces (sample_traces/scripts/graph_decode.py) into OUTDIR, with a log.
#   bash benchmarks/gpu/graph_traces.sh OUTDIR
# Run from the repository root on the GPU machine (python3 with torch; PYTHONPATH so that tracekit
# and msgspec import). Writes, in under two minutes on an H200:
#   OUTDIR/graph_decode_inline_b1.trace.json.gz, ..._b8   capture inside the recording (tracekit profile)
#   OUTDIR/graph_decode_piecewise_b8.trace.json.gz       per-layer MLP graphs between eager attention
#   OUTDIR/graph_decode_split/exec.trace.json.gz          replays of the batch-1 and batch-8 graphs
#   OUTDIR/graph_decode_split/capture_traces/capture_b{1,8}.trace.json.gz   one capture session each
#   OUTDIR/graph_decode_mismatch/capture_traces/capture_b1.trace.json.gz    a hidden-512 model's capture
#                                (beside a copy of the split exec trace: must not be joined to it)
#   OUTDIR/graph_decode_shapes.json                       the GEMM shapes of one decode step per batch
#   OUTDIR/graph_traces.log                               versions, device, every command and its output
set -u
OUT=${1:?usage: graph_traces.sh OUTDIR}
mkdir -p "$OUT"
LOG="$OUT/graph_traces.log"
SCRIPT=sample_traces/scripts/graph_decode.py
START=$(date +%s)
export PYTHONUNBUFFERED=1
: >"$LOG"
run() {  # run CMD (LIMIT seconds at most, default 60), log it with its status and time
    local t0=$(date +%s)
    echo "\$ $*" >>"$LOG"
    timeout --signal=INT --kill-after=5 "${LIMIT:-60}" "$@" >>"$LOG" 2>&1
    echo "rc=$? $(( $(date +%s) - t0 ))s (at $(( $(date +%s) - START ))s)" | tee -a "$LOG"
}
{
    date -u +%Y-%m-%dT%H:%M:%SZ
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
    python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda); import triton; print("triton", triton.__version__)' 2>&1
    python3 -c 'import tracekit; print("tracekit", tracekit.__file__)' 2>&1
} >>"$LOG"
for B in 1 8; do
    run python3 -m tracekit profile --warmup 0 --no-report --force \
        -o "$OUT/graph_decode_inline_b$B.trace.json.gz" "$SCRIPT" inline --batch "$B"
done
run python3 -m tracekit profile --warmup 0 --no-report --force \
    -o "$OUT/graph_decode_piecewise_b8.trace.json.gz" "$SCRIPT" piecewise --batch 8
run python3 "$SCRIPT" split --batch 1 8 --out "$OUT/graph_decode_split" \
    --shapes "$OUT/graph_decode_shapes.json"
run python3 "$SCRIPT" split --batch 1 --hidden 512 --out "$OUT/graph_decode_mismatch"
# the mismatch case: the batch-1/8 execution trace beside the hidden-512 model's capture only
cp "$OUT/graph_decode_split/exec.trace.json.gz" "$OUT/graph_decode_mismatch/" 2>>"$LOG"
# what tracekit makes of them (best effort: the traces above are the deliverable)
if [ -f benchmarks/bench_graphs.py ]; then
    LIMIT=30 run python3 benchmarks/bench_graphs.py "$OUT"
fi
ls -la "$OUT" "$OUT"/graph_decode_split "$OUT"/graph_decode_split/capture_traces >>"$LOG" 2>&1
echo "done in $(( $(date +%s) - START ))s" | tee -a "$LOG"
