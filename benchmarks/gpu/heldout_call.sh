#!/usr/bin/env bash
# One device call for a held-out set: plain timings and recordings (run_all.py), tracekit's JSON
# answer on each recording, and everything packed into at most 8 files under $OUT.
#   bash benchmarks/gpu/heldout_call.sh N [run_all.py options]   (N: the set's number, e.g. 5)
# Run from the repo root with `.whl` carried (msgspec wheel for the device's Python), after
# `bash benchmarks/gpu/slim_tree.sh out` here (the device takes 64 MiB of the tree; `back` after).
set -u
N=$1; shift
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
R=${OUT:-/tmp/out}; W=/tmp/ho$N; mkdir -p "$R" "$W"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
date -u +%FT%TZ
OUT=$W python3 "benchmarks/heldout$N/run_all.py" "$@" 2>&1 | tail -60
date -u +%FT%TZ
cd "$W" && mkdir -p an
for f in *.trace.json.gz; do
    timeout 90 python3 -m tracekit analyze --json "$f" >"an/${f%.trace.json.gz}.json" 2>"an/${f%.trace.json.gz}.err" &
done
wait
cp "heldout${N}_runs.json" "heldout${N}_runs.md" "$R/" 2>/dev/null
tar czf "$R/logs_an.tar.gz" logs an
# traces in at most 5 archives of <= 14 MB each, smallest first; what does not fit is listed
part=1; tot=0
for f in $(ls -Sr ./*.trace.json.gz 2>/dev/null); do
    s=$(stat -c %s "$f")
    if (( tot + s > 14000000 )); then part=$((part + 1)); tot=0; fi
    if (( part > 5 )); then echo "LEFT OUT $f $s bytes"; continue; fi
    echo "$f" >>"/tmp/part$part"; tot=$((tot + s))
done
for p in 1 2 3 4 5; do [ -f "/tmp/part$p" ] && tar cf "$R/traces$p.tar" $(cat "/tmp/part$p"); done
ls -la "$R" "$W"
