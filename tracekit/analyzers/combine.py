"""Combine per-rank analysis documents (tracekit.analysis/1) into one, without any rank's event tables."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analyzers.analysis import KERNEL_COLUMNS, SCHEMA, regroup_kernel_rows
from tracekit.analyzers.launch import LaunchTotals, QueueStats
from tracekit.jsonsafe import plain

QUANTILES = np.linspace(0.0, 1.0, 1001)  # queue-delay sketch carried per rank: 0.1 % steps


def queue_sketch(values: np.ndarray) -> tuple[tuple[float, ...], int]:
    """(quantiles at QUANTILES, count) of one rank's queue delays: what the merge needs of them."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if not len(v):
        return (), 0
    return tuple(float(x) for x in np.quantile(v, QUANTILES)), len(v)


def merged_queue(sketches: Sequence[tuple[tuple[float, ...], int]]) -> QueueStats:
    """Queue-delay percentiles over several ranks from their sketches (each quantile point weighted
    by its rank's count / 1001: exact at 0 % and 100 %, within 0.1 % of rank elsewhere)."""
    parts = [(np.asarray(q), n) for q, n in sketches if n]
    if not parts:
        return QueueStats.of(np.empty(0))
    values = np.concatenate([q for q, _ in parts])
    weights = np.concatenate([np.full(len(q), n / len(q)) for q, n in parts])
    order = np.argsort(values, kind="stable")
    values, cum = values[order], np.cumsum(weights[order])
    total = cum[-1]

    def pct(p: float) -> float:
        return float(values[min(np.searchsorted(cum, p * total), len(values) - 1)])

    return QueueStats(count=int(sum(n for _, n in parts)), p50_us=pct(0.5), p90_us=pct(0.9),
                      max_us=float(values.max()))


def _summed(records: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """Class or library rows summed over ranks, share recomputed, largest time first."""
    time: dict[str, float] = {}
    count: dict[str, int] = {}
    for r in records:
        time[r[key]] = time.get(r[key], 0.0) + float(r["time_us"])
        count[r[key]] = count.get(r[key], 0) + int(r["count"])
    total = sum(time.values()) or 1.0
    rows = [{key: k, "time_us": t, "count": count[k], "share": t / total} for k, t in time.items()]
    return sorted(rows, key=lambda r: (-r["time_us"], r[key]))


def combined_doc(path: str, docs: Sequence[dict[str, Any]], totals: Sequence[LaunchTotals],
                 queues: Sequence[tuple[tuple[float, ...], int]], device: Any,
                 warnings: Sequence[str]) -> dict[str, Any]:
    """The tracekit.analysis/1 document of several ranks from each rank's own document.

    Same fields as `analyze(trace).to_dict()` of a multi-rank trace: totals summed (rank-µs), class
    and library rows summed, kernel rows regrouped; `suggestions` holds every rank's suggestions
    with a `rank` key (the cross-rank ones have none), largest saving first."""
    total = sum(totals, LaunchTotals())
    steps = [s for d in docs for s in d.get("steps") or ()]
    classes = _summed([c for d in docs for c in d.get("classes") or ()], "class")
    libraries = _summed([c for d in docs for c in d.get("libraries") or ()], "library")
    rows = pd.DataFrame.from_records([r for d in docs for r in d.get("kernels") or ()],
                                     columns=list(KERNEL_COLUMNS))  # one table of every rank's rows
    for col in ("count", "time_us", "flops", "bytes"):
        rows[col] = pd.to_numeric(rows[col], errors="coerce")
    kernels = regroup_kernel_rows(rows, device)
    queue = merged_queue(queues)
    chosen = {(x["rank"], x["step"]) for d in docs for x in d.get("steady_steps") or ()}
    per_step = [s["kernels"] for s in steps if s.get("kernels") is not None
                and (not chosen or (s["rank"], s["step"]) in chosen)]
    first = docs[0].get("summary") or {}
    tokens = first.get("tokens_per_step")
    median = float(np.median(per_step)) if per_step else None
    scopes = sorted({r.get("scope") for d in docs for r in d.get("ranks") or ()} - {None})
    other = next((c["share"] for c in classes if c["class"] == "other"), 0.0)
    summary = {**total.to_dict(), "scope": scopes[0] if len(scopes) == 1 else "mixed",
               "steps_mode": first.get("steps_mode", "steady"),
               "steps_total": sum((d.get("summary") or {}).get("steps_total") or 0 for d in docs),
               "kernels_per_step_median": median, "tokens_per_step": tokens,
               "kernels_per_token": median / tokens if median is not None and tokens else None,
               "queue_p50_us": queue.p50_us, "queue_p90_us": queue.p90_us, "queue_max_us": queue.max_us,
               "other_share": other}
    suggestions = [{**s, "rank": d["ranks"][0]["rank"]} for d in docs for s in d.get("suggestions") or ()
                   if d.get("ranks")]
    handled = {"schema", "trace", "ranks", "device", "summary", "steps", "classes", "libraries", "kernels",
               "warnings", "suggestions"}
    per_rank_lists = {k: [x for d in docs for x in d.get(k) or ()] for d0 in docs[:1] for k, v in d0.items()
                      if k not in handled and isinstance(v, list)}  # e.g. steady_steps, excluded_steps
    return {  # the ranks' documents are JSON-safe already (Analysis.to_dict): only new values are cleaned
        **per_rank_lists,
        "schema": SCHEMA, "trace": path,
        "ranks": [r for d in docs for r in d.get("ranks") or ()],
        "device": next((d["device"] for d in docs if d.get("device")), None),
        "summary": plain(summary), "steps": steps, "classes": classes, "libraries": libraries,
        "kernels": plain([dict(zip(KERNEL_COLUMNS, row, strict=True)) for row in
                          kernels[list(KERNEL_COLUMNS)].itertuples(index=False, name=None)]),
        "warnings": list(dict.fromkeys(warnings)),
        "suggestions": sorted(suggestions, key=lambda s: -(s.get("saving_us") or 0.0)),
    }
