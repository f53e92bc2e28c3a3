#!/usr/bin/env bash
# Plain (unprofiled) timings of held-out baselines with and without the change tracekit suggested
# first, where that change is not the labelled variant's (benchmarks/gpu/with_knob.py makes it):
#   bash benchmarks/gpu/first_advice.sh DEADLINE_S "SET NAME[:VARIANT] [KNOB]" ...
# Each row: `python3 NAME.py [--variant V] --steps 12` (the sets' StepTimer: mean over steps 4..11),
# through with_knob.py when KNOB is given; rows start only while DEADLINE_S seconds have not passed.
# Prints one line per row and writes them to $OUT/first_advice.txt.
set -u
DEADLINE=$1; shift
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
unset CUDA_LAUNCH_BLOCKING TRITON_INTERPRET
R=${OUT:-/tmp/out}; mkdir -p "$R"; F="$R/first_advice.txt"
KNOB_PY=$PWD/benchmarks/gpu/with_knob.py
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$F"
start=$SECONDS
for row in "$@"; do
    read -r set spec knob <<<"$row"
    (( SECONDS - start > DEADLINE )) && { echo "deadline: $row not run" | tee -a "$F"; continue; }
    name=${spec%%:*}; variant=""; [[ $spec == *:* ]] && variant="--variant ${spec#*:}"
    t0=$SECONDS
    if [ -n "${knob:-}" ]; then
        line=$(cd "benchmarks/heldout$set" && timeout 240 python3 "$KNOB_PY" "$knob" "$name.py" $variant --steps 12 2>&1 | tail -1)
    else
        line=$(cd "benchmarks/heldout$set" && timeout 240 python3 "$name.py" $variant --steps 12 2>&1 | tail -1)
    fi
    echo "$set $spec ${knob:-plain} ($((SECONDS - t0)) s) | $line" | tee -a "$F"
done
