"""GPU time arithmetic: interval unions (also inside windows) and HTA's temporal breakdown."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from tracekit.trace.summary import busy_time_us, merge_intervals  # noqa: F401  (re-exported)


def busy_in_windows(starts: np.ndarray, ends: np.ndarray, w0: np.ndarray, w1: np.ndarray) -> np.ndarray:
    """Length of the union (given merged) that falls inside each window [w0, w1]."""
    if len(starts) == 0:
        return np.zeros(len(w0))
    lengths = ends - starts
    before = np.concatenate([[0.0], np.cumsum(lengths)])

    def covered(t: np.ndarray) -> np.ndarray:  # busy time before t
        k = np.searchsorted(starts, t, side="right") - 1
        kk = np.maximum(k, 0)
        part = np.clip(t - starts[kk], 0.0, lengths[kk])
        return np.where(k >= 0, before[kk] + part, 0.0)

    return np.maximum(covered(w1) - covered(w0), 0.0)


def intervals(table: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) of a table's events in µs after the trace origin (exact to the ns: the loader
    parses timestamps exactly and stores them relative to `meta.origin_us`)."""
    if len(table) == 0:
        return np.empty(0), np.empty(0)
    return table["ts"].to_numpy(dtype=float), table["end"].to_numpy(dtype=float)


@dataclass(frozen=True)
class TemporalBreakdown:
    """HTA-style temporal breakdown over a set of GPU activities (µs)."""

    kernel_time_us: float  # last end - first start
    idle_us: float  # kernel_time - union of all activities
    compute_us: float  # union of computation kernels (not communication, memcpy or memset)
    non_compute_us: float  # kernel_time - compute - idle

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def temporal_breakdown(rank, classes: pd.Series | None = None) -> TemporalBreakdown:
    """Idle / compute / non-compute time of `rank`'s GPU activities; `classes` are the kernel
    classes aligned with rank.gpu (default: from kernels.classify)."""
    gpu = rank.gpu
    if len(gpu) == 0:
        return TemporalBreakdown(0.0, 0.0, 0.0, 0.0)
    if classes is None:
        from tracekit.analyzers.kernels import CLASS, classify

        classes = classify(rank).table[CLASS]
    ts, end = intervals(gpu)
    kernel_time = float(end.max() - ts.min())
    busy = busy_time_us(ts, end)
    comp = ~np.isin(classes.to_numpy(dtype=object), ("communication", "memcpy", "memset"))
    compute = busy_time_us(ts[comp], end[comp])
    idle = kernel_time - busy
    return TemporalBreakdown(kernel_time, idle, compute, kernel_time - compute - idle)
