"""HTA's temporal breakdown of GPU time: idle, compute and non-compute."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analyzers.kernels import CLASS, NOT_COMPUTE, classify
from tracekit.trace.intervals import busy_time_us, intervals
from tracekit.trace.model import RankTrace


@dataclass(frozen=True)
class TemporalBreakdown:
    """HTA-style temporal breakdown over a set of GPU activities (µs)."""

    kernel_time_us: float  # last end - first start
    idle_us: float  # kernel_time - union of all activities
    compute_us: float  # union of computation kernels (not communication, memcpy or memset)
    non_compute_us: float  # kernel_time - compute - idle

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def temporal_breakdown(rank: RankTrace, classes: pd.Series | None = None) -> TemporalBreakdown:
    """Idle / compute / non-compute time of `rank`'s GPU activities; `classes` are the kernel
    classes aligned with rank.gpu (default: from kernels.classify)."""
    gpu = rank.gpu
    if len(gpu) == 0:
        return TemporalBreakdown(0.0, 0.0, 0.0, 0.0)
    if classes is None:
        classes = classify(rank).table[CLASS]
    ts, end = intervals(gpu)
    kernel_time = float(end.max() - ts.min())
    busy = busy_time_us(ts, end)
    comp = ~np.isin(classes.to_numpy(dtype=object), NOT_COMPUTE)
    compute = busy_time_us(ts[comp], end[comp])
    idle = kernel_time - busy
    return TemporalBreakdown(kernel_time, idle, compute, kernel_time - compute - idle)
