"""Interval arithmetic on [start, end) arrays: union, busy time, busy time inside windows.

The one place tracekit computes interval unions (trace summary, launch overhead, host-side
detectors, temporal breakdown all call it)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.trace import tables


def merge_intervals(ts: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of [ts, end) intervals as sorted, disjoint (starts, ends)."""
    if len(ts) == 0:
        return np.empty(0), np.empty(0)
    order = np.argsort(ts, kind="stable")
    s, e = ts[order], np.maximum(end[order], ts[order])
    run_end = np.maximum.accumulate(e)  # only grows, so a block ends at its last row's value
    first = np.ones(len(s), dtype=bool)
    first[1:] = s[1:] > run_end[:-1]
    starts = np.flatnonzero(first)
    last = np.append(starts[1:] - 1, len(s) - 1)
    return s[starts], run_end[last]


def busy_time_us(starts: np.ndarray, ends: np.ndarray) -> float:
    """Length of the union of [start, end) intervals, in the units given."""
    s, e = merge_intervals(starts, ends)
    return float((e - s).sum())


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
    parses timestamps exactly and stores them relative to `meta.origin_us`). Every event table of
    a RankTrace names these columns alike (tables.GPU_TS == tables.OP_TS == ... == "ts")."""
    if len(table) == 0:
        return np.empty(0), np.empty(0)
    return table[tables.GPU_TS].to_numpy(dtype=float), table[tables.GPU_END].to_numpy(dtype=float)
