#!/usr/bin/env bash
# Timed-only `--try` runs of held-out rows in one device call: each row unprofiled as written, with
# the `compile` knob and with the `cudagraphs` knob (tracekit.profile.trychild --mode time: CUDA events
# at step boundaries, no profiler), to measure the fuse_elementwise and cuda_graphs suggestions shown
# on those rows. Knobs change the model the script's first optimizer trains (training scripts only).
#   bash benchmarks/gpu/try_timed.sh DEADLINE_S N:NAME[:VARIANT] ...   (N: the held-out set's number)
# Rows start only while DEADLINE_S seconds have not passed; each run is stopped after 200 s. Each run
# has 16 steps; the mean is over steps 6..15 (compile and graph capture happen in the first steps).
# Writes $OUT/try_timed.txt (a line per run) and $OUT/try_timed.json (every run's result).
set -u
DEADLINE=$1; shift
python3 -c 'import msgspec' 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TORCH_LOGS=perf_hints
unset CUDA_LAUNCH_BLOCKING TRITON_INTERPRET
R=${OUT:-/tmp/out}; W=/tmp/trytimed; mkdir -p "$R" "$W"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/try_timed.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$R/try_timed.txt"
start=$SECONDS
echo "[" >"$R/try_timed.json"
first=1
for row in "$@"; do
    n=${row%%:*}; rest=${row#*:}; name=${rest%%:*}; variant=${rest#*:}; [ "$variant" = "$rest" ] && variant=""
    tag=ho${n}_$name${variant:+_$variant}
    for knob in "" compile cudagraphs; do
        if (( SECONDS - start > DEADLINE )); then echo "SKIP $tag ${knob:-as written} (deadline)" | tee -a "$R/try_timed.txt"; continue; fi
        t0=$SECONDS
        res="$W/$tag${knob:+_$knob}.json"; log="$W/$tag${knob:+_$knob}.log"
        timeout 200 python3 -m tracekit.profile.trychild --mode time ${knob:+--knob $knob} --result "$res" \
            --script "benchmarks/heldout$n/$name.py" -- ${variant:+--variant "$variant"} --steps 16 >"$log" 2>&1
        rc=$?
        line=$(python3 - "$res" "$tag" "${knob:-as_written}" "$rc" "$((SECONDS - t0))" "$log" <<'EOF'
import json, sys
res, tag, knob, rc, secs, log = sys.argv[1:]
try:
    d = json.load(open(res))
except (OSError, ValueError):
    d = {}
b = d.get("gpu_us") or d.get("wall_us") or []
steps = [b[i + 1] - b[i] for i in range(len(b) - 1)]
tail = steps[6:16]  # boundary k starts step k; the one after the 16th step mark ends the script
mean = sum(tail) / len(tail) / 1000 if tail else float("nan")
text = open(log, errors="replace").read()
skipped = sum(1 for x in text.splitlines() if "skipping cudagraphs" in x)
d.update(tag=tag, knob=knob, rc=int(rc), seconds=int(secs), mean_ms_steps_6_on=mean, cudagraph_skips=skipped,
         log_tail=text.splitlines()[-3:])
print(json.dumps(d))
EOF
)
        js=$(echo "$line" | head -1)
        [ $first = 1 ] || echo "," >>"$R/try_timed.json"; first=0
        echo "$js" >>"$R/try_timed.json"
        python3 -c "import json,sys; d=json.loads(sys.argv[1]); print(f\"{d['tag']} {d['knob']}: rc={d['rc']} {d['seconds']}s mean(6..)={d['mean_ms_steps_6_on']:.3f} ms applied={d.get('applied')} skips={d['cudagraph_skips']} {d.get('reason','')}\")" "$js" | tee -a "$R/try_timed.txt"
    done
done
echo "]" >>"$R/try_timed.json"
