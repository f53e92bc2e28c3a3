"""Times every workload of the second held-out set and each of its variants without any profiler.

Run on the GPU machine from the repo root: python3 benchmarks/heldout2/time_all.py [--budget S]
Each (workload, variant) runs as its own subprocess (default steps); round 1 runs every pair once,
round 2 runs them all again in the same order as far as the budget allows, so a pair's two runs are
apart in time. A run whose expected length (its first run's wall time, else --guess) does not fit
in what is left of the budget is skipped and listed. Writes $OUT/heldout2_times.json and
$OUT/heldout2_times.md (default $OUT: /tmp/out) and prints the table.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# script -> its variants (the baseline, no --variant, comes first); the scripts' own `--variant`
# choices, listed in README.md with the expectation written before any measurement
WORKLOADS: dict[str, tuple[str, ...]] = {
    "sgd_groups": ("two_groups", "fused"),
    "compile_break": ("fullgraph", "eager"),
    "causal_mask": ("cached_mask", "is_causal"),
    "triton_colsum": ("split", "torch"),
    "misaligned_ffn": ("pad_ffn", "pad_all"),
    "unet_fp32": ("channels_last", "bf16", "bf16_cl"),
    "slow_collate": ("vector_collate", "workers", "both"),
    "decode_batch1": ("cuda_graph", "fused_proj"),
    "sync_logging": ("no_timing", "gpu_metrics"),
    "list_loop": ("padded", "compiled_loss"),
}
sys.path.insert(0, str(HERE.parent / "heldout"))
from time_variants import run_one as run_script  # noqa: E402  (the first set's runner: subprocess, timeout, parse)


def run_one(script: str, variant: str | None, timeout: float) -> dict[str, object]:
    """One subprocess `NAME.py [--variant V]`: its wall time, exit status and the printed mean step time."""
    return run_script(script, variant, timeout, here=HERE, flag="--variant")


def markdown(results: dict[str, dict[str, dict[str, object]]], skipped: list[str], elapsed: float) -> str:
    """The table: per workload and variant, each run's step time, the mean, and the speed-up on the baseline."""
    lines = ["# Second held-out set: unprofiled step times", "",
             f"{elapsed:.0f} s in all; mean step time over steps 4.. of each run (host wall clock, no profiler).", "",
             "| workload | variant | runs (ms) | mean ms | vs baseline | status |", "| --- | --- | --- | --- | --- | --- |"]
    for name, entries in results.items():
        base = entries.get("baseline", {}).get("mean_ms")
        for key, entry in entries.items():
            if key == "_fastest":
                continue
            runs = ", ".join(f"{m:.3f}" for m in entry["step_ms"])  # type: ignore[union-attr]
            mean = entry["mean_ms"]
            speed = f"{float(base) / float(mean):.2f}x" if base and mean else "-"  # type: ignore[arg-type]
            status = "; ".join(sorted({str(r["status"]) for r in entry["runs"]}))  # type: ignore[union-attr]
            lines.append(f"| {name} | {key} | {runs} | {mean if mean is not None else '-'} | {speed} | {status[:120]} |")
        lines.append(f"| {name} | **fastest** | | | | {entries['_fastest']['variant']} |")
    if skipped:
        lines += ["", "Skipped for the budget:", *[f"- {s}" for s in skipped]]
    return "\n".join(lines) + "\n"


def parse() -> argparse.Namespace:
    """The options: the time budget, the guess for an untimed run, one run's limit, the workloads."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag, default, what in (("--budget", 420.0, "seconds for all runs"),
                                ("--guess", 15.0, "expected seconds of a run not yet timed"),
                                ("--timeout", 90.0, "seconds at most for one run")):
        p.add_argument(flag, type=float, default=default, help=f"{what} (default {default:.0f})")
    p.add_argument("--only", nargs="*", choices=list(WORKLOADS), default=list(WORKLOADS), help="workloads (default: all)")
    return p.parse_args()


def main() -> None:
    args = parse()
    out = Path(os.environ.get("OUT", "/tmp/out"))
    out.mkdir(parents=True, exist_ok=True)
    names: list[str] = args.only
    pairs = [(n, v) for n in names for v in (None, *WORKLOADS[n])]
    results: dict[str, dict[str, dict[str, object]]] = {n: {} for n in names}
    start = time.perf_counter()
    skipped: list[str] = []

    def write() -> None:
        for name in names:
            for key, entry in results[name].items():
                if key == "_fastest":
                    continue
                ms = [float(r["step_ms"]) for r in entry["runs"] if "step_ms" in r]  # type: ignore[union-attr]
                entry["step_ms"] = ms
                entry["mean_ms"] = round(sum(ms) / len(ms), 4) if ms else None
            timed = {k: v["mean_ms"] for k, v in results[name].items() if k != "_fastest" and v["mean_ms"] is not None}
            results[name]["_fastest"] = {"variant": min(timed, key=timed.get) if timed else None}  # type: ignore[arg-type]
        elapsed = round(time.perf_counter() - start, 1)
        doc = {"budget_s": args.budget, "elapsed_s": elapsed, "skipped": skipped,
               "python": sys.version.split()[0], "workloads": results}
        (out / "heldout2_times.json").write_text(json.dumps(doc, indent=1))
        (out / "heldout2_times.md").write_text(markdown(results, skipped, elapsed))

    deadline = start + args.budget
    schedule = [(rnd, name, variant) for rnd in (1, 2) for name, variant in pairs]
    for rnd, name, variant in schedule:
        key = variant or "baseline"
        done: list[dict[str, object]] = results[name].setdefault(key, {"runs": []})["runs"]  # type: ignore[assignment]
        need = float(done[0]["wall_s"]) if done else args.guess  # type: ignore[arg-type]
        remaining = deadline - time.perf_counter()
        tag = f"round {rnd} {name:15s} {key:15s}"
        if need > remaining:
            skipped.append(f"round {rnd}: {name} {key} (expects {need:.0f} s, {remaining:.0f} s left)")
            print(f"{tag} skipped: expects {need:.0f} s, {remaining:.0f} s left", flush=True)
            continue
        done.append(run := run_one(name, variant, min(args.timeout, max(remaining, 1.0))))
        step = run.get("step_ms", float("nan"))
        print(f"{tag} {run['status']:8.80s} wall {run['wall_s']:6.1f} s step {step:9.3f} ms", flush=True)
        write()  # after every run, so a cut-off call still leaves its results
    write()
    print((out / "heldout2_times.md").read_text())


if __name__ == "__main__":
    main()
