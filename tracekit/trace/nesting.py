"""Which interval encloses which, on each thread: the answer of a stack sweep, in vectorised passes."""

from __future__ import annotations

import numpy as np
import pandas as pd


def group_codes(*keys: np.ndarray) -> np.ndarray:
    """One int per row for the combination of `keys` (thread ids: ints, or objects such as strings)."""
    out = np.zeros(len(keys[0]) if keys else 0, dtype=np.int64)
    for key in keys:
        codes, uniques = pd.factorize(key, use_na_sentinel=False)
        out = out * max(len(uniques), 1) + codes
    return out if len(keys) < 2 else pd.factorize(out)[0].astype(np.int64)


def enclosing(ts: np.ndarray, reach: np.ndarray, group: np.ndarray) -> np.ndarray | None:
    """Per interval, the one a stack sweep over each group's intervals in row order finds enclosing it
    (-1: none), where the sweep pops the intervals whose `reach` (their end, or end plus a tolerance)
    is below the next start. With starts in order within each group this is the latest earlier
    interval of the group that reaches the start: any interval pushed after it has been popped, and it
    cannot have been, its reach being past every start so far. Found by jumping from the previous
    interval to its current estimate while that one falls short (every interval skipped falls short of
    the skipping start, so of every later one). None when starts are out of order within a group or a
    time is not a number: the caller sweeps."""
    n = len(ts)
    if n == 0:
        return np.full(0, -1, dtype=np.int64)
    order = np.argsort(group, kind="stable")  # each group's intervals together, in row order
    t, r = ts[order], reach[order]
    same = np.zeros(n, dtype=bool)
    same[1:] = group[order][1:] == group[order][:-1]
    if np.isnan(t).any() or np.isnan(r).any() or (t[1:][same[1:]] < t[:-1][same[1:]]).any():
        return None
    est = np.where(same, np.arange(n) - 1, -1)  # positions in `order`; -1: none
    active = np.flatnonzero(est >= 0)
    while len(active):
        active = active[r[est[active]] < t[active]]
        est[active] = est[est[active]]
        active = active[est[active] >= 0]
    out = np.full(n, -1, dtype=np.int64)
    found = est >= 0
    out[order[found]] = order[est[found]]
    return out


def depth_of(parent: np.ndarray) -> np.ndarray:
    """Nesting depth of each interval (0: top level) from its parent row, by pointer jumping: each pass
    adds the depth counted at the row's current ancestor and jumps to that one's ancestor, so a chain
    n deep takes log2(n) passes over the rows still climbing (one level per pass was n passes)."""
    depth = (parent >= 0).astype(np.int64)
    up = np.asarray(parent, dtype=np.int64).copy()
    rows = np.flatnonzero(up >= 0)
    for _ in range(64):  # 2**64 levels: any forest; a parent cycle (never built) stops here
        rows = rows[up[rows] >= 0]
        if not len(rows):
            break
        above = up[rows]
        depth[rows] += depth[above]  # right-hand sides read before any row of this pass is written
        up[rows] = up[above]
    return depth
