#!/usr/bin/env bash
# One call on the device machine: record the sample traces and take every measurement tracekit needs.
#   bash benchmarks/gpu/device_run.sh [PHASE...]
# phases: env plain traces pairs pairs2 ceilings ncu ncu_trace bench ncu_nocache
# (no phase = all, in that order). Run from the repo root with `.whl` carried (msgspec wheel).
# Everything lands in /tmp/res and is re-packed into $OUT/results.tar.gz after every step, so a
# call stopped at its time limit still returns what finished. A step that would not fit in the
# time left (BUDGET seconds from the start) is skipped and logged as such.
set -u
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
START=$(date +%s)
BUDGET=${BUDGET:-570}
OUT=${OUT:-/tmp/out}
R=/tmp/res
mkdir -p "$OUT" "$R/sample_traces" "$R/measurements" "$R/logs"
PHASES=${*:-env traces pairs ceilings ncu ncu_trace bench ncu_nocache}

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >"$R/logs/pip.log" 2>&1
export PYTHONPATH=/tmp/site:$PWD

# three archives (each must stay under 16 MiB): the sample traces, the GPT-2 ones, and everything
# else (no .ncu-rep: ~60 MB each; the CSVs imported from them are kept)
pack() {
    tar czf "$OUT/traces.tar.gz" -C "$R" --exclude='gpt2_*' sample_traces 2>/dev/null
    (cd "$R/sample_traces" && ls gpt2_* >/dev/null 2>&1 && tar czf "$OUT/traces_gpt2.tar.gz" gpt2_*)
    tar czf "$OUT/results.tar.gz" -C "$R" --exclude=sample_traces --exclude='*.ncu-rep' . 2>/dev/null
}
elapsed() { echo $(( $(date +%s) - START )); }
# step NAME SECONDS CMD...: run CMD with a timeout, if SECONDS still fit in the budget
step() {
    local name=$1 secs=$2; shift 2
    local left=$(( BUDGET - $(elapsed) ))
    if (( left < 15 )); then
        echo "$name SKIPPED (budget: ${left}s left)" | tee -a "$R/logs/summary.txt"; return
    fi
    (( secs > left )) && secs=$left
    local t0=$(date +%s)
    timeout --signal=INT --kill-after=10 "$secs" "$@" >"$R/logs/$name.log" 2>&1
    local rc=$?
    echo "$name rc=$rc $(( $(date +%s) - t0 ))s (at $(elapsed)s)" | tee -a "$R/logs/summary.txt"
    pack
}

NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
TK=(python3 -m tracekit profile)
if ! python3 -m tracekit profile --help >"$R/logs/tk_help.log" 2>&1; then
    TK=(python3 benchmarks/gpu/fallback_profile.py)
    echo "tracekit profile unusable here: fallback runner used" | tee -a "$R/logs/summary.txt"
fi

phase_env() {
    {
        date -u +%Y-%m-%dT%H:%M:%SZ
        nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
        uname -r
        "$NCU" --version | tail -1
        python3 - <<'PY'
import json, platform, sys
import torch, triton, transformers
p = torch.cuda.get_device_properties(0)
print(json.dumps({
    "python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
    "cudnn": torch.backends.cudnn.version(), "triton": triton.__version__,
    "transformers": transformers.__version__, "gpu": torch.cuda.get_device_name(),
    "sms": p.multi_processor_count, "l2_bytes": getattr(p, "L2_cache_size", None),
    "mem_bytes": p.total_memory,
}, indent=1))
PY
        python3 -c "import pandas, msgspec, click, jinja2; print('pandas', pandas.__version__, 'msgspec', msgspec.__version__)"
        python3 -c "import tracekit; print('tracekit', tracekit.__version__, 'step' in dir(tracekit))"
        echo "profile runner: ${TK[*]}"
    } >"$R/versions.txt" 2>&1
    cat "$R/versions.txt"
    pack
}

# script:warmup-steps (ProfilerStep#0 is setup + warm-up in every script; training warms up 2 steps)
TRACES=${TRACES:-"triton_vector_add:1 triton_matmul:1 linear_bf16:1 linear_fp32:1 linear_tf32:1
small_matmul_loop:1 small_matmul_bmm:1 small_matmul_graph:1 elementwise_eager:1 elementwise_compiled:1
attention_naive:1 attention_sdpa:1 gpt2_decode:1 gpt2_decode_graph:1 gpt2_generate:1 train_transformer:2"}

phase_traces() {
    for item in $TRACES; do
        local s=${item%%:*} w=${item##*:}
        if [[ ${TK[1]} == -m ]]; then
            step "trace_$s" 150 "${TK[@]}" --warmup "$w" --no-report --force \
                -o "$R/sample_traces/$s.trace.json.gz" "sample_traces/scripts/$s.py"
            # GPT-2 traces over the 2 MB repo limit: record a 10-token version too
            if [[ $s == gpt2_* ]] && (( $(stat -c %s "$R/sample_traces/$s.trace.json.gz" 2>/dev/null || echo 0) > ${MAXTRACE:-1900000} )); then
                step "trace_${s}_10tok" 150 "${TK[@]}" --warmup "$w" --no-report --force \
                    -o "$R/sample_traces/${s}_10tok.trace.json.gz" "sample_traces/scripts/$s.py" --new-tokens 10
            fi
        else
            step "trace_$s" 150 "${TK[@]}" --warmup "$w" \
                -o "$R/sample_traces/$s.trace.json.gz" "sample_traces/scripts/$s.py"
        fi
    done
    ls -la "$R/sample_traces" >"$R/logs/trace_sizes.txt"
}

PLAIN=${PLAIN:-triton_matmul attention_sdpa gpt2_decode_graph elementwise_compiled small_matmul_graph train_transformer gpt2_generate}
phase_plain() {  # the scripts without any profiler: do they run and pass their own checks here?
    for s in $PLAIN; do step "plain_$s" 120 python3 "sample_traces/scripts/$s.py"; done
}

phase_pairs() { step pairs 240 python3 benchmarks/gpu/measure_pairs.py "$R/measurements/pairs.json"; }
phase_pairs2() { step pairs2 240 python3 benchmarks/gpu/measure_pairs.py "$R/measurements/pairs_run2.json"; }
phase_ceilings() { step ceilings 120 python3 benchmarks/gpu/ceilings.py "$R/measurements/ceilings.json"; }

METRICS=dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum
ncu_run() {  # ncu_run NAME EXTRA-NCU-ARGS...
    local name=$1; shift
    step "$name" 200 "$NCU" --clock-control none --profile-from-start off --nvtx "$@" \
        --metrics "$METRICS" --export "$R/measurements/$name" --force-overwrite \
        python3 benchmarks/gpu/ncu_kernels.py --ncu --list "$R/measurements/ncu_cases.json"
    local rep="$R/measurements/$name.ncu-rep"
    [[ -f $rep ]] || return
    "$NCU" --import "$rep" --csv --page details --print-units base >"$R/measurements/$name.csv" 2>>"$R/logs/$name.log"
    "$NCU" --import "$rep" --csv --page raw --print-units base >"$R/measurements/${name}_raw.csv" 2>>"$R/logs/$name.log"
    "$NCU" --import "$rep" --csv --page details --print-units base --print-nvtx-rename kernel \
        >"$R/measurements/${name}_nvtx.csv" 2>>"$R/logs/$name.log"
    pack
}
phase_ncu() { ncu_run ncu_kernels; }
phase_ncu_trace() {
    if [[ ${TK[1]} == -m ]]; then
        step ncu_trace 120 "${TK[@]}" --warmup 1 --no-report --force \
            -o "$R/measurements/ncu_kernels.trace.json.gz" benchmarks/gpu/ncu_kernels.py
    else
        step ncu_trace 120 "${TK[@]}" --warmup 1 -o "$R/measurements/ncu_kernels.trace.json.gz" \
            benchmarks/gpu/ncu_kernels.py
    fi
}
phase_ncu_nocache() { ncu_run ncu_kernels_nocache --cache-control none; }
phase_bench() {
    step bench_profile 180 python3 benchmarks/bench_profile.py --rounds 10 --out "$R/measurements/bench_profile"
    rm -f "$R"/measurements/bench_profile/*.trace.json.gz
    pack
}

for p in $PHASES; do "phase_$p"; done
echo "done at $(elapsed)s" | tee -a "$R/logs/summary.txt"
cat "$R/logs/summary.txt"
pack
ls -la "$OUT"
