#!/usr/bin/env bash
# One device call: record the before/after pairs of sample_traces/bare/ with `tracekit profile`, which
# also times the steps without the profiler (the trace's `tracekit.bare`), and each script's own
# printed step time. Run from the repo root with `.whl` carried (msgspec wheel):
#   bash benchmarks/gpu/bare_pairs.sh [NAME...]      (no NAME: every pair below)
# Everything lands in $OUT: the traces (bare/*.trace.json.gz), logs/NAME.log, summary.txt.
set -u
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
OUT=${OUT:-/tmp/out}
START=$(date +%s)
BUDGET=${BUDGET:-560}
mkdir -p "$OUT/bare" "$OUT/logs"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >"$OUT/logs/pip.log" 2>&1
export PYTHONPATH=/tmp/site:$PWD
S=sample_traces/scripts
# NAME | warmup | active | script and its arguments
PAIRS=(
  "gpt2_decode|1|8|$S/gpt2_decode.py"
  "gpt2_decode_graph|1|8|$S/gpt2_decode_graph.py"
  "train_gpu_bound|1|4|$S/train_gpu_bound.py --steps 7"
  "train_gpu_bound_bf16|1|4|$S/train_gpu_bound.py --steps 7 --bf16"
  "train_balanced|1|6|$S/train_balanced.py --steps 10"
  "train_balanced_graphed|1|6|$S/train_balanced.py --steps 10 --graphed"
  "train_compile_eager|3|4|$S/train_compile.py --steps 9 --eager"
  "train_compile|3|4|$S/train_compile.py --steps 9"
  "train_dataloader|1|6|$S/train_dataloader.py --steps 10"
  "train_dataloader_fixed|1|6|$S/train_dataloader.py --steps 10 --fixed"
  "train_sync|1|6|$S/train_sync.py --steps 10"
  "train_sync_fixed|1|6|$S/train_sync.py --steps 10 --fixed"
  "train_copies|1|6|$S/train_copies.py --steps 10"
  "train_copies_fixed|1|6|$S/train_copies.py --steps 10 --fixed"
  "train_optimizer_loop|1|2|$S/train_optimizer_loop.py --steps 4"
  "train_optimizer_fused|1|2|$S/train_optimizer_fused.py --steps 4"
  "small_matmul_loop|1|4|$S/small_matmul_loop.py"
  "small_matmul_bmm|1|4|$S/small_matmul_bmm.py"
  "attention_causal_mask|1|6|$S/attention_causal_mask.py"
  "attention_causal_mask_fixed|1|6|$S/attention_causal_mask.py --fixed"
  "train_tokenize|1|6|$S/train_tokenize.py --hidden 1024"
  "train_tokenize_fixed|1|6|$S/train_tokenize.py --hidden 1024 --fixed"
  "train_conv|1|4|$S/train_conv.py --steps 8"
  "train_conv_fast|1|4|$S/train_conv.py --steps 8 --fast"
  "train_conv_bf16|1|4|$S/train_conv.py --steps 8 --bf16"
  "train_conv_channels_last|1|4|$S/train_conv.py --steps 8 --channels-last"
  "decode_gemv|1|8|$S/decode_gemv.py"
  "decode_gemv_int8|1|8|$S/decode_gemv.py --int8"
  "train_llm|3|4|$S/train_llm.py --steps 9"
  "train_llm_fused|3|4|$S/train_llm.py --steps 9 --fused"
  "decode_requests|1|2|$S/decode_requests.py"
  "decode_requests_batched|1|2|$S/decode_requests.py --batched"
  "compile_graph_breaks|1|6|$S/compile_graph_breaks.py"
  "compile_graph_breaks_fixed|1|6|$S/compile_graph_breaks.py --fixed"
  "triton_matmul_tiles|1|6|$S/triton_matmul_tiles.py"
  "triton_matmul_tiles_fixed|1|6|$S/triton_matmul_tiles.py --tiles 128,128,32 --warps 4 --stages 4"
  "lm_head_vocab|1|6|$S/lm_head_vocab.py"
  "lm_head_vocab_fixed|1|6|$S/lm_head_vocab.py --vocab 50304"
  "decode_cudnn_plans|1|6|$S/decode_cudnn_plans.py --steps 8"
  "decode_cudnn_plans_fixed|1|6|$S/decode_cudnn_plans.py --steps 8 --fixed"
  "eval_grad_mode|1|6|$S/eval_grad_mode.py --steps 8"
  "eval_grad_mode_fixed|1|6|$S/eval_grad_mode.py --steps 8 --fixed"
)
want=" $* "
for row in "${PAIRS[@]}"; do
  IFS='|' read -r name warm active cmd <<<"$row"
  [[ $# -gt 0 && "$want" != *" $name "* ]] && continue
  left=$(( BUDGET - ($(date +%s) - START) ))
  if (( left < 20 )); then echo "$name SKIPPED (budget)" | tee -a "$OUT/summary.txt"; continue; fi
  t0=$(date +%s)
  # shellcheck disable=SC2086
  timeout --signal=INT --kill-after=10 "$left" python3 -m tracekit profile --warmup "$warm" --active "$active" \
      --no-report --force -o "$OUT/bare/$name.trace.json.gz" $cmd >"$OUT/logs/$name.log" 2>&1
  echo "$name rc=$? $(( $(date +%s) - t0 ))s: $(grep -h 'mean step time\|per token\|ms' "$OUT/logs/$name.log" | tail -1)" \
      | tee -a "$OUT/summary.txt"
done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$OUT/summary.txt" 2>&1
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >>"$OUT/summary.txt" 2>&1
