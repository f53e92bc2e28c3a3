"""Compare the memory view with what the recording script measured (benchmarks/gpu/memory_validate.py or memory_batches.py output).

usage: python benchmarks/validate_memory.py DIR

DIR holds memory_validate.json or memory_batches.json and the traces it names. For each profiled
batch size: the per-step peak allocated of tracekit's memory view (analyzers/memory.py, every
recorded step) against torch.cuda.max_memory_allocated() of the same step, and the batch-size
estimate of the view against the largest batch that trained without running out of memory. With
memory_batches.json also: the larger_batch suggestion of each trace (the multiple k it names and its
saving per step's worth of samples, as the report prices it) against the measured plain step times
at the batch and at k× the batch. Prints markdown tables.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import tracekit
from tracekit.analyzers.memory import memory_view
from tracekit.analyzers.step_plan import plan_steps
from tracekit.analyzers.step_selection import StepSelection
from tracekit.analyzers.windows import SCOPE_INFERRED
from tracekit.pipeline.local import analyse_file

RESULTS = ("memory_batches.json", "memory_validate.json")


def load(folder: Path) -> dict:
    """The script's results in `folder` (the first of RESULTS there)."""
    for name in RESULTS:
        if (folder / name).exists():
            return json.loads((folder / name).read_text())
    raise SystemExit(f"validate_memory: {folder}: none of {', '.join(RESULTS)} there")


def rows(folder: Path) -> tuple[dict, list[dict]]:
    """(the script's results, one row per profiled batch: measured and tracekit's per-step peaks)."""
    doc = load(folder)
    out = []
    runs = [(run, False) for run in doc["profiled"]] + [(run, True) for run in doc.get("tracekit", [])]
    for run, via_tracekit in runs:
        rank = tracekit.load_trace(folder / run["trace"]).rank()
        plan = plan_steps(rank, StepSelection.of("all"))
        view = memory_view(rank, plan)
        if view is None:
            continue
        peaks = [s.peak_allocated for s in view.steps]
        measured = run["max_memory_allocated"]
        n = min(len(peaks), len(measured))
        # the script marks ProfilerStep#i around measurement i; tracekit profile's steps follow
        # optimizer.step() and skip its warm-up, and steps inferred from repeated ops (a trace without
        # step marks) start wherever the repetition does: there the largest of each side is compared
        inferred = plan.windows.scope == SCOPE_INFERRED
        whole = via_tracekit or inferred
        pairs = [(max(peaks), max(measured))] if whole else list(zip(peaks[-n:], measured[-n:], strict=True))
        errors = [abs(p - m) / m for p, m in pairs if m]
        out.append({"batch": run["batch"], "trace": run["trace"], "steps": "inferred" if inferred else n, "peaks": [p for p, _ in pairs],
                    "measured": [m for _, m in pairs], "max_error": max(errors) if errors else None,
                    "reserved": view.peak_reserved, "factor": view.batch_factor, "device_memory": view.device_memory})
    return doc, out


def throughput(folder: Path, doc: dict) -> list[dict]:
    """Per profiled batch: the report's verdict and larger_batch suggestion (steady steps, priced by the
    execution model), and the plain step times the script measured at the batch and at k× it."""
    plain = {r["batch"]: r["step_ms"] for r in doc.get("plain", [])}
    out = []
    for run in doc["profiled"]:
        result = analyse_file(folder / run["trace"])
        s = next((x for x in result.suggestions if x.id == "larger_batch"), None)
        k = int(s.evidence[0]["batch_multiple"]) if s is not None else None  # type: ignore[arg-type]
        b = run["batch"]
        kk = k or 2  # silent: what twice the batch measured (the rule's smallest multiple)
        measured = None
        if b in plain and kk * b in plain:
            measured = 1.0 - plain[kk * b] / kk / plain[b]  # per-sample time saved, share of the step at b
        out.append({"batch": b, "verdict": result.analysis.verdict, "cause": result.analysis.cause, "k": k, "kk": kk,
                    "predicted": s.saving_pct / 100 if s is not None else None, "whatif": s.whatif if s else "",
                    "plain_ms": plain.get(b), "plain_k_ms": plain.get(kk * b), "measured": measured})
    return out


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
    if not doc.get("plain"):
        return
    print("\n| batch | verdict | larger_batch k | predicted per-sample saving | plain step at b | plain step at k·b | "
          "measured per-sample saving |")
    print("|---|---|---|---|---|---|---|")
    for r in throughput(args.folder, doc):
        def ms(v: float | None) -> str:
            return f"{v:.2f} ms" if v is not None else "-"

        def pct(v: float | None) -> str:
            return f"{100 * v:.0f} %" if v is not None else "-"
        cause = f" ({r['cause']})" if r["cause"] else ""
        named = r["k"] or f"silent (measured at {r['kk']}×)"
        print(f"| {r['batch']} | {r['verdict']}{cause} | {named} | {pct(r['predicted'])} | "
              f"{ms(r['plain_ms'])} | {ms(r['plain_k_ms'])} | {pct(r['measured'])} |")


if __name__ == "__main__":
    main()
