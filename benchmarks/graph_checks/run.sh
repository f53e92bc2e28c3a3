#!/usr/bin/env bash
# One device call: each workload's baseline, its measured fix and the whole step in one CUDA graph,
# plain runs (no profiler), alternating, REPS rounds; prints each run's last line.
#   bash benchmarks/graph_checks/run.sh [STEPS] [REPS] [WORKLOAD ...]   (default: the first three)
set -u
STEPS=${1:-30}; REPS=${2:-2}; shift 2 2>/dev/null || shift $#
WORKLOADS=("$@"); [ ${#WORKLOADS[@]} -eq 0 ] && WORKLOADS=(l2_penalty sgd_groups manual_adam)
export PYTHONUNBUFFERED=1
unset CUDA_LAUNCH_BLOCKING TRITON_INTERPRET
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
declare -A BASE=([l2_penalty]="benchmarks/heldout8/l2_penalty.py" [sgd_groups]="benchmarks/heldout2/sgd_groups.py"
                 [manual_adam]="benchmarks/heldout3/manual_adam.py" [compile_helpers]="benchmarks/heldout8/compile_helpers.py")
declare -A FIX=([l2_penalty]="adam_wd" [sgd_groups]="two_groups" [manual_adam]="foreach" [compile_helpers]="compile_model")
for rep in $(seq "$REPS"); do
  for w in "${WORKLOADS[@]}"; do
    for row in "${BASE[$w]}" "${BASE[$w]} --variant ${FIX[$w]}" "benchmarks/graph_checks/whole_step_graph.py $w"; do
      # shellcheck disable=SC2086
      line=$(timeout 120 python3 $row --steps "$STEPS" 2>&1 | tail -1)
      echo "rep $rep | $row | $line"
    done
  done
done
