# train_tokenize.py timed plainly and under `tracekit profile` (its own printed step time and the
# bare steps tracekit stores): docs/measurements/tf32_labels_h200.txt, last line. GPU machine, repository root.
set -u
S=sample_traces/scripts
for args in "--hidden 1024" ""; do
  echo "== plain $args"; timeout 60 python3 $S/train_tokenize.py $args --steps 24 2>&1 | tail -1
  timeout 120 python3 -m tracekit profile --warmup 1 --active 6 --no-report --force -o /tmp/x.trace.json.gz $S/train_tokenize.py $args 2>&1 | grep -v USDT | grep "mean step"
  python3 - <<'PY'
import gzip, json
d = json.load(gzip.open('/tmp/x.trace.json.gz'))
b = d['tracekit']['bare']
print({k: v for k, v in b.items() if k != 'step_us'}, {k: round(v / 1000, 2) for k, v in b['step_us'].items()})
steps = sorted([e for e in d['traceEvents'] if str(e.get('name', '')).startswith('ProfilerStep')], key=lambda e: e['ts'])
print('traced', [round(e['dur'] / 1000, 1) for e in steps])
PY
done
