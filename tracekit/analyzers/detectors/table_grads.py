"""Embedding tables trained with dense gradients: a table of at least a million rows looked up with `sparse=False`, a few of its rows per step, whose whole-table gradient is zero-filled, accumulated and swept by the optimizer every step, where `nn.Embedding(..., sparse=True)` (with an optimizer that takes sparse gradients) touches only the looked-up rows.

A dense embedding gradient is a tensor of the table's shape: its backward (`embedding_dense_backward`)
zero-fills it before scattering the looked-up rows' gradients into it, autograd adds it to the
table's `.grad` (a second full-table pass when the table is used twice), and the optimizer reads and
writes every element (held-out grocery_item2vec_dense_table_grads, H200: two 6 M × 128 float32 tables,
16,384 pairs and 8 negatives a step; the fill_, add_ and _foreach_add_ kernels that read a whole table
took 8.8 ms of a 9.95 ms bare step; with sparse=True the bare step was 2.86 ms).

A table is one input of `aten::embedding` (or `embedding_bag`) with ROWS_MIN rows or more and its
`sparse` argument `False` (the op's Concrete Inputs), in a trace whose backward runs the dense
embedding backward for that many rows. Its sweeps are the kernels of every other op that reads a
tensor of exactly the table's shape (a tensor list counts with its table tensors' share of the
list's elements; the lookups themselves, gather and index_select, read rows, not the table). Only
tables whose looked-up rows per step are at most TOUCHED_MAX of the table count: above that, the
sparse update touches most of the table anyway.

One row per step with such sweeps; per rank.gpu row, the share of its kernel that sweeps a table (0: none)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

ROWS_MIN = 1 << 20  # a table of a million rows: below, a dense gradient is a few MB and the sweep µs
TOUCHED_MAX = 0.05  # looked-up rows per step over the table's rows
LOOKUPS = {"aten::embedding": (0, 1, 4), "aten::embedding_bag": (0, 1, 5), "aten::_embedding_bag": (0, 1, 5)}
DENSE_BACKWARD = frozenset({"aten::embedding_dense_backward", "aten::_embedding_bag_dense_backward",
                            "aten::_embedding_bag_backward", "aten::embedding_backward"})
ROW_READS = frozenset({"aten::gather", "aten::index_select", "aten::embedding", "aten::embedding_bag",
                       "aten::_embedding_bag", "aten::_embedding_bag_forward_only", "aten::index"})
MAX_LIST = 4096  # tensors of one recorded tensor list read (untrusted traces: bounded)

# --- columns of Patterns.table_grads (one row per step with whole-table sweeps) ----------------------
TG_STEP = "step"
TG_TABLES = "tables"  # distinct shapes of the dense-gradient tables (same-shaped tables count once)
TG_SHAPE = "shape"  # the largest one's shape, "6000000×128"
TG_LOOKUPS = "lookups"  # rows looked up in the step (indices read by the tables' lookups)
TG_ROWS = "rows"  # rows of those shapes together (a lower bound of the tables' rows: the touched share errs high)
TG_KERNELS = "kernels"  # kernels that sweep a table
TG_US = "time_us"  # their time × their table share
TABLE_COLUMNS = (TG_STEP, TG_TABLES, TG_SHAPE, TG_LOOKUPS, TG_ROWS, TG_KERNELS, TG_US)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(TABLE_COLUMNS))


@dataclass(frozen=True)
class TableGrads:
    """The table and, per rank.gpu row, the share of its kernel that sweeps a dense-gradient table."""

    table: pd.DataFrame
    share: np.ndarray


def _shape(v: object) -> tuple[int, int] | None:
    if isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in v):
        return int(v[0]), int(v[1])
    return None


def _numel(v: object) -> int:
    if isinstance(v, list) and 0 < len(v) <= 8 and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v):
        return math.prod(v)
    return 0


def _tables(rank: RankTrace, names: np.ndarray, step: np.ndarray) -> tuple[set[tuple[int, int]], dict[int, int]]:
    """(the dense-gradient tables' shapes, rows looked up per step): lookups with `sparse` False."""
    found: set[tuple[int, int]] = set()
    lookups: dict[int, int] = {}
    rows = np.flatnonzero(np.isin(names, list(LOOKUPS)))
    if not len(rows):
        return found, lookups
    for row, dims, concrete in zip(rows.tolist(), rank.input_values(rows, tables.OP_INPUT_DIMS),
                                   rank.input_values(rows, tables.OP_CONCRETE_INPUTS), strict=True):
        weight, index, sparse = LOOKUPS[str(names[row])]
        if not isinstance(dims, list) or len(dims) <= index:
            continue
        shape = _shape(dims[weight])
        flag = concrete[sparse] if isinstance(concrete, list) and len(concrete) > sparse else None
        if shape is None or shape[0] < ROWS_MIN or flag != "False":
            continue
        found.add(shape)
        lookups[int(step[row])] = lookups.get(int(step[row]), 0) + _numel(dims[index])
    return found, lookups


def _dense_backward(rank: RankTrace, names: np.ndarray, shapes: set[tuple[int, int]]) -> set[tuple[int, int]]:
    """The tables whose row count a dense embedding backward of the trace names (its num_weights)."""
    rows = np.flatnonzero(np.isin(names, list(DENSE_BACKWARD)))
    counts = {str(r) for r, _ in shapes}
    seen: set[str] = set()
    for concrete in rank.input_values(rows, tables.OP_CONCRETE_INPUTS):
        if isinstance(concrete, list):
            seen.update(c for c in concrete if isinstance(c, str) and c in counts)
    return {s for s in shapes if str(s[0]) in seen}


def _sweep_share(dims: object, shapes: set[tuple[int, int]]) -> float:
    """The share of an op's first table-reading input that is a table: 1 for a tensor of a table's
    shape, a tensor list's table elements over all its elements; 0 when no input is one."""
    if not isinstance(dims, list):
        return 0.0
    for d in dims:
        if _shape(d) in shapes:
            return 1.0
        if isinstance(d, list) and d and isinstance(d[0], list) and len(d) <= MAX_LIST:
            sizes = [(_numel(x), _shape(x) in shapes) for x in d]
            total = sum(n for n, _ in sizes)
            mine = sum(n for n, t in sizes if t)
            if mine:
                return mine / total if total else 0.0
    return 0.0


def find_table_grads(rank: RankTrace, steps: StepsOf, rows: np.ndarray | None = None) -> TableGrads:
    """TABLE_COLUMNS per step and each GPU row's table share (`rows`: the GPU rows to consider, None all)."""
    gpu, ops = rank.gpu, rank.ops
    share = np.zeros(len(gpu))
    none = TableGrads(empty(), share)
    if not len(gpu) or not len(ops):
        return none
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    shapes, lookups = _tables(rank, names, steps.ops)
    shapes = _dense_backward(rank, names, shapes) if shapes else shapes
    if not shapes:
        return none
    op = gpu[tables.GPU_OP].to_numpy(dtype=np.int64)
    keep = op >= 0
    if rows is not None:
        keep &= rows
    cand = np.flatnonzero(keep)
    cand = cand[~np.isin(names[op[cand]], list(ROW_READS))]
    seen: dict[int, float] = {}
    for g, o, dims in zip(cand.tolist(), op[cand].tolist(), rank.input_values(op[cand], tables.OP_INPUT_DIMS), strict=True):
        got = seen.get(o)
        if got is None:
            got = seen[o] = _sweep_share(dims, shapes)
        share[g] = got
    mine = share > 0
    if not mine.any():
        return none
    dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    step = steps.gpu
    total_rows = sum(r for r, _ in shapes)
    largest = max(shapes)
    out = []
    for s in np.unique(step[mine]).tolist():
        looked = lookups.get(int(s), 0)
        if s < 0 or looked > TOUCHED_MAX * total_rows:
            continue
        at = mine & (step == s)
        out.append({TG_STEP: int(s), TG_TABLES: len(shapes), TG_SHAPE: f"{largest[0]}×{largest[1]}",
                    TG_LOOKUPS: looked, TG_ROWS: total_rows, TG_KERNELS: int(at.sum()),
                    TG_US: float((dur[at] * share[at]).sum())})
    if not out:
        return none
    return TableGrads(pd.DataFrame(out, columns=list(TABLE_COLUMNS)), share)
