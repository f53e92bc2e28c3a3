#!/usr/bin/env bash
# Record the steady-state / bottleneck sample traces on the GPU machine, and time the same scripts
# without a profiler.   bash benchmarks/gpu/steady_traces.sh OUTDIR
# Run from the repository root with tracekit and msgspec importable (PYTHONPATH).
set -u
OUT=${1:?OUTDIR}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
S=sample_traces/scripts
run() {  # run NAME SECONDS CMD...
    local name=$1 secs=$2; shift 2
    local t0=$(date +%s)
    timeout --signal=INT --kill-after=10 "$secs" "$@" >"$OUT/$name.log" 2>&1
    echo "$name rc=$? $(( $(date +%s) - t0 ))s" | tee -a "$OUT/summary.txt"
}
python3 - >"$OUT/versions.txt" 2>&1 <<'PY'
import json, platform, torch, triton
p = torch.cuda.get_device_properties(0)
print(json.dumps({"python": platform.python_version(), "torch": torch.__version__, "triton": triton.__version__,
                  "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(), "sms": p.multi_processor_count}))
PY
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >>"$OUT/versions.txt" 2>&1
for item in train_dataloader: train_dataloader:--fixed train_sync: train_sync:--fixed \
            train_copies: train_copies:--fixed train_compile:; do
    s=${item%%:*}; flag=${item#*:}
    name=$s${flag:+_fixed}
    run "trace_$name" 150 python3 -m tracekit profile --no-report --force -o "$OUT/$name.trace.json.gz" "$S/$s.py" $flag
done
for item in train_dataloader: train_dataloader:--fixed train_sync: train_sync:--fixed \
            train_copies: train_copies:--fixed train_compile:; do
    s=${item%%:*}; flag=${item#*:}
    run "plain_$s${flag:+_fixed}" 150 python3 "$S/$s.py" $flag
done
# host-to-device copy bandwidth, pageable vs pinned (the pinned_memory rule's constant)
run h2d_bandwidth 60 python3 - <<'PY'
import torch
x = torch.randn(4096, 4096)
for pinned in (False, True):
    src = x.pin_memory() if pinned else x
    dst = torch.empty_like(x, device="cuda")
    for _ in range(3):
        dst.copy_(src, non_blocking=pinned)
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(10):
        dst.copy_(src, non_blocking=pinned)
    e1.record()
    torch.cuda.synchronize()
    ms = e0.elapsed_time(e1) / 10
    print(f"{'pinned' if pinned else 'pageable'}: {x.numel() * 4 / ms / 1e6:.1f} GB/s ({ms:.3f} ms per 64 MiB)")
PY
ls -la "$OUT" >>"$OUT/summary.txt"
