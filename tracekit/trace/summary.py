"""Trace-level facts every command shows: GPU busy time, span, counts, top kernels."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

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
class RankSummary:
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


def summarize_rank(rank: RankTrace, top: int = 10) -> RankSummary:
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
    return RankSummary(
        rank=rank.rank, path=rank.path, device=rank.meta.device_name, platform=rank.meta.platform,
        events=int(sum(rank.counts.values())), kernels=len(kernels),
        memcpy=int((kinds == tables.KIND_MEMCPY).sum()), memset=int((kinds == tables.KIND_MEMSET).sum()),
        cpu_ops=own_ops(rank), launches=len(rank.launches),
        kernels_linked_to_launch=int((kernels[tables.GPU_LAUNCH] >= 0).sum()),
        kernels_linked_to_op=int((kernels[tables.GPU_OP] >= 0).sum()),
        gpu_busy_us=busy, span_us=span_us(rank), steps=len(rank.steps), skipped=rank.skipped,
        top_kernels=top_table)
