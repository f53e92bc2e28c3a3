"""Graph breaks of one rank as the what-if transforms see them: the traced stretches between two compiled graphs, and how much of each call's host gap lies inside one."""

from __future__ import annotations

import dataclasses

import numpy as np

from tracekit.model.outlook import StepModel


@dataclasses.dataclass(frozen=True)
class Breaks:
    """Graph breaks of one rank: the traced stretches [`starts[i]`, `ends[i]`) between two compiled
    graphs on the breaking thread (`on_thread`: bool per rank.runtime row, the row runs on it)."""

    on_thread: np.ndarray
    starts: np.ndarray
    ends: np.ndarray

    def cover(self, step: StepModel) -> tuple[np.ndarray, np.ndarray]:
        """Per call of the step: the share of its traced host gap inside a break (0..1), and whether
        the call itself starts inside one."""
        g = step.graph
        share, inside = np.zeros(g.n_calls), np.zeros(g.n_calls, dtype=bool)
        if not len(self.starts) or not g.n_calls or not len(self.on_thread):
            return share, inside
        ts = g.call_ts_us
        mine = self.on_thread[g.call_row]
        lo_gap = ts - g.call_gap_us
        covered = np.zeros(g.n_calls)
        for lo, hi in zip(self.starts.tolist(), self.ends.tolist(), strict=True):
            covered += np.where(mine, np.clip(np.minimum(ts, hi) - np.maximum(lo_gap, lo), 0.0, None), 0.0)
            inside |= mine & (ts >= lo) & (ts < hi)
        share = np.where(g.call_gap_us > 0, np.minimum(covered / np.maximum(g.call_gap_us, 1e-9), 1.0), 0.0)
        return share, inside
