#!/usr/bin/env bash
# Record held-out rows under `tracekit profile` in one device call, without the plain timings, each
# archived into $OUT as soon as it is written (a call cut off by its limit still returns what ran):
#   bash benchmarks/gpu/record_rows.sh N DEADLINE_S NAME[:VARIANT] ...   (N: the set's number)
# Rows start only while DEADLINE_S seconds have not passed; traces go to $OUT/tracesK.tar (<= 12 MB each).
# ANALYZE=0 skips the on-device `tracekit analyze --json` of each row (the recordings are analysed here).
set -u
N=$1; DEADLINE=$2; shift 2
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
unset CUDA_LAUNCH_BLOCKING TRITON_INTERPRET
R=${OUT:-/tmp/out}; W=/tmp/rec$N; mkdir -p "$R" "$W/an"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
start=$SECONDS; part=1
for row in "$@"; do
    name=${row%%:*}; variant=${row#*:}; [ "$variant" = "$row" ] && variant=""
    tag=ho${N}_$name${variant:+_$variant}
    if (( SECONDS - start > DEADLINE )); then echo "SKIP $tag (deadline)"; continue; fi
    t0=$SECONDS
    timeout 100 python3 -m tracekit profile --warmup 2 --active 4 --no-report --force -o "$W/$tag.trace.json.gz" \
        "benchmarks/heldout$N/$name.py" ${variant:+--variant "$variant"} --steps 8 >"$W/$tag.log" 2>&1
    echo "$tag rc=$? $((SECONDS - t0)) s"
    [ -f "$W/$tag.trace.json.gz" ] || continue
    if [ "${ANALYZE:-1}" != 0 ]; then
        timeout 60 python3 -m tracekit analyze --json "$W/$tag.trace.json.gz" >"$W/an/$tag.json" 2>"$W/an/$tag.err"
    else
        : >"$W/an/$tag.json"; : >"$W/an/$tag.err"
    fi
    tarf="$R/traces$part.tar"
    if [ -f "$tarf" ] && (( $(stat -c %s "$tarf") > 11000000 )); then part=$((part + 1)); tarf="$R/traces$part.tar"; fi
    (cd "$W" && tar rf "$tarf" "$tag.trace.json.gz" "$tag.log" "an/$tag.json" "an/$tag.err")
done
ls -la "$R"
