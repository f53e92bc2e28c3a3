"""Compare the memory view with what the recording script measured (benchmarks/gpu/memory_validate.py output).

usage: python benchmarks/validate_memory.py DIR

DIR holds memory_validate.json and the traces it names. For each profiled batch size: the per-step
peak allocated of tracekit's memory view (analyzers/memory.py, every recorded step) against
torch.cuda.max_memory_allocated() of the same step, and the batch-size estimate of the view against
the largest batch that trained without running out of memory. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import tracekit
from tracekit.analyzers.memory import memory_view
from tracekit.analyzers.step_plan import plan_steps
from tracekit.analyzers.step_selection import StepSelection


def rows(folder: Path) -> tuple[dict, list[dict]]:
    """(the script's results, one row per profiled batch: measured and tracekit's per-step peaks)."""
    doc = json.loads((folder / "memory_validate.json").read_text())
    out = []
    runs = [(run, False) for run in doc["profiled"]] + [(run, True) for run in doc.get("tracekit", [])]
    for run, via_tracekit in runs:
        rank = tracekit.load_trace(folder / run["trace"]).rank()
        view = memory_view(rank, plan_steps(rank, StepSelection.of("all")))
        if view is None:
            continue
        peaks = [s.peak_allocated for s in view.steps]
        measured = run["max_memory_allocated"]
        n = min(len(peaks), len(measured))
        # the script's own profiler marks a step per measurement; tracekit profile's steps follow
        # optimizer.step() and skip its warm-up, so there the largest of each side is compared
        pairs = [(max(peaks), max(measured))] if via_tracekit else list(zip(peaks[-n:], measured[-n:], strict=True))
        errors = [abs(p - m) / m for p, m in pairs if m]
        out.append({"batch": run["batch"], "trace": run["trace"], "steps": n, "peaks": [p for p, _ in pairs],
                    "measured": [m for _, m in pairs], "max_error": max(errors) if errors else None,
                    "reserved": view.peak_reserved, "factor": view.batch_factor, "device_memory": view.device_memory})
    return doc, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    args = ap.parse_args()
    doc, table = rows(args.folder)
    largest = doc["oom_search"]["largest_fitting"]
    print(f"{doc['device']}, {doc['total_memory'] / 1e9:.1f} GB, torch {doc['torch']}; model {doc['model']}")
    print(f"largest batch that trains: {largest} (smallest that runs out of memory: {doc['oom_search']['smallest_oom']})\n")
    print("| trace | batch | steps | peak allocated per step (tracekit) | max_memory_allocated | largest error | "
          "estimate: batch × factor | estimate / largest fitting |")
    print("|---|---|---|---|---|---|---|---|")
    for r in table:
        est = r["batch"] * r["factor"] if r["factor"] is not None else None
        print(f"| {r['trace']} | {r['batch']} | {r['steps']} | {', '.join(f'{p / 1e9:.3f}' for p in r['peaks'])} GB | "
              f"{', '.join(f'{m / 1e9:.3f}' for m in r['measured'])} GB | "
              f"{100 * r['max_error']:.2f} % | {f'{est:.0f}' if est is not None else '-'} | "
              f"{f'{est / largest:.2f}' if est is not None and largest else '-'} |")


if __name__ == "__main__":
    main()
