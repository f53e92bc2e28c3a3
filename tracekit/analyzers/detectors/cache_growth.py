"""Caches grown by `torch.cat` one step at a time (a KV cache appended to every decoded token): the cat calls, their copy kernels and what an in-place write would leave of them.

`torch.cat([cache, new], dim)` allocates a new tensor and copies the whole cache into it to append
`new`; called once per token per layer, the copies grow with the sequence and dwarf the attention that
reads the cache once. A cat is one of a growing cache when it joins two tensors that differ only along
`dim`, the second (n positions) shorter than the first (L), and the same (other dims, dim, n) is seen
with at least MIN_LENGTHS cache lengths L, L + n, L + 2n ... in the headline steps: each call's output
is the next call's cache. A cache grown in blocks (one cat of 256 empty positions, then in-place
writes) or a cat of fixed shapes never repeats with lengths one block apart, so it is not one.

One row per step × (other dims, dim, n), over the cats' kernels in the selected GPU rows; per rank.gpu
row whether it is a growing cat's kernel (the rows the rule's what-if shortens)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.analyzers.detectors.layers import under
from tracekit.analyzers.names import matches
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

CAT_OPS = re.compile(r"^aten::(cat|concat|concatenate|_cat)$")
# Cache lengths in one arithmetic run (L, L + n, L + 2n): fewer could be two unrelated cats.
MIN_LENGTHS = 3

# --- columns of Patterns.cache_growth (one row per step × group) ---------------------------------
CG_STEP = "step"
CG_SHAPE = "shape"  # the cache's shape with the growing dim as "L": "[32, 16, L, 64]"
CG_DIM = "dim"  # the growing dim (non-negative)
CG_NEW = "new"  # positions appended per call (n)
CG_CALLS = "calls"
CG_MIN_LEN = "min_len"  # the shortest and longest cache length L appended to in the step
CG_MAX_LEN = "max_len"
CG_KERNELS = "kernels"  # GPU activities the calls launched (the copies)
CG_TIME_US = "time_us"  # their summed time
# what an in-place write of the new positions into a preallocated buffer leaves of it: each call's
# kernel time × n / (L + n), the share of the bytes the cat moves that are the new positions
CG_KEPT_US = "kept_us"
CG_KERNEL = "kernel"  # the kernel with most of the time
GROWTH_COLUMNS = (CG_STEP, CG_SHAPE, CG_DIM, CG_NEW, CG_CALLS, CG_MIN_LEN, CG_MAX_LEN, CG_KERNELS, CG_TIME_US,
                  CG_KEPT_US, CG_KERNEL)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(GROWTH_COLUMNS))


def _shape(v: object) -> tuple[int, ...] | None:
    if isinstance(v, list) and v and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v):
        return tuple(int(x) for x in v)
    return None


def _dim(concrete: object, ndim: int) -> int | None:
    """The cat's dim from its concrete inputs ('' or absent: 0, torch's default)."""
    text = str(concrete[1]).strip() if isinstance(concrete, list) and len(concrete) > 1 else ""
    if not text:
        return 0
    try:
        d = int(text)
    except ValueError:
        return None
    d = d + ndim if d < 0 else d
    return d if 0 <= d < ndim else None


def _append(rank: RankTrace, row: int) -> tuple[tuple[int, ...], int, int, int] | None:
    """(the other dims with the cat dim as -1, the dim, the cache length L, the appended n) of a cat
    of two tensors that differ only along its dim, n < L; None for any other cat."""
    inputs = rank.op_inputs(row)
    dims = inputs.get(tables.OP_INPUT_DIMS) or []
    listed = dims[0] if dims and isinstance(dims[0], list) else []
    if len(listed) != 2:
        return None
    a, b = _shape(listed[0]), _shape(listed[1])
    if a is None or b is None or len(a) != len(b):
        return None
    d = _dim(inputs.get(tables.OP_CONCRETE_INPUTS), len(a))
    if d is None or any(x != y for i, (x, y) in enumerate(zip(a, b, strict=True)) if i != d):
        return None
    if not 0 < b[d] < a[d]:
        return None
    return tuple(-1 if i == d else x for i, x in enumerate(a)), d, a[d], b[d]


def _growing(lengths: set[int], n: int) -> set[int]:
    """The lengths of `lengths` in an arithmetic run of step n of at least MIN_LENGTHS of them."""
    out: set[int] = set()
    for start in sorted(x for x in lengths if x - n not in lengths):
        run = [start]
        while run[-1] + n in lengths:
            run.append(run[-1] + n)
        if len(run) >= MIN_LENGTHS:
            out.update(run)
    return out


def _fmt(key: tuple[int, ...]) -> str:
    return "[" + ", ".join("L" if x < 0 else str(x) for x in key) + "]"


def find_cache_growth(rank: RankTrace, steps: StepsOf, rows: np.ndarray | None = None) -> tuple[pd.DataFrame, np.ndarray]:
    """(GROWTH_COLUMNS rows, per rank.gpu row: a kernel of a growing cache's cat) over the selected rows."""
    ops, gpu = rank.ops, rank.gpu
    mine = np.zeros(len(gpu), dtype=bool)
    if not len(ops) or not len(gpu):
        return empty(), mine
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    is_cat = matches(names, CAT_OPS)
    if not is_cat.any():
        return empty(), mine
    top = under(ops, is_cat, outermost=True)
    gpu_op = gpu[tables.GPU_OP].to_numpy(dtype=np.int64)
    call_of_row = np.where(gpu_op >= 0, top[np.maximum(gpu_op, 0)], -1)
    if rows is not None:
        call_of_row = np.where(rows, call_of_row, -1)
    hit = call_of_row >= 0
    if not hit.any():
        return empty(), mine
    kernels_of = {int(c): g.to_numpy() for c, g in pd.Series(np.flatnonzero(hit)).groupby(call_of_row[hit])}
    calls: dict[int, tuple[tuple[int, ...], int, int, int]] = {}
    lengths: dict[tuple[tuple[int, ...], int, int], set[int]] = {}
    for c in kernels_of:
        found = _append(rank, c)
        if found is not None:
            calls[c] = found
            lengths.setdefault((found[0], found[1], found[3]), set()).add(found[2])
    growing = {key: _growing(ls, key[2]) for key, ls in lengths.items()}
    dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    kernel_names = gpu[tables.GPU_NAME].to_numpy(dtype=object)
    groups: dict[tuple[int, tuple[int, ...], int, int], list[int]] = {}
    for c, (key, d, length, n) in calls.items():
        if length in growing[(key, d, n)]:
            groups.setdefault((int(steps.ops[c]), key, d, n), []).append(c)
    recs: list[dict[str, object]] = []
    for (s, key, d, n), members in sorted(groups.items()):
        k = np.concatenate([kernels_of[c] for c in members])
        mine[k] = True
        kept = sum(float(dur[kernels_of[c]].sum()) * n / (calls[c][2] + n) for c in members)
        by_name = pd.Series(dur[k]).groupby(kernel_names[k]).sum()
        recs.append({CG_STEP: s, CG_SHAPE: _fmt(key), CG_DIM: d, CG_NEW: n, CG_CALLS: len(members),
                     CG_MIN_LEN: min(calls[c][2] for c in members), CG_MAX_LEN: max(calls[c][2] for c in members),
                     CG_KERNELS: len(k), CG_TIME_US: float(dur[k].sum()), CG_KEPT_US: kept,
                     CG_KERNEL: str(by_name.idxmax())})
    return (pd.DataFrame(recs, columns=list(GROWTH_COLUMNS)) if recs else empty()), mine
