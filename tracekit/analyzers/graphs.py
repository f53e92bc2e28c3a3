"""CUDA/HIP graph replays of a rank: each graph's launches and per-replay GPU time, and how many
replayed kernels got an op (from a capture trace, or inferred from an eager run)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from tracekit.trace import tables
from tracekit.trace.graphs import MATCH_INFERRED, MATCH_NAME, MATCH_ORDER
from tracekit.trace.model import RankTrace
from tracekit.units import plural

if TYPE_CHECKING:
    from tracekit.analyzers.costs.attribution import KernelCosts

MATCH_LABELS = {MATCH_NAME: "by capture (kernel name and grid agree)",
                MATCH_ORDER: "by capture (order and kind)",
                MATCH_INFERRED: "inferred from an eager run of the same kernels"}


@dataclass(frozen=True)
class GraphStats:
    """One graph: a distinct sequence of replayed GPU activities."""

    graph: int
    launches: int
    activities_per_replay: int
    gpu_us_per_replay: float  # summed activity durations of one replay (mean over replays)
    span_us_per_replay: float  # first start to last end of one replay (mean)
    matched_share: float  # share of its GPU time whose activities have an op
    flops_known_share: float | None  # share of its GPU time with known FLOPs (None without costs)
    source: str  # capture file (or this trace) its ops came from, "inferred", or ""
    kernels: tuple[dict[str, Any], ...] = ()  # its top activities by time: name, op, count, time_us

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "kernels": [dict(k) for k in self.kernels]}


@dataclass(frozen=True)
class GraphReplays:
    """Graph replays of one rank and how well they were joined to ops."""

    rank: int
    launches: int
    graphs: tuple[GraphStats, ...]
    activities: int  # replayed GPU activities
    gpu_us: float
    matched: dict[str, tuple[int, float]]  # MATCH_* -> (activities, GPU µs)
    flops_known_us: float | None
    replayed: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool), repr=False, compare=False)
    # ^ bool per GPU row of the rank (rank.gpu order): run by a graph replay

    @property
    def matched_count(self) -> int:
        return sum(n for n, _ in self.matched.values())

    @property
    def matched_us(self) -> float:
        return sum(us for _, us in self.matched.values())

    @property
    def matched_share(self) -> float:
        return self.matched_us / self.gpu_us if self.gpu_us > 0 else 0.0

    def line(self) -> str:
        """One line: what was replayed and what got an op, by what."""
        head = (f"graph replays: {plural(self.activities, 'GPU activity', 'GPU activities')} from "
                f"{plural(self.launches, 'launch', 'launches')} of {plural(len(self.graphs), 'graph')}; "
                f"{self.matched_count} ({100 * self.matched_share:.1f}% of "
                "their GPU time) have an op")
        parts = [f"{n} {MATCH_LABELS[k]}" for k, (n, _) in self.matched.items() if n]
        flops = (f"; FLOPs known for {100 * self.flops_known_us / self.gpu_us:.1f}% of their time"
                 if self.flops_known_us is not None and self.gpu_us > 0 else "")
        return head + (": " + ", ".join(parts) if parts else " (no capture trace matched: see --capture)") + flops

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "launches": self.launches, "activities": self.activities,
                "gpu_us": self.gpu_us, "matched": self.matched_count, "matched_us": self.matched_us,
                "matched_share": self.matched_share,
                "by": {k: {"activities": n, "gpu_us": us} for k, (n, us) in self.matched.items()},
                "flops_known_us": self.flops_known_us, "summary": self.line(),
                "graphs": [g.to_dict() for g in self.graphs]}


def graph_replays(rank: RankTrace, costs: KernelCosts | None = None) -> GraphReplays | None:
    """The graph replays of `rank`, None when it has none; `costs` adds the FLOP-known shares."""
    gpu = rank.gpu
    if tables.GPU_GRAPH not in gpu or not len(gpu):
        return None
    graph = gpu[tables.GPU_GRAPH].to_numpy()
    rows = np.flatnonzero(graph >= 0)
    if not len(rows):
        return None
    dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    how = gpu[tables.GPU_GRAPH_MATCH].to_numpy(dtype=object)
    launch = gpu[tables.GPU_LAUNCH].to_numpy()
    known = ~np.isnan(costs.table["flops"].to_numpy(dtype=float)) if costs is not None else None
    op = gpu[tables.GPU_OP].to_numpy()
    origin = rank.ops[tables.OP_ORIGIN].to_numpy(dtype=object) if tables.OP_ORIGIN in rank.ops else None
    op_names = rank.ops[tables.OP_NAME].to_numpy(dtype=object)
    stats = [_graph_stats(g, rows[graph[rows] == g], gpu, dur, how, launch, known, op, origin, rank.path,
                          op_names) for g in np.unique(graph[rows]).tolist()]
    matched = {}
    for k in MATCH_LABELS:
        sel = rows[how[rows] == k]
        matched[k] = (len(sel), float(dur[sel].sum()))
    return GraphReplays(
        rank=int(rank.rank), launches=len(np.unique(launch[rows])), graphs=tuple(stats),
        activities=len(rows), gpu_us=float(dur[rows].sum()), matched=matched,
        flops_known_us=float(dur[rows][known[rows]].sum()) if known is not None else None,
        replayed=graph >= 0)


TOP_KERNELS = 10  # activities listed per graph


def _top_kernels(rows: np.ndarray, gpu: pd.DataFrame, dur: np.ndarray, op: np.ndarray,
                 op_names: np.ndarray) -> tuple[dict[str, Any], ...]:
    names = gpu[tables.GPU_NAME].to_numpy(dtype=object)[rows]
    ops = [str(op_names[o]) if o >= 0 else "" for o in op[rows].tolist()]
    table: dict[tuple[str, str], list[float]] = {}
    for key, d in zip(zip(names.tolist(), ops, strict=True), dur[rows].tolist(), strict=True):
        acc = table.setdefault(key, [0, 0.0])
        acc[0] += 1
        acc[1] += d
    top = sorted(table.items(), key=lambda kv: -kv[1][1])[:TOP_KERNELS]
    return tuple({"name": k[0], "op": k[1] or None, "count": int(v[0]), "time_us": float(v[1])} for k, v in top)


def _graph_stats(g: int, rows: np.ndarray, gpu: pd.DataFrame, dur: np.ndarray, how: np.ndarray, launch: np.ndarray,
                 known: np.ndarray | None, op: np.ndarray, origin: np.ndarray | None, path: str,
                 op_names: np.ndarray) -> GraphStats:
    launches = np.unique(launch[rows])
    ts, end = gpu[tables.GPU_TS].to_numpy(dtype=float)[rows], gpu[tables.GPU_END].to_numpy(dtype=float)[rows]
    spans = [float(end[launch[rows] == x].max() - ts[launch[rows] == x].min()) for x in launches.tolist()]
    total = float(dur[rows].sum())
    matched = how[rows] != ""
    source = ""
    if matched.any():
        kinds = how[rows][matched]
        if (kinds == MATCH_INFERRED).all():
            source = MATCH_INFERRED
        else:
            r = int(op[rows][matched][0])
            src = str(origin[r]) if origin is not None and origin[r] else path
            source = Path(src).name
    return GraphStats(
        graph=g, launches=len(launches), activities_per_replay=round(len(rows) / len(launches)),
        gpu_us_per_replay=total / len(launches), span_us_per_replay=float(np.mean(spans)),
        matched_share=float(dur[rows][matched].sum()) / total if total > 0 else 0.0,
        flops_known_share=(float(dur[rows][known[rows]].sum()) / total if total > 0 else 0.0)
        if known is not None else None,
        source=source, kernels=_top_kernels(rows, gpu, dur, op, op_names))
