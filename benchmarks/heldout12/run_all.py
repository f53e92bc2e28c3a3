"""Times every workload of the twelfth held-out set and each variant without a profiler, then records each under `tracekit profile`.

Run on the GPU machine from the repo root, in one device call: python3 benchmarks/heldout12/run_all.py [--budget S]
Phase 1 runs every (workload, variant) once as a plain subprocess (default 12 steps) and parses its
`mean step time` line; phase 2 records every baseline, phase 3 every variant, each as
`python -m tracekit profile --warmup 2 --active 4 --no-report --force -o $OUT/ho12_NAME[_VARIANT].trace.json.gz
benchmarks/heldout12/NAME.py [--variant V] --steps 8` (the profile rows of README.md). `t5_inf_clamp`
goes first so that inductor's and Triton's on-disk caches are warm for its recordings. A run
whose expected length does not fit in what is left of --budget is skipped and listed. After every
run it writes $OUT/heldout12_runs.json and $OUT/heldout12_runs.md (default $OUT: /tmp/out) and each
run's output tail to $OUT/logs/.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# script -> its variants (the baseline, no --variant, first), as in README.md's table
WORKLOADS: dict[str, tuple[str, ...]] = {
    "t5_inf_clamp": ("where_clamp",),
    "bert_foreach_off": ("fused",),
    "neox_causal_mask": ("is_causal",),
    "triton_flash_tiles": ("big_tiles",),
    "pad_token_vocab": ("pad_vocab",),
    "translation_fp32": ("tf32", "bf16"),
    "stl_transforms": ("workers",),
    "rerank_per_pair": ("batched",),
    "int4_decode": ("int4_weight_only",),
    "smol_decode_graph": ("cuda_graph",),
}
# expected seconds of a plain run where more than the default 12 (the set's two inductor compiles,
# both of the same small T5 encoder, cold in phase 1)
PLAIN_GUESS: dict[tuple[str, str | None], float] = {("t5_inf_clamp", None): 30.0,
                                                    ("t5_inf_clamp", "where_clamp"): 25.0}
STEP = re.compile(r"mean step time over steps \d+\.\.\d+: ([0-9.]+) ms")


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


def markdown(doc: dict[str, Any]) -> str:
    """The table: plain step time, speed-up on the baseline, the recording's status."""
    lines = ["# Twelfth held-out set: plain step times and recordings", "",
             f"{doc['elapsed_s']} s in all; plain: mean step time over steps 4..11 (host wall clock, no profiler).", "",
             "| workload | variant | plain ms | vs baseline | plain run | recording |", "| --- | --- | --- | --- | --- | --- |"]
    rows: dict[str, dict[str, dict[str, Any]]] = doc["runs"]
    for name, entries in rows.items():
        base = entries.get("baseline", {}).get("plain", {}).get("step_ms")
        for key, entry in entries.items():
            plain, prof = entry.get("plain", {}), entry.get("profile", {})
            ms = plain.get("step_ms")
            speed = f"{float(base) / float(ms):.2f}x" if base and ms else "-"
            lines.append(f"| {name} | {key} | {ms if ms is not None else '-'} | {speed} | "
                         f"{str(plain.get('status', 'not run'))[:100]} | {str(prof.get('status', 'not run'))[:100]} |")
    skipped: list[str] = doc["skipped"]
    if skipped:
        lines += ["", "Skipped for the budget:", *[f"- {s}" for s in skipped]]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget", type=float, default=440.0, help="seconds for all runs (default 440)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds at most for one run (default 120)")
    p.add_argument("--only", nargs="*", choices=list(WORKLOADS), default=list(WORKLOADS), help="workloads (default: all)")
    args = p.parse_args()
    out = Path(os.environ.get("OUT", "/tmp/out"))
    (out / "logs").mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    pairs = [(n, v) for n in args.only for v in (None, *WORKLOADS[n])]
    runs: dict[str, dict[str, dict[str, Any]]] = {n: {} for n in args.only}
    skipped: list[str] = []
    plan = [("plain", n, v) for n, v in pairs] + [("profile", n, v) for n, v in pairs if v is None] \
        + [("profile", n, v) for n, v in pairs if v is not None]
    for phase, name, variant in plan:
        key = variant or "baseline"
        entry = runs[name].setdefault(key, {})
        plain_wall = float(entry.get("plain", {}).get("wall_s", 0.0))
        guess = PLAIN_GUESS.get((name, variant), 12.0) if phase == "plain" else max(2.2 * plain_wall, 12.0)
        left = args.budget - (time.perf_counter() - start)
        if guess > left:
            skipped.append(f"{phase}: {name} {key} (expects {guess:.0f} s, {left:.0f} s left)")
            print(f"skip {phase} {name} {key}: expects {guess:.0f} s, {left:.0f} s left", flush=True)
            continue
        script = str(HERE / f"{name}.py")
        vargs = ["--variant", variant] if variant else []
        tag = f"ho12_{name}" + (f"_{variant}" if variant else "")
        if phase == "plain":
            cmd = [sys.executable, script, *vargs]
        else:
            cmd = [sys.executable, "-m", "tracekit", "profile", "--warmup", "2", "--active", "4", "--no-report", "--force",
                   "-o", str(out / f"{tag}.trace.json.gz"), script, *vargs, "--steps", "8"]
        entry[phase] = r = run(cmd, env_for(name, variant), min(args.timeout, max(left, 1.0)), out / "logs" / f"{tag}.{phase}.log")
        print(f"{phase:7s} {name:18s} {key:16s} {str(r['status'])[:60]:60s} wall {r['wall_s']:6.1f} s "
              f"step {r.get('step_ms', float('nan')):9.3f} ms", flush=True)
        doc = {"budget_s": args.budget, "elapsed_s": round(time.perf_counter() - start, 1), "skipped": skipped,
               "python": sys.version.split()[0], "runs": runs}
        (out / "heldout12_runs.json").write_text(json.dumps(doc, indent=1))
        (out / "heldout12_runs.md").write_text(markdown(doc))
    doc = {"budget_s": args.budget, "elapsed_s": round(time.perf_counter() - start, 1), "skipped": skipped,
           "python": sys.version.split()[0], "runs": runs}
    (out / "heldout12_runs.json").write_text(json.dumps(doc, indent=1))
    (out / "heldout12_runs.md").write_text(markdown(doc))
    print((out / "heldout12_runs.md").read_text())


if __name__ == "__main__":
    main()
