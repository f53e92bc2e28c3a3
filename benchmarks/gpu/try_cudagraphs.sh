# `tracekit profile --try cudagraphs` on six sample training scripts (docs/measurements/cudagraphs_try_h200.txt).
# Run on a GPU machine from the repository root, tracekit importable; outputs under /tmp/o.
set -u
S=sample_traces/scripts
mkdir -p /tmp/o
for row in "train_compile_eager|$S/train_compile.py --steps 12 --eager" "train_conv_bf16|$S/train_conv.py --steps 10 --bf16" "train_conv_fast|$S/train_conv.py --steps 10 --fast" "train_llm|$S/train_llm.py --steps 10" "train_llm_fused|$S/train_llm.py --steps 10 --fused" "train_optimizer_fused|$S/train_optimizer_fused.py --steps 6"; do
  IFS='|' read -r name cmd <<<"$row"
  t0=$(date +%s)
  timeout 110 python3 -m tracekit profile --try cudagraphs --no-report --force -o /tmp/o/$name.trace.json.gz $cmd > /tmp/o/$name.try.txt 2>&1
  echo "$name rc=$? $(( $(date +%s) - t0 ))s" >> /tmp/o/summary.txt
  rm -f /tmp/o/*.trace.json.gz /tmp/o/*try-*.trace.json.gz
done
