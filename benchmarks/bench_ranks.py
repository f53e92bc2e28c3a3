"""Analyze N-rank directories built from one real trace; print wall time and peak RSS per process.

usage: python benchmarks/bench_ranks.py [--source TRACE] [--mb 20] [--ranks 1 4 16 64] [--jobs C]
                                        [--repeat 3] [--floor] [--workdir DIR] [--scheduler ADDRESS]

The source (default: sample_traces/train_transformer.trace.json.gz) is grown to about --mb MB of raw
JSON with benchmarks/make_big_trace.py, then copied once per rank with its distributedInfo.rank
rewritten. Each N runs in a fresh child process that does what `tracekit analyze --json DIR --jobs C`
does (tracekit.pipeline.run, the merged JSON document, json.dumps) and reports its wall time, its own
peak RSS (the parent), and every worker's peak RSS. Each N runs --repeat times (fresh processes) and
the run with the median wall time is shown: on a shared or virtual machine the slowest of 16 busy
cores varies by tens of percent from run to run. --floor adds what the machine itself does to C busy
cores: C independent processes analyzing one rank each (no pool, no merge), and a pure-Python loop. The target (issue 12): wall <= ceil(N/C) x 1.3 x
the one-rank time; worker peak <= 1.2 x the one-rank peak; parent < 500 MB at 64 ranks.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLACEHOLDER = "__TRACEKIT_RANK__"

CHILD = r"""
import json, sys, time
from tracekit import pipeline
from tracekit.executor import scheduler_from_env
path, jobs = sys.argv[1], int(sys.argv[2])
t = time.perf_counter()
result = pipeline.run(path, jobs=jobs, scheduler=scheduler_from_env(None))
text = json.dumps(result.to_dict(), allow_nan=False)
wall = time.perf_counter() - t
workers = {}
for r in result.results:
    workers[r.pid] = max(workers.get(r.pid, 0), r.peak_rss_kb)
parent = pipeline.peak_rss_kb()
import os
print(json.dumps({"pid": os.getpid(), "wall": wall, "parent_kb": parent, "workers_kb": workers, "ranks": len(result.results),
                  "worker_s": [r.seconds for r in result.results],
                  "worker_cpu_s": [r.cpu_seconds for r in result.results], "json_mb": len(text) / 1e6,
                  "stragglers": [s.rank for s in result.cross.stragglers] if result.cross else []}))
"""

TOGETHER = r"""
import json, sys, time
work = sys.argv[1]
if work != "loop":
    from tracekit import pipeline
while time.time() < float(sys.argv[2]):
    time.sleep(0.001)
t = time.perf_counter()
if work == "loop":
    x = 0
    for i in range(5_000_000):
        x += i * i
else:
    pipeline.analyze_rank_file(pipeline.RankTask(work))
print(json.dumps({"wall": time.perf_counter() - t}))
"""


def big_source(source: Path, mb: float, workdir: Path) -> Path:
    """The source grown to `mb` MB by make_big_trace.py (reused when it is already there)."""
    out = workdir / f"source-{mb:g}mb.json"
    if not out.exists():
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "make_big_trace.py"), str(source), str(out),
                        "--mb", str(mb)], check=True, stdout=subprocess.DEVNULL)
    return out


def template(source: Path) -> str:
    """The trace's JSON text with distributedInfo first and its rank a placeholder."""
    opener = gzip.open if source.name.endswith(".gz") else open
    with opener(source, "rt") as fh:
        doc = json.load(fh)
    info = dict(doc.pop("distributedInfo", None) or {"backend": "nccl"})
    info["rank"] = PLACEHOLDER
    return json.dumps({"distributedInfo": info, **doc})


def rank_dir(text: str, n: int, workdir: Path) -> Path:
    """A directory of `n` rank files (rank{r}.json), each the template with rank r and world size n."""
    folder = workdir / f"ranks-{n}"
    folder.mkdir(parents=True, exist_ok=True)
    head, rest = text[:1000], text[1000:]
    for r in range(n):
        path = folder / f"rank{r}.json"
        if not path.exists():
            path.write_text(head.replace(f'"{PLACEHOLDER}"', str(r)) + rest)
    return folder


def child_env() -> dict[str, str]:
    """This environment with the repository first on PYTHONPATH (the tree under test)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    return env


def run_child(folder: Path, jobs: int) -> dict:
    env = child_env()
    out = subprocess.run([sys.executable, "-c", CHILD, str(folder), str(jobs)], check=True,
                         capture_output=True, text=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def together(works: list[str]) -> list[float]:
    """Wall times of independent processes (no pool, no merge), one per work item, started at the
    same instant: a rank file's path (analyze_rank_file) or "loop" (pure-Python arithmetic)."""
    env = child_env()
    start = str(time.time() + 2.0 + 0.05 * len(works))
    procs = [subprocess.Popen([sys.executable, "-c", TOGETHER, w, start], stdout=subprocess.PIPE, text=True,
                              env=env) for w in works]
    return sorted(json.loads(p.communicate()[0])["wall"] for p in procs)


def cpu_times() -> list[int]:
    """The machine's CPU time counters (/proc/stat 'cpu' line: user nice system idle iowait irq
    softirq steal ...), [] where there is none."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            return [int(x) for x in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return []


def steal_pct(before: list[int], after: list[int]) -> str:
    """Share of the CPU time between two cpu_times() that the hypervisor gave to other guests."""
    if len(before) < 8 or len(after) < 8:
        return "n/a"
    delta = [b - a for a, b in zip(before, after, strict=False)]
    return f"{100 * delta[7] / max(1, sum(delta[:8])):.1f} %"


def machine_floor(folder: Path, jobs: int, one_wall: float) -> None:
    """What the machine alone does to `jobs` busy cores: the same rank work in `jobs` independent
    processes (the best any scheduler can do), and a pure-Python loop alone and `jobs` at once."""
    files = sorted(folder.glob("rank*.json"))[:jobs]
    alone = sorted(together([str(files[0])])[0] for _ in range(3))[1]  # median of 3 lone runs
    before = cpu_times()
    many = together([str(f) for f in files])
    stolen = steal_pct(before, cpu_times())
    loop1, loops = sorted(together(["loop"])[0] for _ in range(3))[1], together(["loop"] * jobs)
    print(f"machine floor: one rank alone in its own process {alone:.2f} s; {len(files)} independent processes "
          f"at once: median {many[len(many) // 2]:.2f} s, slowest {many[-1]:.2f} s "
          f"({many[-1] / alone:.2f}x; the N={len(files)} bound allows 1.3x of {one_wall:.2f} s); steal time "
          f"meanwhile {stolen} of the machine's CPU time")
    print(f"pure-Python loop: alone {loop1:.2f} s; {jobs} at once: median {loops[len(loops) // 2]:.2f} s, "
          f"slowest {loops[-1]:.2f} s ({loops[-1] / loop1:.2f}x): the cores' own slowdown when all are busy")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default=str(ROOT / "sample_traces" / "train_transformer.trace.json.gz"))
    parser.add_argument("--mb", type=float, default=20.0, help="raw JSON size of each rank's file")
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--repeat", type=int, default=3, help="runs per N; the median-wall run is shown")
    parser.add_argument("--floor", action="store_true",
                        help="also time --jobs independent processes (one rank each) and a pure-Python loop")
    parser.add_argument("--workdir", default="/tmp/tracekit_bench_ranks")
    parser.add_argument("--scheduler", default=None, help="Dask scheduler address (TRACEKIT_SCHEDULER)")
    args = parser.parse_args()
    if args.scheduler:
        os.environ["TRACEKIT_SCHEDULER"] = args.scheduler
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    source = big_source(Path(args.source), args.mb, workdir)
    text = template(source)
    print(f"source {args.source} grown to {len(text) / 1e6:.1f} MB per rank; jobs {args.jobs}; "
          f"cpus {os.cpu_count()}; python {sys.version.split()[0]}; median of {args.repeat} runs per N")
    print(f"{'N':>4s} {'wall s':>8s} {'bound s':>8s} {'ok':>3s} {'per rank s':>10s} {'cpu/rank s':>10s} {'parent MB':>9s} "
          f"{'worker max MB':>13s} {'rss sum MB':>10s} {'workers':>7s} {'json MB':>7s} walls s")
    one_wall = one_rss = None
    for n in args.ranks:
        runs = sorted((run_child(rank_dir(text, n, workdir), args.jobs) for _ in range(max(1, args.repeat))),
                      key=lambda x: x["wall"])
        m = runs[len(runs) // 2]
        parent = m["parent_kb"] / 1024
        workers = {int(k): v / 1024 for k, v in m["workers_kb"].items()}
        worker_max = max(workers.values())
        total = parent + sum(v for pid, v in workers.items() if pid != m["pid"])  # in-process: counted once
        if one_wall is None:
            one_wall, one_rss = m["wall"], worker_max
        bound = math.ceil(n / args.jobs) * 1.3 * one_wall
        ok = m["wall"] <= bound and worker_max <= 1.2 * one_rss and (n < 64 or parent < 500)
        mean = sum(m["worker_s"]) / len(m["worker_s"])
        cpu = sum(m["worker_cpu_s"]) / len(m["worker_cpu_s"])
        print(f"{n:4d} {m['wall']:8.2f} {bound:8.2f} {'yes' if ok else 'NO':>3s} {mean:10.2f} {cpu:10.2f} {parent:9.0f} "
              f"{worker_max:13.0f} {total:10.0f} {len(workers):7d} {m['json_mb']:7.2f} "
              + " ".join(f"{x['wall']:.2f}" for x in runs), flush=True)
    if args.floor:
        machine_floor(rank_dir(text, args.jobs, workdir), args.jobs, one_wall or 0.0)
    print(f"load average before the last run: {os.getloadavg()[0]:.1f} (other processes share the cores)")
    print("per rank s: a worker's wall time on one rank; cpu/rank s: its CPU time (contention-free); "
          "bound = ceil(N/jobs) x 1.3 x the N=1 wall time; ok also needs worker max <= 1.2 x the N=1 "
          "peak and (N=64) parent < 500 MB. N=1 runs in one process (parent = worker).")


if __name__ == "__main__":
    main()
