"""Times every held-out workload and each of its candidate fixes without any profiler, twice each.

Run on the GPU machine from the repo root: python3 benchmarks/heldout/time_variants.py [--budget S]
Each (workload, variant) runs as its own subprocess; round 1 runs every pair once, round 2 runs them
all again in the same order, so a pair's two runs are apart in time. A run whose expected length
(its first run's wall time, else --guess) does not fit in what is left of the budget is skipped and
said so. Writes $OUT/variants.json (default $OUT: /tmp/out) and prints a table.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# script -> its candidate fixes (the baseline, no --fix, comes first); the fixes are the scripts' own
# `--fix` choices, listed in README.md with the expectation written before any measurement
WORKLOADS: dict[str, tuple[str, ...]] = {
    "vit_train": ("tf32", "bf16"),
    "lstm_cells": ("cudnn", "cudnn_amp"),
    "clip_ema": ("foreach", "foreach_fused"),
    "embedding_bags": ("concat", "concat_sparse"),
    "encoder_requests": ("batched", "cuda_graphs"),
    "norm_gelu_chain": ("native", "compile"),
    "triton_layernorm": ("block", "torch"),
    "attention_padmask": ("pad", "pad128"),
    "numpy_augment": ("workers", "gpu_aug"),
    "masked_loss": ("host_index", "ignore_index"),
}
STEP = re.compile(r"mean step time over steps \d+\.\.\d+: ([0-9.]+) ms")


def run_one(script: str, fix: str | None, timeout: float, here: Path = HERE, flag: str = "--fix") -> dict[str, object]:
    """One subprocess of `here/SCRIPT.py [FLAG FIX]`: its wall time, exit status and the last printed mean step time."""
    cmd = [sys.executable, str(here / f"{script}.py"), *([flag, fix] if fix else [])]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": f"timeout after {timeout:.0f} s", "wall_s": round(time.perf_counter() - t0, 2)}
    wall = round(time.perf_counter() - t0, 2)
    found = STEP.findall(proc.stdout)
    if proc.returncode != 0 or not found:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"status": f"failed rc={proc.returncode}: {' | '.join(tail)}"[:400], "wall_s": wall}
    return {"status": "ok", "wall_s": wall, "step_ms": float(found[-1]), "line": proc.stdout.strip().splitlines()[-1]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget", type=float, default=300.0, help="seconds for all runs (default 300)")
    p.add_argument("--guess", type=float, default=20.0, help="expected seconds of a run not yet timed")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds at most for one run")
    p.add_argument("--only", nargs="*", default=None, help="workload names (default: all)")
    args = p.parse_args()
    out = Path(os.environ.get("OUT", "/tmp/out"))
    out.mkdir(parents=True, exist_ok=True)
    names = [n for n in WORKLOADS if not args.only or n in args.only]
    pairs = [(n, f) for n in names for f in (None, *WORKLOADS[n])]
    results: dict[str, dict[str, dict[str, object]]] = {n: {} for n in names}
    start = time.perf_counter()
    skipped: list[str] = []
    for rnd in (1, 2):
        for name, fix in pairs:
            key = fix or "baseline"
            entry = results[name].setdefault(key, {"runs": []})
            runs: list[dict[str, object]] = entry["runs"]  # type: ignore[assignment]
            expect = float(runs[0]["wall_s"]) if runs else args.guess  # type: ignore[arg-type]
            left = args.budget - (time.perf_counter() - start)
            if expect > left:
                skipped.append(f"round {rnd}: {name} {key} (expects {expect:.0f} s, {left:.0f} s left)")
                print(f"skip round {rnd} {name} {key}: expects {expect:.0f} s, {left:.0f} s left", flush=True)
                continue
            r = run_one(name, fix, min(args.timeout, max(left, 1.0)))
            runs.append(r)
            print(f"round {rnd} {name:18s} {key:14s} {r['status']:8.60s} wall {r['wall_s']:6.1f} s "
                  f"step {r.get('step_ms', float('nan')):9.3f} ms", flush=True)
    for name in names:
        for entry in results[name].values():
            ms = [float(r["step_ms"]) for r in entry["runs"] if "step_ms" in r]  # type: ignore[union-attr]
            entry["step_ms"] = ms
            entry["mean_ms"] = round(sum(ms) / len(ms), 4) if ms else None
        timed = {k: v["mean_ms"] for k, v in results[name].items() if v["mean_ms"] is not None}
        results[name]["_fastest"] = {"variant": min(timed, key=timed.get) if timed else None}  # type: ignore[arg-type]
    doc = {"budget_s": args.budget, "elapsed_s": round(time.perf_counter() - start, 1), "skipped": skipped,
           "python": sys.version.split()[0], "workloads": results}
    (out / "variants.json").write_text(json.dumps(doc, indent=1))
    print(f"\n{'workload':18s} {'variant':14s} {'runs (ms)':>24s} {'mean ms':>9s}")
    for name in names:
        for key, entry in results[name].items():
            if key == "_fastest":
                continue
            runs_ms = ", ".join(f"{m:.3f}" for m in entry["step_ms"])  # type: ignore[union-attr]
            mean = entry["mean_ms"]
            print(f"{name:18s} {key:14s} {runs_ms:>24s} {mean if mean is not None else '-':>9}")
        print(f"{name:18s} fastest: {results[name]['_fastest']['variant']}")
    if skipped:
        print(f"skipped {len(skipped)} run(s) for the budget of {args.budget:.0f} s")
    print(f"wrote {out / 'variants.json'} in {doc['elapsed_s']} s")


if __name__ == "__main__":
    main()
