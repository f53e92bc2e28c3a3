# The CPU-noise check behind docs/model.md ("Host gaps under the profiler"): the machine's CPUs, the
# tokenizer probe (cpu_noise.py), then train_tokenize.py and train_sync.py --fixed plain and under
# `tracekit profile`, alternating, unpinned and pinned to one core. GPU machine, repository root, .whl carried.
set -u
O=${OUT:-/tmp/o}; mkdir -p "$O"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD
{ nproc; lscpu | grep -Ei 'model name|thread|core|socket|mhz|numa'; cat /sys/fs/cgroup/cpu.max 2>/dev/null; uptime; } >"$O/cpus.txt" 2>&1
OUT=$O timeout 200 python3 benchmarks/gpu/cpu_noise.py >"$O/cpu_noise.txt" 2>&1
S=sample_traces/scripts
CORE=$(python3 -c "import os; print(sorted(os.sched_getaffinity(0))[-3])")
for pin in "" "taskset -c $CORE"; do
  for script in "train_tokenize.py --hidden 1024" "train_sync.py --steps 10 --fixed"; do
    for rep in 1 2; do
      echo "== [$pin] plain $script ($rep)"; $pin timeout 60 python3 $S/$script 2>&1 | tail -1
      echo "== [$pin] profiled $script ($rep)"
      $pin timeout 120 python3 -m tracekit profile --warmup 1 --active 6 --no-report --force -o /tmp/x.trace.json.gz $S/$script 2>&1 | grep -v USDT | grep -E "mean step|step time" | tail -1
      python3 - <<'PY'
import gzip, json
d = json.load(gzip.open('/tmp/x.trace.json.gz'))
b = d['tracekit'].get('bare') or {}
steps = sorted([e for e in d['traceEvents'] if str(e.get('name', '')).startswith('ProfilerStep')], key=lambda e: e['ts'])
print('bare', {k: round(v / 1000, 2) for k, v in (b.get('step_us') or {}).items()})
print('traced', [round(e['dur'] / 1000, 1) for e in steps])
PY
    done
  done
done >"$O/scripts.txt" 2>&1
