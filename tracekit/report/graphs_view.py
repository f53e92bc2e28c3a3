"""The report's CUDA-graph section: each graph's launches, per-replay GPU time and where its ops came from."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tracekit.analyzers.graphs import GraphReplays
from tracekit.report.names import hover_name, short_name
from tracekit.units import DASH, fmt_pct, fmt_time


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
    kernels: tuple[tuple[str, str, str, str, str], ...]  # (short name, op, count, time, full name)


@dataclass(frozen=True)
class GraphSection:
    summary: str
    rows: tuple[GraphRow, ...]


def _pct(x: float | None) -> str:
    return DASH if x is None else fmt_pct(x)


def graph_section(replays: Sequence[GraphReplays]) -> GraphSection | None:
    """The section for one rank's graph replays (RankAnalysis.graphs), None without any."""
    if not replays:
        return None
    rows = []
    for doc in replays:
        for g in doc.graphs:
            kernels = tuple((short_name(str(k["name"])), str(k["op"] or DASH), str(k["count"]),
                             fmt_time(k["time_us"]), hover_name(str(k["name"]))) for k in g.kernels)
            rows.append(GraphRow(
                graph=f"#{g.graph}", launches=str(g.launches), activities=str(g.activities_per_replay),
                gpu_time=fmt_time(g.gpu_us_per_replay), span=fmt_time(g.span_us_per_replay),
                with_op=_pct(g.matched_share), with_flops=_pct(g.flops_known_share),
                source=g.source or DASH, kernels=kernels))
    return GraphSection(summary=" · ".join(d.line() for d in replays), rows=tuple(rows))
