#!/usr/bin/env bash
# Record the 2-rank DDP sample traces (balanced, and rank 1 slowed) and run the many-rank benchmark.
#   bash benchmarks/gpu/ddp_traces.sh OUTDIR     (PYTHON=..., NPROC=2, SKIP_BENCH=1 to skip the benchmark)
# Run from the repository root on a machine with 2 GPUs (NCCL). Writes into OUTDIR:
#   ddp_balanced/rank{0,1}.trace.json.gz, ddp_slow_rank1/rank{0,1}.trace.json.gz, their
#   `tracekit analyze --json` outputs, bench_ranks.txt, env.txt, logs/*.log, and DONE at the end.
# Budget: the two recordings < 90 s, the benchmark < 120 s.
set -u
OUT=${1:?usage: ddp_traces.sh OUTDIR}
mkdir -p "$OUT/logs"
export PYTHONUNBUFFERED=1
# NVLink SHARP / multicast off, for this shell and every child (torchrun workers inherit it)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if ls .whl/*.whl >/dev/null 2>&1; then  # msgspec and friends carried as wheels, if any
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >"$OUT/logs/pip.log" 2>&1
    export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD
fi
PY=${PYTHON:-python3}
NPROC=${NPROC:-2}
{
    date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1; nproc
    $PY -c "import sys, torch; print(sys.version); print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())"
    $PY -c "import tracekit; print('tracekit', tracekit.__version__, tracekit.__file__)"
} >"$OUT/env.txt" 2>&1

record() {  # record NAME SCRIPT-ARGS...
    local name=$1; shift
    mkdir -p "$OUT/$name"
    local t0=$SECONDS
    timeout --signal=INT --kill-after=10 60 \
        $PY -m torch.distributed.run --standalone --nproc-per-node "$NPROC" \
        -m tracekit profile --warmup 3 --no-report --force -o "$OUT/$name/rank{rank}.trace.json.gz" \
        sample_traces/scripts/ddp_train.py --steps 15 "$@" >"$OUT/logs/$name.log" 2>&1
    local rc=$?
    echo "$name rc=$rc $(( SECONDS - t0 )) s" | tee -a "$OUT/logs/summary.txt"
    ls -la "$OUT/$name" >>"$OUT/logs/summary.txt" 2>&1
    $PY -m tracekit analyze --json "$OUT/$name" >"$OUT/$name.analyze.json" 2>"$OUT/logs/$name.analyze.err"
    $PY -m tracekit analyze "$OUT/$name" >"$OUT/$name.analyze.txt" 2>>"$OUT/logs/$name.analyze.err"
}
record ddp_balanced
record ddp_slow_rank1 --slow-rank 1 --slow-ms 20

# many ranks: N copies of a real trace analysed with --jobs = cores (SKIP_BENCH=1 skips it)
if [ -z "${SKIP_BENCH:-}" ]; then
t0=$(date +%s)
timeout --signal=INT --kill-after=10 150 $PY benchmarks/bench_ranks.py --ranks 1 4 16 64 \
    --jobs "$(nproc)" --workdir /tmp/bench_ranks >"$OUT/bench_ranks.txt" 2>"$OUT/logs/bench_ranks.err"
echo "bench_ranks rc=$? $(( $(date +%s) - t0 )) s" | tee -a "$OUT/logs/summary.txt"
fi
date -u >"$OUT/DONE"
