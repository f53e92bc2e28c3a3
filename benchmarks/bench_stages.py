"""CPU time per stage of one `tracekit report`, in a fresh process per run, for one or more checkouts.

usage: python benchmarks/bench_stages.py TRACE [--repeat 3] [--code DIR ...]

Each run is `tracekit report` in a child process (PYTHONPATH=DIR) whose loader and analysis
functions are wrapped to add up their CPU time (time.process_time); runs of the checkouts
alternate. Prints, per stage, the minimum over the runs of each checkout, and the peak RSS. A stage
a checkout does not have (a function it lacks) is left blank. Run it from a directory that does
not shadow PYTHONPATH (e.g. `cd /tmp`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import importlib, json, resource, sys, time
t0 = time.process_time()
from tracekit.cli import main
import tracekit.pipeline.core, tracekit.pipeline.local, tracekit.analyzers.analysis, tracekit.trace.load
T = {"imports": time.process_time() - t0}

def wrap(owner, name, label):
    f = getattr(owner, name, None)
    if f is None:
        return
    def timed(*a, **k):
        t = time.process_time()
        try:
            return f(*a, **k)
        finally:
            T[label] = T.get(label, 0.0) + time.process_time() - t
    setattr(owner, name, timed)

def mod(name):
    try:
        return importlib.import_module(name)
    except ImportError:
        return None

files, reader, build = mod("tracekit.trace.files"), mod("tracekit.trace.reader"), mod("tracekit.trace.build")
stream, times, load, link = mod("tracekit.trace.stream"), mod("tracekit.trace.times"), mod("tracekit.trace.load"), mod("tracekit.trace.link")
wrap(files, "read_bytes", "read + gunzip (whole text)")
if stream is not None:
    wrap(stream.StreamDocument, "_more", "read / inflate (streamed)")
wrap(load, "open_document", "top level (whole text)")
if reader is not None:
    class Timed:
        def __init__(self, inner):
            self.inner = inner
        def decode(self, b):
            t = time.process_time()
            try:
                return self.inner.decode(b)
            finally:
                T["msgspec event decode"] = T.get("msgspec event decode", 0.0) + time.process_time() - t
    reader._EVENTS = Timed(reader._EVENTS)
if times is not None:
    wrap(times.ChunkTimes, "__init__", "start times parsed")
wrap(build.TableBuilder, "add", "adding the chunks to the tables")
wrap(build.TableBuilder, "tables", "frames")
wrap(load, "_sorted", "sorting")
wrap(link, "nest_ops", "op nesting")
wrap(load, "_decode_inputs", "op inputs decoded at load")
wrap(tracekit.pipeline.core, "load_file", "load_trace in all")
wrap(tracekit.analyzers.analysis, "analyze_rank", "analyze in all")
wrap(tracekit.pipeline.local, "model_ranks", "execution model (every rank)")
wrap(tracekit.pipeline.local, "suggest_checked", "rules + what-if replays")
try:
    main(["report", "-q", "-j", "1", "--force", "-o", sys.argv[2], sys.argv[1]])
except SystemExit:
    pass
T["the whole process"] = time.process_time()
T["peak RSS (MB)"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print("STAGES " + json.dumps(T))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--code", action="append", default=None, help="tracekit checkout (repeatable)")
    args = ap.parse_args()
    codes = [str(Path(c).resolve()) for c in (args.code or [str(ROOT)])]
    out = str(Path(tempfile.mkdtemp()) / "stages.html")
    best: dict[str, dict[str, float]] = {c: {} for c in codes}
    for _ in range(args.repeat):
        for code in codes:
            proc = subprocess.run([sys.executable, "-c", CHILD, args.trace, out], capture_output=True, text=True,
                                  env={**os.environ, "PYTHONPATH": code})
            line = next((x for x in proc.stdout.splitlines() if x.startswith("STAGES ")), None)
            if line is None:
                sys.exit(f"{code}: no stage times ({proc.stderr.strip()[-300:]})")
            for stage, value in json.loads(line[len("STAGES "):]).items():
                best[code][stage] = min(best[code].get(stage, value), value)
    stages = list(dict.fromkeys(s for c in codes for s in best[c]))
    print(f"CPU s per stage, minimum of {args.repeat} processes per checkout: {args.trace}")
    print("| stage | " + " | ".join(Path(c).name for c in codes) + " |")
    print("|---|" + "---:|" * len(codes))
    for stage in stages:
        cells = [f"{best[c][stage]:.3f}" if stage in best[c] else "" for c in codes]
        print(f"| {stage} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
