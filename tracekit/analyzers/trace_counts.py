"""What `tracekit info` shows of a trace: per rank counts, GPU busy time, span and top kernels, and their sum."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from tracekit.analyzers.graphs import GraphReplays
from tracekit.trace import tables
from tracekit.trace.intervals import busy_time_us
from tracekit.trace.model import RankTrace


def own_ops(rank: RankTrace) -> int:
    """CPU ops recorded in the rank's own file (not those copied from a graph capture trace)."""
    if tables.OP_ORIGIN in rank.ops:
        return int((rank.ops[tables.OP_ORIGIN] == "").sum())
    return len(rank.ops)


def span_us(rank: RankTrace) -> float:
    """Wall time covered by the rank's CPU and GPU events (first start to last end)."""
    starts, ends = [], []
    for table, ts, end in ((rank.gpu, tables.GPU_TS, tables.GPU_END), (rank.ops, tables.OP_TS, tables.OP_END),
                           (rank.runtime, tables.RT_TS, tables.RT_END), (rank.annotations, tables.AN_TS, tables.AN_END)):
        if len(table):
            starts.append(table[ts].min())
            ends.append(table[end].max())
    return float(max(ends) - min(starts)) if starts else 0.0


@dataclass(frozen=True)
class RankCounts:
    """Counts and times of one rank, as `tracekit info` shows them."""

    rank: int
    path: str
    device: str | None
    platform: str
    events: int
    kernels: int
    memcpy: int
    memset: int
    cpu_ops: int
    launches: int
    kernels_linked_to_launch: int
    kernels_linked_to_op: int
    gpu_busy_us: float
    span_us: float
    steps: int
    skipped: int
    top_kernels: pd.DataFrame  # name, count, time_us, share


def count_rank(rank: RankTrace, top: int = 10) -> RankCounts:
    """One rank's summary; busy time is the union of all GPU activity intervals."""
    gpu = rank.gpu
    kinds = gpu[tables.GPU_KIND]
    kernels = gpu[kinds == tables.KIND_KERNEL]
    busy = busy_time_us(gpu[tables.GPU_TS].to_numpy(), gpu[tables.GPU_END].to_numpy())
    grouped = kernels.groupby(tables.GPU_NAME, sort=False)[tables.GPU_DUR].agg(["count", "sum"])
    grouped = grouped.sort_values("sum", ascending=False).head(top)
    total = float(kernels[tables.GPU_DUR].sum()) or 1.0
    top_table = pd.DataFrame({"name": grouped.index.to_numpy(dtype=object),
                              "count": grouped["count"].to_numpy(),
                              "time_us": grouped["sum"].to_numpy(),
                              "share": grouped["sum"].to_numpy() / total})
    return RankCounts(
        rank=rank.rank, path=rank.path, device=rank.meta.device_name, platform=rank.meta.platform,
        events=int(sum(rank.counts.values())), kernels=len(kernels),
        memcpy=int((kinds == tables.KIND_MEMCPY).sum()), memset=int((kinds == tables.KIND_MEMSET).sum()),
        cpu_ops=own_ops(rank), launches=len(rank.launches),
        kernels_linked_to_launch=int((kernels[tables.GPU_LAUNCH] >= 0).sum()),
        kernels_linked_to_op=int((kernels[tables.GPU_OP] >= 0).sum()),
        gpu_busy_us=busy, span_us=span_us(rank), steps=len(rank.steps), skipped=rank.skipped,
        top_kernels=top_table)


INFO_SCHEMA = "tracekit.info/1"
COUNT_KEYS = ("events", "kernels", "memcpy", "memset", "cpu_ops", "launches",
              "kernels_linked_to_launch", "kernels_linked_to_op")


@dataclass(frozen=True)
class TraceCounts:
    """Every rank's counts (by rank), the warnings of reading them, and their CUDA-graph replays."""

    path: str  # the input as the user named it
    ranks: tuple[RankCounts, ...]
    warnings: tuple[str, ...] = ()
    graphs: tuple[GraphReplays, ...] = ()  # ranks with graph replays, by rank (replayed rows dropped)
    device: str | None = None  # the one device name every command shows; None: the trace's own

    @property
    def device_name(self) -> str | None:
        return self.device or next((s.device for s in self.ranks if s.device), None)

    @property
    def cpu_only(self) -> bool:
        return all(s.kernels + s.memcpy + s.memset == 0 for s in self.ranks)

    def total(self, key: str) -> int:
        """A COUNT_KEYS count summed over the ranks."""
        return int(sum(getattr(s, key) for s in self.ranks))

    @property
    def steps(self) -> int:
        return max(s.steps for s in self.ranks)

    def to_dict(self) -> dict[str, Any]:
        """The `info --json` object: totals over ranks at the top, one entry per rank below."""
        out: dict[str, Any] = {"schema": INFO_SCHEMA, "path": self.path, "ranks": [s.rank for s in self.ranks],
                               "device": self.device_name, "platform": self.ranks[0].platform}
        for key in COUNT_KEYS:
            out[key] = self.total(key)
        out["gpu_busy_us"] = round(sum(s.gpu_busy_us for s in self.ranks), 3)
        out["span_us"] = round(max(s.span_us for s in self.ranks), 3)
        out["steps"] = self.steps
        out["cpu_only"] = self.cpu_only
        out["skipped_events"] = sum(s.skipped for s in self.ranks)
        out["per_rank"] = [_rank_dict(s) for s in self.ranks]
        out["warnings"] = list(self.warnings)
        out["graphs"] = [g.to_dict() for g in self.graphs]
        return out


def _rank_dict(s: RankCounts) -> dict[str, Any]:
    d: dict[str, Any] = {"rank": s.rank, "path": s.path, "device": s.device, "platform": s.platform}
    d.update({k: getattr(s, k) for k in COUNT_KEYS})
    d.update(gpu_busy_us=round(s.gpu_busy_us, 3), span_us=round(s.span_us, 3), steps=s.steps,
             top_kernels=[{"name": r.name, "count": int(r.count), "time_us": round(float(r.time_us), 3),
                           "share": round(float(r.share), 4)} for r in s.top_kernels.itertuples()])
    return d

