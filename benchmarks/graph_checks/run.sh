#!/usr/bin/env bash
# One device call: each workload's baseline, its measured fix and the whole step in one CUDA graph,
# plain runs (no profiler), alternating, REPS rounds; prints each run's last line.
#   bash benchmarks/graph_checks/run.sh [STEPS] [REPS]
set -u
STEPS=${1:-30}; REPS=${2:-2}
export PYTHONUNBUFFERED=1
unset CUDA_LAUNCH_BLOCKING TRITON_INTERPRET
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
rows=(
  "benchmarks/heldout8/l2_penalty.py"
  "benchmarks/heldout8/l2_penalty.py --variant adam_wd"
  "benchmarks/graph_checks/whole_step_graph.py l2_penalty"
  "benchmarks/heldout2/sgd_groups.py"
  "benchmarks/heldout2/sgd_groups.py --variant two_groups"
  "benchmarks/graph_checks/whole_step_graph.py sgd_groups"
  "benchmarks/heldout3/manual_adam.py"
  "benchmarks/heldout3/manual_adam.py --variant foreach"
  "benchmarks/graph_checks/whole_step_graph.py manual_adam"
)
for rep in $(seq "$REPS"); do
  for row in "${rows[@]}"; do
    # shellcheck disable=SC2086
    line=$(timeout 60 python3 $row --steps "$STEPS" 2>&1 | tail -1)
    echo "rep $rep | $row | $line"
  done
done
