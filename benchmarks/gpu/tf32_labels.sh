#!/usr/bin/env bash
# The measured saving of TF32 on the fp32 sample training scripts, without any profiler: each script
# run as it is and with TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 (cuBLAS GEMMs in TF32), alternating, each
# printing its own mean step time. Backs the lower_precision labels of benchmarks/validate_suggestions.py.
#   OUT=DIR bash benchmarks/gpu/tf32_labels.sh            (from the repository root, on a GPU machine)
# Writes DIR/tf32_labels.txt: one line per run, "NAME fp32|tf32 <the script's last line>".
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
S=sample_traces/scripts
RUNS=(
  "train_sync|$S/train_sync.py --steps 16"
  "train_sync_fixed|$S/train_sync.py --steps 16 --fixed"
  "train_copies|$S/train_copies.py --steps 16"
  "train_copies_fixed|$S/train_copies.py --steps 16 --fixed"
  "train_dataloader_fixed|$S/train_dataloader.py --steps 16 --fixed"
  "train_tokenize|$S/train_tokenize.py --hidden 1024 --steps 16"
  "train_tokenize_fixed|$S/train_tokenize.py --hidden 1024 --steps 16 --fixed"
  "train_tokenize_wide|$S/train_tokenize.py --steps 16"
  "train_tokenize_wide_fixed|$S/train_tokenize.py --steps 16 --fixed"
)
for rep in 1; do
  for row in "${RUNS[@]}"; do
    IFS='|' read -r name cmd <<<"$row"
    # shellcheck disable=SC2086
    a=$(timeout 60 python3 $cmd 2>&1 | tail -1)
    # shellcheck disable=SC2086
    b=$(TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 timeout 60 python3 $cmd 2>&1 | tail -1)
    echo "$name fp32 $a" >>"$OUT/tf32_labels.txt"
    echo "$name tf32 $b" >>"$OUT/tf32_labels.txt"
  done
done
