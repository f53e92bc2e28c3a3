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

import numpy as np

from tracekit.trace import tables
from tracekit.trace.model import RankTrace

ENTRY_OP = "_NoopSaveInputs"
TINY_US = 10.0  # a sibling op shorter than this before the entry is the checkpoint's own (RNG state)
MAX_DEPTH = 256  # ancestors walked at most


def _in_backward(row: int, parent: list[int], is_node: np.ndarray) -> bool:
    p, hops = parent[row], 0
    while p >= 0 and hops < MAX_DEPTH:
        if is_node[p]:
            return True
        p, hops = parent[p], hops + 1
    return False


def entry_cuts(rank: RankTrace, is_node: np.ndarray) -> np.ndarray:
    """µs per rank.runtime row to cut from the host gap before it (module docstring); `is_node`:
    per op row, a backward node."""
    ops, rt = rank.ops, rank.runtime
    cut = np.zeros(len(rt))
    if not len(ops) or not len(rt):
        return cut
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    entries = np.flatnonzero(names == ENTRY_OP)
    if not len(entries):
        return cut
    parent = ops[tables.OP_PARENT].to_numpy(dtype=np.int64)
    par = parent.tolist()
    ts, end = ops[tables.OP_TS].to_numpy(dtype=float), ops[tables.OP_END].to_numpy(dtype=float)
    tid = ops[tables.OP_TID].to_numpy()
    rt_ts, rt_tid = rt[tables.RT_TS].to_numpy(dtype=float), rt[tables.RT_TID].to_numpy()
    rt_end = rt[tables.RT_END].to_numpy(dtype=float)
    calls: dict[object, tuple[np.ndarray, np.ndarray]] = {}
    groups: dict[tuple[int, object], tuple[np.ndarray, float]] = {}
    for e in entries.tolist():
        if _in_backward(e, par, is_node):
            continue
        key = (int(parent[e]), tid[e])
        if key not in groups:
            sib = np.flatnonzero((parent == key[0]) & (tid == key[1]))
            sib = sib[np.argsort(ts[sib], kind="stable")]
            gaps = ts[sib[1:]] - end[sib[:-1]]
            groups[key] = (sib, float(np.median(np.maximum(gaps, 0.0))) if len(gaps) else 0.0)
        sib, usual = groups[key]
        k = int(np.searchsorted(ts[sib], ts[e], "left"))
        while k < len(sib) and sib[k] != e:
            k += 1
        if k + 1 >= len(sib):
            continue
        before = [int(s) for s in sib[:k] if end[s] - ts[s] >= TINY_US]
        if not before:
            continue
        t0, t1 = float(end[before[-1]]), float(ts[sib[k + 1]])
        if t1 - t0 <= usual:
            continue
        if tid[e] not in calls:
            mine = np.flatnonzero(rt_tid == tid[e])
            mine = mine[np.argsort(rt_ts[mine], kind="stable")]
            calls[tid[e]] = (mine, np.concatenate([[-np.inf], rt_end[mine][:-1]]))
        mine, gap_from = calls[tid[e]]
        first = int(np.searchsorted(rt_ts[mine], t1, "left"))
        if first >= len(mine):
            continue
        # the stretch's time lies in the gaps before the calls inside it and the first one after it
        span = slice(int(np.searchsorted(rt_ts[mine], t0, "right")), first + 1)
        inside = np.minimum(rt_ts[mine[span]], t1) - np.maximum(gap_from[span], t0)
        cut[mine[span]] += np.maximum(inside, 0.0) * (1.0 - usual / (t1 - t0))
    return cut
