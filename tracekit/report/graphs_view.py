"""The report's CUDA-graph section: each graph's launches, per-replay GPU time and where its ops came from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tracekit.units import fmt_us


@dataclass(frozen=True)
class GraphRow:
    graph: str
    launches: str
    activities: str  # per replay
    gpu_time: str  # per replay
    span: str  # per replay
    with_op: str
    with_flops: str
    source: str
    kernels: tuple[tuple[str, str, str, str], ...]  # (name, op, count, time)


@dataclass(frozen=True)
class GraphSection:
    summary: str
    rows: tuple[GraphRow, ...]


def _pct(x: Any) -> str:
    return f"{100 * x:.1f}%" if isinstance(x, (int, float)) else "–"


def graph_section(analysis: Mapping[str, Any]) -> GraphSection | None:
    """The section for one rank's analysis dict (tracekit.analysis/1), None without graph replays."""
    docs = analysis.get("graphs") or ()
    if not docs:
        return None
    rows = []
    for doc in docs:
        for g in doc.get("graphs") or ():
            kernels = tuple((str(k["name"]), str(k["op"] or "–"), str(k["count"]), fmt_us(k["time_us"]))
                            for k in g.get("kernels") or ())
            rows.append(GraphRow(
                graph=f"#{g['graph']}", launches=str(g["launches"]), activities=str(g["activities_per_replay"]),
                gpu_time=fmt_us(g["gpu_us_per_replay"]), span=fmt_us(g["span_us_per_replay"]),
                with_op=_pct(g["matched_share"]), with_flops=_pct(g.get("flops_known_share")),
                source=str(g["source"] or "–"), kernels=kernels))
    return GraphSection(summary=" · ".join(str(d.get("summary", "")) for d in docs), rows=tuple(rows))
