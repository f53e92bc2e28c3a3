#!/usr/bin/env bash
# `tracekit profile --try compile` on held-out rows in one device call: whether torch.compile of the
# model's root modules makes each step faster unprofiled (the measured answer to fuse_elementwise's
# saving on that row). Each row's --try table and JSON go to $OUT as soon as it ends.
#   [KNOB=cudagraphs] bash benchmarks/gpu/try_compile.sh DEADLINE_S N:NAME[:VARIANT] ...   (N: the held-out set's number)
# KNOB (default compile): the --try knob; cudagraphs is the measured answer to cuda_graphs' saving.
# Rows start only while DEADLINE_S seconds have not passed; each run is stopped after 150 s.
set -u
DEADLINE=$1; shift
KNOB=${KNOB:-compile}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
unset CUDA_LAUNCH_BLOCKING TRITON_INTERPRET
R=${OUT:-/tmp/out}; W=/tmp/trycompile; mkdir -p "$R" "$W"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
start=$SECONDS
for row in "$@"; do
    n=${row%%:*}; rest=${row#*:}; name=${rest%%:*}; variant=${rest#*:}; [ "$variant" = "$rest" ] && variant=""
    tag=ho${n}_$name${variant:+_$variant}
    if (( SECONDS - start > DEADLINE )); then echo "SKIP $tag (deadline)"; continue; fi
    t0=$SECONDS
    (cd "$W" && timeout 300 python3 -m tracekit profile --try "$KNOB" --timeout 150 --warmup 2 --active 4 --no-report \
        --force -o "$W/$tag.trace.json.gz" "$OLDPWD/benchmarks/heldout$n/$name.py" ${variant:+--variant "$variant"} \
        --steps 12 >"$R/$tag.try.txt" 2>"$W/$tag.err")
    echo "$tag rc=$? $((SECONDS - t0)) s"
    tail -5 "$W/$tag.err" >"$R/$tag.try.err"
    cp "$W"/"$tag"*.try.json "$R/" 2>/dev/null
    cat "$R/$tag.try.txt"
done
ls -la "$R"
