#!/usr/bin/env bash
# Plain runs against tracekit's own unprofiled timing of the same script, in one device call: per row,
# `python3 NAME.py [--variant V] --steps 12` (the set's StepTimer: host wall clock, mean over steps
# 4..11), then the same command under `python -m tracekit.profile.trychild --mode time` (what
# `tracekit profile` stores as "bare": CUDA events at its step marks), printing the script's own
# StepTimer line from inside that run and tracekit's wall and GPU-event means over the same steps.
#   bash benchmarks/gpu/plain_vs_timed.sh N ROUNDS NAME[:VARIANT] ...   (N: the set's number)
# Run from the repo root with `.whl` carried; writes $OUT/plain_vs_timed.txt.
set -u
N=$1; ROUNDS=$2; shift 2
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
unset CUDA_LAUNCH_BLOCKING TRITON_INTERPRET
R=${OUT:-/tmp/out}; mkdir -p "$R"; F=$R/plain_vs_timed.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$F"
for round in $(seq "$ROUNDS"); do
    for row in "$@"; do
        name=${row%%:*}; variant=(); [[ $row == *:* ]] && variant=(--variant "${row#*:}")
        script="benchmarks/heldout$N/$name.py"
        plain=$(timeout 200 python3 "$script" "${variant[@]}" --steps 12 2>&1 | grep "mean step time" | tail -1)
        timeout 200 python3 -m tracekit.profile.trychild --mode time --result /tmp/bvp.json --script "$script" \
            -- "${variant[@]}" --steps 12 >/tmp/bvp.log 2>&1
        own=$(grep "mean step time" /tmp/bvp.log | tail -1)
        clocks=$(python3 - <<'PY'
import json
d = json.load(open("/tmp/bvp.json"))
out = []
for clock in ("wall_us", "gpu_us"):
    b = d.get(clock) or d.get("clock", {}).get(clock) or []
    if len(b) >= 13:
        steps = [b[k + 1] - b[k] for k in range(4, 12)]
        out.append(f"{clock[:-3]} {sum(steps) / len(steps) / 1000:.3f} ms (steps 4..11: "
                   + " ".join(f"{s / 1000:.1f}" for s in steps) + ")")
    else:
        out.append(f"{clock[:-3]}: {len(b)} boundaries")
print(" | ".join(out))
PY
)
        echo "round $round $row | plain: ${plain##*: } | in tracekit's timed run, the script: ${own##*: } | tracekit: $clocks" | tee -a "$F"
    done
done
