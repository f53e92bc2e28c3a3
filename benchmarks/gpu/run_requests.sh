#!/usr/bin/env bash
# One device call over request files (rows `OUTNAME|warmup|active|SCRIPT ARGS` recorded with
# `tracekit profile`, which also stores the unprofiled steps; `RAW|SCRIPT ARGS` run as `python3 SCRIPT
# ARGS` with $OUT set to a folder of its own). GPU machine, repository root, .whl carried:
#   BUDGET=SECONDS OUT=DIR bash benchmarks/gpu/run_requests.sh REQUEST.txt...
# Results: DIR/NAME/ (NAME: the request file's name), DIR/NAME/summary.txt, logs beside the traces.
set -u
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
OUT=${OUT:-/tmp/o}
START=$(date +%s)
BUDGET=${BUDGET:-560}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >"$OUT/pip.log" 2>&1
export PYTHONPATH=/tmp/site:$PWD
for file in "$@"; do
  name=$(basename "$file" .txt)
  dir="$OUT/$name"; mkdir -p "$dir"
  k=0
  while IFS= read -r row || [[ -n "$row" ]]; do
    [[ -z "$row" || "$row" == \#* ]] && continue
    left=$(( BUDGET - ($(date +%s) - START) ))
    if (( left < 20 )); then echo "SKIPPED (budget): $row" | tee -a "$dir/summary.txt"; continue; fi
    t0=$(date +%s); k=$((k + 1))
    IFS='|' read -r first warm active cmd <<<"$row"
    if [[ "$first" == RAW ]]; then
      mkdir -p "$dir/raw$k"
      # shellcheck disable=SC2086
      OUT="$dir/raw$k" timeout --signal=INT --kill-after=10 "$left" python3 $warm >"$dir/raw$k.log" 2>&1
      echo "raw$k rc=$? $(( $(date +%s) - t0 ))s: $warm" | tee -a "$dir/summary.txt"
    else
      # shellcheck disable=SC2086
      timeout --signal=INT --kill-after=10 "$left" python3 -m tracekit profile --warmup "$warm" --active "$active" \
          --no-report --force -o "$dir/$first.trace.json.gz" $cmd >"$dir/$first.log" 2>&1
      echo "$first rc=$? $(( $(date +%s) - t0 ))s: $(grep -h 'mean step\|per token' "$dir/$first.log" | tail -1)" \
          | tee -a "$dir/summary.txt"
    fi
  done <"$file"
done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$OUT/versions.txt" 2>&1
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >>"$OUT/versions.txt" 2>&1
date -u +%Y-%m-%dT%H:%M:%SZ >>"$OUT/versions.txt"
