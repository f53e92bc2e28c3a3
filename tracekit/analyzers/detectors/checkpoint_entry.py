"""The host time of entering each checkpointed region in the forward pass: the unrecorded work around `_NoopSaveInputs`, priced per runtime call.

`checkpoint(block, x, use_reentrant=False)` records one autograd function op per call,
`_NoopSaveInputs`, between the previous block's last op and the block's first. Around it the checkpoint
does Python the trace does not name: it stashes the CPU and CUDA RNG states and the autocast state
(a tiny `aten::empty`, a `cudaStreamIsCapturing`), enters its saved-tensor hooks, and on the way out
of the previous block left them. Without checkpointing the blocks follow one another with the loop's
usual gap between two ops. So the entry costs the stretch from the end of the previous sibling op of
some length (tiny allocation ops are the checkpoint's own) to the start of the op after
`_NoopSaveInputs`, less the median gap between sibling ops on that thread. That time lies in the host
gaps before the runtime calls inside the stretch and before the first one issued at or after that
next op; per rank.runtime row: the µs of the stretch in the gap before it, less the usual gap's
share (0 elsewhere). Entries under a backward node (the re-run's own) are left out: the re-run goes
with its calls."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pandas as pd

from tracekit.trace import tables
from tracekit.trace.model import RankTrace

ENTRY_OP = "_NoopSaveInputs"
TINY_US = 10.0  # a sibling op shorter than this before the entry is the checkpoint's own (RNG state)
MAX_DEPTH = 256  # ancestors walked at most
MAX_CALLS = 16  # runtime calls inside one entry's stretch at most (the RNG-state capture makes one or two)


def _in_backward(row: int, parent: list[int], is_node: np.ndarray) -> bool:
    p, hops = parent[row], 0
    while p >= 0 and hops < MAX_DEPTH:
        if is_node[p]:
            return True
        p, hops = parent[p], hops + 1
    return False


def _groups(keys: tuple[np.ndarray, ...], ts: np.ndarray, rows: np.ndarray) -> dict[tuple[int, ...], np.ndarray]:
    """`rows` split by their integer `keys` (one array per key level, per row of the whole table),
    each group sorted by `ts`: one sort, not a scan per group."""
    if not len(rows):
        return {}
    cols = [k[rows] for k in keys]
    order = np.lexsort((ts[rows], *reversed(cols)))
    rows, cols = rows[order], [c[order] for c in cols]
    change = np.flatnonzero(np.any([c[1:] != c[:-1] for c in cols], axis=0)) + 1
    bounds = np.concatenate([[0], change, [len(rows)]])
    return {tuple(int(c[a]) for c in cols): rows[a:b] for a, b in pairwise(bounds.tolist())}


def entry_cuts(rank: RankTrace, is_node: np.ndarray) -> np.ndarray:
    """µs per rank.runtime row to cut from the host gap before it (module docstring); `is_node`:
    per op row, a backward node. Linear in the ops and calls (one sort each; a stretch holding more
    than MAX_CALLS calls is no checkpoint's entry)."""
    ops, rt = rank.ops, rank.runtime
    cut = np.zeros(len(rt))
    if not len(ops) or not len(rt):
        return cut
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    par = ops[tables.OP_PARENT].to_numpy(dtype=np.int64).tolist()
    entries = [e for e in np.flatnonzero(names == ENTRY_OP).tolist() if not _in_backward(e, par, is_node)]
    if not entries:
        return cut
    parent = ops[tables.OP_PARENT].to_numpy(dtype=np.int64)
    ts, end = ops[tables.OP_TS].to_numpy(dtype=float), ops[tables.OP_END].to_numpy(dtype=float)
    codes, _ = pd.factorize(np.concatenate([ops[tables.OP_TID].to_numpy(dtype=object),
                                            rt[tables.RT_TID].to_numpy(dtype=object)]))
    tid, rt_tid = codes[:len(ops)], codes[len(ops):]
    rt_ts, rt_end = rt[tables.RT_TS].to_numpy(dtype=float), rt[tables.RT_END].to_numpy(dtype=float)
    wanted = np.isin(parent, np.unique(parent[entries])) & np.isin(tid, np.unique(tid[entries]))
    siblings = _groups((parent, tid), ts, np.flatnonzero(wanted))
    calls = _groups((rt_tid,), rt_ts, np.flatnonzero(np.isin(rt_tid, np.unique(tid[entries]))))
    keys = list(siblings)
    group, position = np.full(len(ops), -1), np.full(len(ops), -1)
    for g, key in enumerate(keys):
        group[siblings[key]], position[siblings[key]] = g, np.arange(len(siblings[key]))
    prep: dict[tuple[int, ...], tuple[np.ndarray, float]] = {}
    sorted_ts: dict[int, np.ndarray] = {}
    for e in entries:
        key, k = keys[group[e]], int(position[e])
        sib = siblings[key]
        if key not in prep:
            long = np.where(end[sib] - ts[sib] >= TINY_US, np.arange(len(sib)), -1)
            gaps = ts[sib[1:]] - end[sib[:-1]]
            prep[key] = (np.maximum.accumulate(long), float(np.median(np.maximum(gaps, 0.0))) if len(gaps) else 0.0)
        last_long, usual = prep[key]
        if k == 0 or k + 1 >= len(sib) or last_long[k - 1] < 0:
            continue
        t0, t1 = float(end[sib[last_long[k - 1]]]), float(ts[sib[k + 1]])
        mine = calls.get((int(tid[e]),))
        if t1 - t0 <= usual or mine is None:
            continue
        if int(tid[e]) not in sorted_ts:
            sorted_ts[int(tid[e])] = rt_ts[mine]
        call_ts = sorted_ts[int(tid[e])]
        first = int(np.searchsorted(call_ts, t1, "left"))
        lo = int(np.searchsorted(call_ts, t0, "right"))
        if first >= len(mine) or first - lo > MAX_CALLS:
            continue
        # the stretch's time lies in the gaps before the calls inside it and the first one after it
        span = mine[lo:first + 1]
        gap_from = np.where(np.arange(lo, first + 1) > 0, rt_end[mine[np.maximum(np.arange(lo, first + 1) - 1, 0)]],
                            -np.inf)
        inside = np.minimum(rt_ts[span], t1) - np.maximum(gap_from, t0)
        cut[span] += np.maximum(inside, 0.0) * (1.0 - usual / (t1 - t0))
    return cut
