"""K/V caches rewritten whole at every token: a decoding step whose ops gather, zero, add or copy a tensor of the attention cache's full shape (a sliding window shifted one slot to the left, as transformers' `SlidingWindowCache.update` did), where writing the new token's K/V in place (a ring buffer, a static cache's slot) moves one slot.

heldout14 swa_roll_cache (H100): per layer and token, `k_cache[:, :, indices]` (a gather of the whole
window), `k_cache.zero_()` and `k_cache += k_out`, for K and V: 6 passes over 537 MB where attention
reads it once; written in place at `pos % window` the bare step went from 38.7 to 15.5 ms.

The caches are the key shapes of the step's decoding attention calls (top-level
`aten::scaled_dot_product_attention` with at most MAX_QUERIES queries over at least MIN_KEYS keys). A
rewrite is a top-level SHIFT_OPS call on one thread whose tensor inputs all have a cache's shape
(an in-place add or copy of the whole window; a gather of it; a zero or fill of it); a slot write
(`index_put_`, `index_copy_`, a copy into a slice) has a smaller input and is not one. A step counts
with at least one rewrite per decoding attention call over those caches, MIN_REWRITES at least, and
at least one of them an in-place write (WRITE_OPS: gathers alone are a reorder, e.g. beam search's). One
row per step and thread; per rank.runtime row, whether a rewrite issued it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.toplevel import StepOps, TopLevel
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

ATTENTION_OP = "aten::scaled_dot_product_attention"
MAX_QUERIES = 16  # queries per decoding attention call: a token or a few (speculative decoding)
MIN_KEYS = 64  # keys of a cache worth a rule
MIN_REWRITES = 4
SHIFT_OPS = frozenset({"aten::index", "aten::index_select", "aten::gather", "aten::roll", "aten::zero_",
                       "aten::fill_", "aten::add_", "aten::copy_", "aten::clone", "aten::contiguous"})
# A rewrite writes the cache in place: a gather of the whole cache alone is a new tensor (beam search's
# `index_select` of the cache by beam, whose fix is not a ring buffer), so a step counts only with one of these.
WRITE_OPS = frozenset({"aten::zero_", "aten::fill_", "aten::add_", "aten::copy_"})

# --- columns of Patterns.window_shift (one row per step × thread) -----------------------------------
WS_STEP = "step"
WS_ATTENTION = "attention_calls"  # decoding attention calls over the rewritten caches
WS_REWRITES = "rewrites"  # whole-cache rewrites
WS_OPS = "ops"  # the rewrites' op names, in order of first call
WS_CACHE = "cache"  # the largest rewritten cache shape, in words
WS_CALLS = "calls"  # runtime calls the rewrites issued
WS_GPU_US = "gpu_us"  # their kernels' time
WINDOW_SHIFT_COLUMNS = (WS_STEP, WS_ATTENTION, WS_REWRITES, WS_OPS, WS_CACHE, WS_CALLS, WS_GPU_US)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(WINDOW_SHIFT_COLUMNS))


@dataclass(frozen=True)
class WindowShifts:
    table: pd.DataFrame
    calls: np.ndarray  # per rank.runtime row: issued by a whole-cache rewrite


def _tensors(rank: RankTrace, row: int) -> list[tuple[int, ...]]:
    dims = rank.op_inputs(row).get(tables.OP_INPUT_DIMS) or []
    return [tuple(d) for d in dims if isinstance(d, list) and d and all(isinstance(x, int) for x in d)] \
        if isinstance(dims, list) else []


def _cache(rank: RankTrace, row: int) -> tuple[int, ...] | None:
    """The key shape of a decoding attention call: q [..., Lq, E] with Lq ≤ MAX_QUERIES over k [..., Lk, E], Lk ≥ MIN_KEYS."""
    t = _tensors(rank, row)
    if len(t) < 2 or len(t[0]) < 3 or len(t[1]) < 3:
        return None
    return t[1] if t[0][-2] <= MAX_QUERIES and t[1][-2] >= MIN_KEYS else None


def find_window_shifts(rank: RankTrace, seqs: tuple[StepOps, ...], top: TopLevel) -> WindowShifts:
    """WINDOW_SHIFT_COLUMNS per step and thread that rewrites its decoding caches whole, and their calls."""
    rt, ops = rank.runtime, rank.ops
    none = WindowShifts(empty(), np.zeros(len(rt), dtype=bool))
    if not len(rt) or not len(ops) or not seqs:
        return none
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    if not (names == ATTENTION_OP).any():
        return none
    shift = np.isin(names, list(SHIFT_OPS))
    gpu_dur = rank.gpu[tables.GPU_DUR].to_numpy(dtype=float)
    mine = np.zeros(len(ops), dtype=bool)
    rows: list[dict[str, object]] = []
    for step in seqs:
        for _, seq in step.threads:
            caches = [c for c in (_cache(rank, int(r)) for r in seq[names[seq] == ATTENTION_OP]) if c is not None]
            if not caches:
                continue
            shapes = set(caches)
            rewrites = [int(r) for r in seq[shift[seq]]
                        if (t := [x for x in _tensors(rank, int(r)) if len(x) > 1]) and all(x in shapes for x in t)]
            if len(rewrites) < max(MIN_REWRITES, len(caches)) or not any(names[r] in WRITE_OPS for r in rewrites):
                continue
            these = np.zeros(len(ops), dtype=bool)
            these[rewrites] = True
            mine |= these
            biggest = max(shapes, key=lambda s: int(np.prod(s)))
            rows.append({WS_STEP: step.step, WS_ATTENTION: len(caches), WS_REWRITES: len(rewrites),
                         WS_OPS: " → ".join(dict.fromkeys(str(names[r]).removeprefix("aten::") for r in rewrites)),
                         WS_CACHE: "×".join(str(x) for x in biggest),
                         WS_CALLS: int(((top.rt_top >= 0) & these[np.maximum(top.rt_top, 0)]).sum()),
                         WS_GPU_US: float(gpu_dur[(top.gpu_top >= 0) & these[np.maximum(top.gpu_top, 0)]].sum())})
    if not rows:
        return none
    return WindowShifts(pd.DataFrame(rows, columns=list(WINDOW_SHIFT_COLUMNS)),
                        (top.rt_top >= 0) & mine[np.maximum(top.rt_top, 0)])
