#!/usr/bin/env bash
# Plain (unprofiled) timings of held-out rows in one device call, each run twice, alternating:
#   bash benchmarks/gpu/plain_rows.sh N DEADLINE_S NAME[:VARIANT] ...   (N: the set's number)
# Each run is `python3 benchmarks/heldoutN/NAME.py [--variant V] --steps 12` (mean over steps 4..11,
# the sets' StepTimer); rows start only while DEADLINE_S seconds have not passed. Prints one line per
# run and writes them to $OUT/plain_rows.txt.
set -u
N=$1; DEADLINE=$2; shift 2
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
unset CUDA_LAUNCH_BLOCKING TRITON_INTERPRET
R=${OUT:-/tmp/out}; mkdir -p "$R"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/plain_rows.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$R/plain_rows.txt"
start=$SECONDS
for round in 1 2; do
    for row in "$@"; do
        (( SECONDS - start > DEADLINE )) && { echo "deadline: $row round $round not run" | tee -a "$R/plain_rows.txt"; continue; }
        name=${row%%:*}; variant=""; [[ $row == *:* ]] && variant="--variant ${row#*:}"
        line=$(cd "benchmarks/heldout$N" && timeout 200 python3 "$name.py" $variant --steps 12 2>&1 | tail -1)
        echo "round $round $row | $line" | tee -a "$R/plain_rows.txt"
    done
done
