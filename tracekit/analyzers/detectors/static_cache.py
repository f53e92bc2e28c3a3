"""Decoding attention over a whole preallocated (static) K/V cache under a padding mask: every token's SDPA reads all Lk cached positions where only the filled prefix carries weight.

A call: an SDPA op (its outermost one) with a query of at most MAX_QUERY positions, keys of at least
MIN_CACHE positions, a mask whose last dim is Lk and whose query dim is 1 or Lq (a key mask, not a
triangle), and is_causal unset. Its filled length comes from the step's own ops, the latest before the
call on its thread in its step: a write into (or read of) the cache by position (`aten::slice` /
`aten::narrow` / `aten::select` on an input of the keys' shape, along their sequence dim: its end), or
the mask's comparison of an [Lk] position vector with a scalar (`le`/`gt` v: v + 1; `lt`/`ge` v: v).
Calls with neither are left out (their filled length is unknown). The attention kernels read K/V in
proportion to the positions attended: over the filled prefix they take filled / Lk of the time
(held-out static_cache_mask, H100: 16 × 8 heads × 8,192 positions, ~1,032 filled; the cuDNN kernel
22.8 ms a traced step, 3.6 ms over the prefix). Without the mask, the call's other kernels (the
boolean mask turned into an additive bias: fills and a `where`, 3 a call there) and the comparisons
that built it go, with the calls that launch them.

One row per step × call shapes; per rank.gpu row, the share of its time an attention kernel of such a
call keeps over the filled prefix (1.0 for every other row), and whether it is a kernel that goes with
the mask; per rank.runtime row, a call launching one of the latter."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analyzers.costs.op_args import OpArgs
from tracekit.analyzers.detectors.attention_mask import MASKED_OPS, outermost_call
from tracekit.analyzers.detectors.gqa_expand import dims_of
from tracekit.analyzers.kernels import ATTENTION
from tracekit.trace import tables
from tracekit.trace.model import RankTrace


def _int(text: object) -> int | None:
    s = str(text).strip()
    return int(s) if s.lstrip("-").isdigit() and len(s) < 19 else None


def _sum(texts: list[object]) -> int | None:
    values = [_int(t) for t in texts]
    return None if None in values else sum(v for v in values if v is not None)


MAX_QUERY = 16  # a decoding step's query positions (speculative drafts included)
MIN_CACHE = 256  # a cache shorter than this costs little to read whole
# the filled length a position op on the cache shows, from its concrete inputs (self, dim, ...)
POSITION_OPS = {
    "aten::slice": lambda c: _int(c[3]) if len(c) > 3 else None,  # (self, dim, start, end, step): end
    "aten::narrow": lambda c: _sum(c[2:4]) if len(c) > 3 else None,  # (self, dim, start, length): start + length
    "aten::select": lambda c: _sum([c[2], 1]) if len(c) > 2 else None,  # (self, dim, index): index + 1
}
COMPARISONS = {"aten::le": 1, "aten::gt": 1, "aten::lt": 0, "aten::ge": 0}  # filled = value + this

# --- columns of Patterns.static_cache (one row per step × call shapes) ---------------------------------
SC_STEP = "step"
SC_SHAPES = "shapes"  # "q [16, 8, 1, 128], k [16, 8, 8192, 128], mask [1, 1, 1, 8192]"
SC_CALLS = "calls"
SC_CACHE = "cache_positions"  # Lk
SC_FILLED = "filled_positions"  # mean over the calls
SC_KERNELS = "kernels"
SC_GPU_US = "gpu_us"  # the calls' kernel time
SC_ATTN_US = "attention_us"  # the part of it in attention-class kernels
SC_MASK_US = "mask_us"  # the other kernels of the calls and of the comparisons that built the masks
SC_SAVING_US = "saving_us"  # Σ attention kernel time × (1 − filled / Lk) + mask_us
STATIC_COLUMNS = (SC_STEP, SC_SHAPES, SC_CALLS, SC_CACHE, SC_FILLED, SC_KERNELS, SC_GPU_US, SC_ATTN_US, SC_MASK_US,
                  SC_SAVING_US)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(STATIC_COLUMNS))


@dataclass(frozen=True)
class StaticCache:
    table: pd.DataFrame
    share: np.ndarray  # per rank.gpu row: filled / Lk for an attention kernel of a call, else 1.0
    gone: np.ndarray  # per rank.gpu row: a kernel of the mask (its bias under the call, its comparison)
    calls: np.ndarray  # per rank.runtime row: a call launching one of `gone`


def _fmt(dims: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, dims)) + "]"


def _call(rank: RankTrace, row: int, name: str) -> tuple[tuple[int, ...], str] | None:
    """(the keys' dims, the call's shapes text) for a decoding call over a masked whole cache, else None."""
    mask_i, causal_i, qi, backward = MASKED_OPS[name]
    if backward:
        return None
    inputs = rank.op_inputs(row)
    a = OpArgs.of(inputs.get(tables.OP_INPUT_DIMS), inputs.get(tables.OP_INPUT_TYPES),
                  inputs.get(tables.OP_INPUT_STRIDES), inputs.get(tables.OP_CONCRETE_INPUTS))
    q = dims_of(a.dims[qi]) if qi < len(a.dims) else None
    k = dims_of(a.dims[qi + 1]) if qi + 1 < len(a.dims) else None
    mask = dims_of(a.dims[mask_i]) if mask_i < len(a.dims) else None
    if q is None or k is None or mask is None or len(q) != 4 or len(k) != 4 or len(mask) < 2 or a.value(causal_i):
        return None
    lq, lk = q[2], k[2]
    if lq > MAX_QUERY or lk < MIN_CACHE or mask[-1] != lk or mask[-2] not in (1, lq):
        return None
    return k, f"q {_fmt(q)}, k {_fmt(k)}, mask {_fmt(mask)}"


def _position(rank: RankTrace, row: int, name: str, caches: set[tuple[int, ...]]) -> tuple[tuple[int, ...], int] | None:
    """(the cache length it speaks of, the filled length it shows) for a position op, else None."""
    inputs = rank.op_inputs(row)
    dims = inputs.get(tables.OP_INPUT_DIMS) or []
    concrete = inputs.get(tables.OP_CONCRETE_INPUTS) or []
    first = dims_of(dims[0]) if dims else None
    if first is None or not isinstance(concrete, list):
        return None
    if name in POSITION_OPS:
        if first not in caches or len(concrete) < 2 or _int(concrete[1]) not in (2, -2):
            return None
        end = POSITION_OPS[name](concrete)
        return (first, end) if end is not None and 0 < end <= first[2] else None
    value = _int(concrete[1]) if len(concrete) > 1 else None
    if value is None or len(first) < 1 or any(d != 1 for d in first[:-1]):
        return None
    lengths = {c[2] for c in caches}
    if first[-1] not in lengths:
        return None
    filled = value + COMPARISONS[name]
    cache = next(c for c in caches if c[2] == first[-1])
    return (cache, filled) if 0 < filled <= first[-1] else None


def find_static_cache(rank: RankTrace, classes: np.ndarray, op_steps: np.ndarray,
                      rows: np.ndarray | None = None) -> StaticCache:
    """STATIC_COLUMNS per step × call shapes, and the calls' GPU and runtime rows (`rows`: the GPU rows
    to consider; `classes`: the kernel class of each rank.gpu row)."""
    ops, gpu = rank.ops, rank.gpu
    none = StaticCache(empty(), np.ones(len(gpu)), np.zeros(len(gpu), dtype=bool),
                       np.zeros(len(rank.runtime), dtype=bool))
    if not len(ops) or not len(gpu):
        return none
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    is_call = np.isin(names, list(MASKED_OPS))
    if not is_call.any():
        return none
    top = outermost_call(ops[tables.OP_PARENT].to_numpy(dtype=np.int64), is_call)
    calls: dict[int, tuple[tuple[int, ...], str]] = {}
    for c in np.flatnonzero((top == np.arange(len(ops))) & (op_steps >= 0)).tolist():
        found = _call(rank, c, str(names[c]))
        if found is not None:
            calls[c] = found
    if not calls:
        return none
    caches = {k for k, _ in calls.values()}
    tid = ops[tables.OP_TID].to_numpy()
    candidates = np.flatnonzero(np.isin(names, [*POSITION_OPS, *COMPARISONS]) & (op_steps >= 0))
    evidence: dict[tuple[object, int], list[tuple[int, tuple[int, ...], int]]] = {}  # (tid, step) -> [(row, cache, filled)]
    for e in candidates.tolist():
        seen = _position(rank, e, str(names[e]), caches)
        if seen is not None:
            evidence.setdefault((tid[e], int(op_steps[e])), []).append((e, *seen))
    used: dict[int, tuple[int, str, int, int]] = {}  # call -> (step, shapes, Lk, filled)
    builders: dict[int, int] = {}  # comparison op -> the call whose mask it built
    for c, (k, text) in calls.items():
        before = [(e, f) for e, cache, f in evidence.get((tid[c], int(op_steps[c])), []) if e < c and cache[2] == k[2]]
        if before:
            used[c] = (int(op_steps[c]), text, k[2], before[-1][1])
            builders.update({e: c for e, _ in before if str(names[e]) in COMPARISONS})
    if not used:
        return none
    op_of = gpu[tables.GPU_OP].to_numpy(dtype=np.int64)
    index = np.full(len(ops), -1, dtype=np.int64)
    index[list(used)] = np.arange(len(used))
    index[list(builders)] = [index[c] for c in builders.values()]
    at = np.maximum(op_of, 0)
    owner = np.where(op_of >= 0, np.where(top[at] >= 0, top[at], at), -1)
    of_call = np.where(owner >= 0, index[np.maximum(owner, 0)], -1)
    mine = (of_call >= 0) & (gpu[tables.GPU_KIND].to_numpy(dtype=object) == tables.KIND_KERNEL)
    if rows is not None:
        mine &= rows
    attention = mine & (classes == ATTENTION)
    gone = mine & ~attention
    dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    n = len(used)
    kernels = np.bincount(of_call[mine], minlength=n)
    gpu_us = np.bincount(of_call[mine], weights=dur[mine], minlength=n)
    attn_us = np.bincount(of_call[attention], weights=dur[attention], minlength=n)
    mask_us = np.bincount(of_call[gone], weights=dur[gone], minlength=n)
    groups: dict[tuple[int, str], dict[str, object]] = {}
    for i, (s, text, lk, filled) in enumerate(used.values()):
        g = groups.setdefault((s, text), dict.fromkeys(STATIC_COLUMNS, 0.0) | {SC_STEP: s, SC_SHAPES: text, SC_CACHE: lk})
        for col, value in ((SC_CALLS, 1.0), (SC_FILLED, filled), (SC_KERNELS, kernels[i]), (SC_GPU_US, gpu_us[i]),
                           (SC_ATTN_US, attn_us[i]), (SC_MASK_US, mask_us[i]),
                           (SC_SAVING_US, attn_us[i] * (1.0 - filled / lk) + mask_us[i])):
            g[col] = float(str(g[col])) + float(value)
    table = pd.DataFrame(list(groups.values()), columns=list(STATIC_COLUMNS))
    table[SC_FILLED] = table[SC_FILLED] / table[SC_CALLS]
    table[[SC_CALLS, SC_KERNELS]] = table[[SC_CALLS, SC_KERNELS]].astype(np.int64)
    launch = gpu[tables.GPU_LAUNCH].to_numpy(dtype=np.int64)
    calls_gone = np.zeros(len(rank.runtime), dtype=bool)
    calls_gone[launch[gone & (launch >= 0)]] = True
    filled_share = np.array([f / lk for _, _, lk, f in used.values()])
    share = np.where(attention, filled_share[np.maximum(of_call, 0)], 1.0)
    return StaticCache(table, share, gone, calls_gone)
