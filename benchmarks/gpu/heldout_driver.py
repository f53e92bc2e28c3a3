"""The held-out sets' GPU driver: plain timings of every (workload, variant), then `tracekit profile` recordings, within a budget.

A set's `run_all.py` holds only its tables and calls `main(SetTables(...))`:
phase 1 runs every (workload, variant) once as a plain subprocess (default 12 steps) and parses its
`mean step time` line, first each workload's baseline and labelled variant, then the extra
(unlabelled) variants, cheapest first, each only if it still leaves the expected time of every
recording (otherwise after the recordings, if time is left); phase 2 records, workload by workload,
the baseline and then its labelled variant (never the extra one), each as `python -m tracekit profile
--warmup 2 --active 4 --no-report --force -o $OUT/TAG_NAME[_VARIANT].trace.json.gz
benchmarks/SET/NAME.py [--variant V] --steps 8`, so that a budget cut leaves whole pairs: a pair (or
a plain run) starts only if it is expected to fit in what is left of --budget. Workloads named in
`record_last` (those that compile with inductor in their recorded rows) are recorded last. After every
run it writes $OUT/SET_runs.json and $OUT/SET_runs.md (default $OUT: /tmp/out) and each run's output
tail to $OUT/logs/.

The same behaviour as the fifteenth and sixteenth sets' drivers (`benchmarks/heldout15/run_all.py`,
`benchmarks/heldout16/run_all.py`, which stay as they are), with the set's names and tables passed in.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STEP = re.compile(r"mean step time over steps \d+\.\.\d+: ([0-9.]+) ms")


@dataclass
class SetTables:
    """One held-out set: its names and tables.

    workloads: script -> (its labelled variant, its extra variant or None), in README order; the
    baseline (no --variant) runs first; extra variants are timed in phase 1 only, never recorded.
    expects: (script, variant) -> (expected seconds of a plain run of 12 steps, of a recording of 8
    steps: a bare run and the profiled run); extra variants have 0.0 as their recording.
    compiles: workloads whose plain runs include a cold inductor compile (their recording's guess is
    the table's, not 2.2x the plain run). record_last: recorded after the others, in this order.
    """

    set_name: str  # e.g. "heldout17": the folder under benchmarks/ and the name of the result files
    tag: str  # e.g. "ho17": the prefix of the traces and logs
    title: str  # e.g. "Seventeenth held-out set": the results table's title
    here: Path  # the set's folder (its scripts)
    workloads: dict[str, tuple[str, str | None]]
    expects: dict[tuple[str, str | None], tuple[float, float]]
    compiles: set[str] = field(default_factory=set)
    record_last: list[str] = field(default_factory=list)
    doc: str = ""

    def record_order(self) -> list[str]:
        return [n for n in self.workloads if n not in self.record_last] + [n for n in self.record_last if n in self.workloads]


def env_for(name: str, variant: str | None) -> dict[str, str]:
    """The child's environment: this one, without CUDA_LAUNCH_BLOCKING or TRITON_INTERPRET (a GPU run)."""
    return {k: v for k, v in os.environ.items() if k not in ("CUDA_LAUNCH_BLOCKING", "TRITON_INTERPRET")}


def run(cmd: list[str], env: dict[str, str], timeout: float, log: Path) -> dict[str, Any]:
    """One subprocess: status, wall time, the last printed mean step time; its output tail goes to `log`."""
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as exc:
        log.write_text(f"$ {' '.join(cmd)}\ntimeout after {timeout:.0f} s\n{(exc.stdout or b'')[-4000:]!r}\n")
        return {"status": f"timeout after {timeout:.0f} s", "wall_s": round(time.perf_counter() - t0, 2)}
    wall = round(time.perf_counter() - t0, 2)
    log.write_text(f"$ {' '.join(cmd)}\nrc={proc.returncode}\n--- stdout\n{proc.stdout[-6000:]}\n--- stderr\n{proc.stderr[-6000:]}\n")
    found = STEP.findall(proc.stdout)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"status": f"failed rc={proc.returncode}: {' | '.join(tail)}"[:400], "wall_s": wall}
    out: dict[str, Any] = {"status": "ok", "wall_s": wall}
    if found:
        out["step_ms"] = float(found[-1])
    return out


def markdown(doc: dict[str, Any], title: str) -> str:
    """The table: plain step time, speed-up on the baseline, the recording's status."""
    lines = [f"# {title}: plain step times and recordings", "",
             f"{doc['elapsed_s']} s in all; plain: mean step time over steps 4..11 (host wall clock, no profiler); "
             "extra variants are timed, not recorded.", "",
             "| workload | variant | plain ms | vs baseline | plain run | recording |", "| --- | --- | --- | --- | --- | --- |"]
    rows: dict[str, dict[str, dict[str, Any]]] = doc["runs"]
    for name, entries in rows.items():
        base = entries.get("baseline", {}).get("plain", {}).get("step_ms")
        for key, entry in entries.items():
            plain, prof = entry.get("plain", {}), entry.get("profile", {})
            ms = plain.get("step_ms")
            speed = f"{float(base) / float(ms):.2f}x" if base and ms else "-"
            label = f"{key} (extra)" if entry.get("extra") else key
            recording = "-" if entry.get("extra") else str(prof.get("status", "not run"))[:100]
            lines.append(f"| {name} | {label} | {ms if ms is not None else '-'} | {speed} | "
                         f"{str(plain.get('status', 'not run'))[:100]} | {recording} |")
    skipped: list[str] = doc["skipped"]
    if skipped:
        lines += ["", "Skipped for the budget:", *[f"- {s}" for s in skipped]]
    return "\n".join(lines) + "\n"


def guess(tables: SetTables, phase: str, name: str, variant: str | None, plain_wall: float) -> float:
    """Expected seconds of one run: the table's figure, or for a recording at least 2.2x the plain run
    (not for a compiling workload, whose plain runs include a cold compile)."""
    plain_s, record_s = tables.expects.get((name, variant), (12.0, 20.0))
    if phase == "plain":
        return plain_s
    return record_s if name in tables.compiles else max(record_s, 2.2 * plain_wall)


def main(tables: SetTables, argv: list[str] | None = None) -> None:
    """Parse --budget/--timeout/--only, run the plain and recorded rows of `tables`, write the results."""
    workloads = tables.workloads
    p = argparse.ArgumentParser(description=(tables.doc or __doc__ or "").splitlines()[0])
    p.add_argument("--budget", type=float, default=500.0, help="seconds for all runs (default 500)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds at most for one run (default 120)")
    p.add_argument("--only", nargs="*", choices=list(workloads), default=list(workloads), help="workloads (default: all)")
    args = p.parse_args(argv)
    out = Path(os.environ.get("OUT", "/tmp/out"))
    (out / "logs").mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    runs: dict[str, dict[str, dict[str, Any]]] = {n: {} for n in args.only}
    skipped: list[str] = []
    recorded = [n for n in tables.record_order() if n in args.only]
    # phase 1: plain runs of each baseline and labelled variant, then the extra variants (cheapest
    # first); phase 2: one group per workload, its baseline recording then its labelled variant's;
    # then the extra variants that did not fit before the recordings
    groups: list[list[tuple[str, str, str | None]]] = [[("plain", n, v)] for n in args.only for v in (None, workloads[n][0])]
    extras = sorted(((n, workloads[n][1]) for n in args.only if workloads[n][1]), key=lambda nv: tables.expects.get(nv, (12.0, 0.0))[0])
    groups += [[("extra", n, v)] for n, v in extras]
    groups += [[("profile", n, v) for v in (None, workloads[n][0])] for n in recorded]

    def plain_wall(name: str, variant: str | None) -> float:
        return float(runs[name].get(variant or "baseline", {}).get("plain", {}).get("wall_s", 0.0))

    def save() -> None:
        doc = {"budget_s": args.budget, "elapsed_s": round(time.perf_counter() - start, 1), "skipped": skipped,
               "python": sys.version.split()[0], "runs": runs}
        (out / f"{tables.set_name}_runs.json").write_text(json.dumps(doc, indent=1))
        (out / f"{tables.set_name}_runs.md").write_text(markdown(doc, tables.title))

    def reserve() -> float:
        """The expected seconds of the recordings not yet run."""
        return sum(guess(tables, "profile", n, v, plain_wall(n, v))
                   for n in recorded for v in (None, workloads[n][0]) if "profile" not in runs[n].get(v or "baseline", {}))

    pending = list(groups)
    while pending:
        group = pending.pop(0)
        phase0 = group[0][0]
        need = sum(guess(tables, "profile" if ph == "profile" else "plain", n, v, plain_wall(n, v)) for ph, n, v in group)
        left = args.budget - (time.perf_counter() - start)
        if phase0 == "extra" and need + reserve() > left:
            print(f"defer extra {group[0][1]} {group[0][2]}: needs {need:.0f} s and the recordings "
                  f"{reserve():.0f} s, {left:.0f} s left", flush=True)
            pending.append([("late", n, v) for _, n, v in group])  # after the recordings
            continue
        if need > left:
            for ph, n, v in group:
                skipped.append(f"{ph}: {n} {v or 'baseline'} (its group expects {need:.0f} s, {left:.0f} s left)")
                print(f"skip {ph} {n} {v or 'baseline'}: group expects {need:.0f} s, {left:.0f} s left", flush=True)
            save()
            continue
        for phase, name, variant in group:
            key = variant or "baseline"
            entry = runs[name].setdefault(key, {})
            if phase in ("extra", "late"):
                entry["extra"] = True
            left = args.budget - (time.perf_counter() - start)
            script = str(tables.here / f"{name}.py")
            vargs = ["--variant", variant] if variant else []
            tag = f"{tables.tag}_{name}" + (f"_{variant}" if variant else "")
            if phase == "profile":
                cmd = [sys.executable, "-m", "tracekit", "profile", "--warmup", "2", "--active", "4", "--no-report", "--force",
                       "-o", str(out / f"{tag}.trace.json.gz"), script, *vargs, "--steps", "8"]
            else:
                cmd = [sys.executable, script, *vargs]
            slot = "profile" if phase == "profile" else "plain"
            entry[slot] = r = run(cmd, env_for(name, variant), min(args.timeout, max(left, 1.0)),
                                  out / "logs" / f"{tag}.{slot}.log")
            print(f"{phase:7s} {name:26s} {key:18s} {str(r['status'])[:60]:60s} wall {r['wall_s']:6.1f} s "
                  f"step {r.get('step_ms', float('nan')):9.3f} ms", flush=True)
            save()
    save()
    print((out / f"{tables.set_name}_runs.md").read_text())
