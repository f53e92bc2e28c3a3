"""The host gap before each runtime call on its thread, and the spans of host time a rule cuts before calls: shared by the detectors whose change removes host work that precedes launches (triton_rebuild, attention_plans, grad_recording)."""

from __future__ import annotations

import numpy as np

from tracekit.trace import tables
from tracekit.trace.model import RankTrace


def call_gaps(rank: RankTrace) -> np.ndarray:
    """Per rank.runtime row: the host gap before it on its thread, from the latest end of the thread's
    earlier runtime calls (0 for the thread's first), µs."""
    rt = rank.runtime
    ts, end = rt[tables.RT_TS].to_numpy(dtype=float), rt[tables.RT_END].to_numpy(dtype=float)
    tid = rt[tables.RT_TID].to_numpy()
    out = np.zeros(len(rt))
    for t in np.unique(tid).tolist():
        rows = np.flatnonzero(tid == t)
        rows = rows[np.argsort(ts[rows], kind="stable")]
        prev = np.r_[ts[rows[:1]], np.maximum.accumulate(end[rows])[:-1]]
        out[rows] = np.clip(ts[rows] - prev, 0.0, None)
    return out


def host_spans(rank: RankTrace, cut_us: np.ndarray) -> np.ndarray:
    """(start, end) rows of the host time `cut_us` (per rank.runtime row) ends at each call's start."""
    hit = np.flatnonzero(cut_us > 0)
    ts = rank.runtime[tables.RT_TS].to_numpy(dtype=float)[hit]
    return np.stack((ts - cut_us[hit], ts), axis=1) if len(hit) else np.zeros((0, 2))
