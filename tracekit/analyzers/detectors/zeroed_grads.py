"""Gradients zeroed instead of freed: `optimizer.zero_grad(set_to_none=False)` writes zeros into every gradient, and the next backward adds each new gradient into those zeros (`AccumulateGrad` → `aten::add_`: read, read, write), where the default `set_to_none=True` frees them and backward's first accumulation keeps the new gradient as it is (no kernel).

torch/optim/optimizer.py `zero_grad` runs under `Optimizer.zero_grad#<Name>.zero_grad`; with
`set_to_none=False` it calls `aten::zero_` per gradient or `aten::_foreach_zero_` per device and
dtype (the trace's input dims list every tensor). torch/csrc/autograd/functions/accumulate_grad.h:
a gradient that is None is replaced by the new one (a detach, no kernel); a defined one gets
`grad += new` (`aten::add_` under `torch::autograd::AccumulateGrad`). So, after a range that zeroed
N gradients, the first N in-place accumulations go with it; later ones (gradient accumulation over
micro-batches) stay.

One row per zero_grad range that zeroed something; per rank.runtime row, whether it is a call of the
zeroing or of one of those accumulations."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

ZERO_GRAD_RANGE = "Optimizer.zero_grad#"  # torch.optim's record_function name, "Optimizer.zero_grad#AdamW.zero_grad"
ZERO_OPS = frozenset({"aten::zero_", "aten::_foreach_zero_"})
ACCUMULATE = "torch::autograd::AccumulateGrad"
IN_PLACE_ADD = "aten::add_"
MIN_ZEROED = 2  # gradients zeroed per range: one is a scalar buffer, not a model's parameters

# --- columns of Patterns.zeroed_grads (one row per zero_grad range that zeroed gradients) ----------
ZG_STEP = "step"
ZG_OP = "op"  # the range's name
ZG_ZEROED = "zeroed"  # gradients zeroed (zero_ calls + the tensors of each _foreach_zero_)
ZG_ADDS = "adds"  # in-place accumulations into them that follow (at most `zeroed`)
ZG_ZERO_GPU_US = "zero_gpu_us"  # the zeroing kernels' time
ZG_ADD_GPU_US = "add_gpu_us"  # those accumulations' kernel time
ZG_GPU_US = "gpu_us"  # both
ZG_CALLS = "calls"  # runtime calls of both
ZG_HOST_US = "host_us"  # the range's duration + those add_ ops' durations
ZEROED_COLUMNS = (ZG_STEP, ZG_OP, ZG_ZEROED, ZG_ADDS, ZG_ZERO_GPU_US, ZG_ADD_GPU_US, ZG_GPU_US, ZG_CALLS, ZG_HOST_US)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(ZEROED_COLUMNS))


@dataclass(frozen=True)
class ZeroedGrads:
    table: pd.DataFrame
    calls: np.ndarray  # per rank.runtime row: a call of the zeroing or of an accumulation into its zeros


def _zeroed_count(rank: RankTrace, row: int, name: str) -> int:
    """Tensors one zeroing op clears: 1 for zero_, the listed tensors of a _foreach_zero_ (1 when its
    dims are not recorded)."""
    if name != "aten::_foreach_zero_":
        return 1
    dims = rank.op_inputs(row).get(tables.OP_INPUT_DIMS) or []
    listed = dims[0] if dims and isinstance(dims[0], list) else []
    return max(len(listed), 1)


def _inside(ts: np.ndarray, end: np.ndarray, tid: np.ndarray, lo: float, hi: float, thread: object,
            order: np.ndarray, sorted_ts: np.ndarray) -> np.ndarray:
    """Op rows on `thread` that start and end within [lo, hi]: a slice of the ts-sorted order found by
    binary search, then filtered (linear in the slice)."""
    a, b = np.searchsorted(sorted_ts, lo, side="left"), np.searchsorted(sorted_ts, hi, side="right")
    rows = order[a:b]
    return rows[(tid[rows] == thread) & (end[rows] <= hi)]


def find_zeroed_grads(rank: RankTrace, steps: StepsOf) -> ZeroedGrads:
    """ZEROED_COLUMNS per zero_grad range that zeroed at least MIN_ZEROED gradients, and the runtime
    calls of the zeroing and of the in-place accumulations it causes (module docstring)."""
    ops, rt, gpu = rank.ops, rank.runtime, rank.gpu
    none = ZeroedGrads(empty(), np.zeros(len(rt), dtype=bool))
    if not len(ops) or not len(rt):
        return none
    an = rank.annotations
    an_names = an[tables.AN_NAME].to_numpy(dtype=object)
    ranges = np.flatnonzero(np.fromiter((str(n).startswith(ZERO_GRAD_RANGE) for n in an_names), dtype=bool, count=len(an))
                            & ~an[tables.AN_GPU].to_numpy(dtype=bool))
    if not len(ranges):
        return none
    an_ts, an_end, an_tid = (an[tables.AN_TS].to_numpy(dtype=float), an[tables.AN_END].to_numpy(dtype=float),
                             an[tables.AN_TID].to_numpy())
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    ts, end = ops[tables.OP_TS].to_numpy(dtype=float), ops[tables.OP_END].to_numpy(dtype=float)
    tid, parent = ops[tables.OP_TID].to_numpy(), ops[tables.OP_PARENT].to_numpy(dtype=np.int64)
    order = np.argsort(ts, kind="stable")
    sorted_ts = ts[order]
    # in-place accumulations: an aten::add_ whose parent is an AccumulateGrad, in time order
    is_acc = names == ACCUMULATE
    adds = np.flatnonzero((names == IN_PLACE_ADD) & (parent >= 0) & is_acc[np.maximum(parent, 0)])
    adds = adds[np.argsort(ts[adds], kind="stable")]
    # per op row: the runtime calls whose innermost op it is, and their kernels' time
    rt_op = rt[tables.RT_OP].to_numpy(dtype=np.int64)
    launch = gpu[tables.GPU_LAUNCH].to_numpy(dtype=np.int64)
    gpu_dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    gpu_of_call = np.bincount(launch[launch >= 0], weights=gpu_dur[launch >= 0], minlength=len(rt))
    has_op = rt_op >= 0
    calls_of_op = np.bincount(rt_op[has_op], minlength=len(ops))
    gpu_of_op = np.bincount(rt_op[has_op], weights=gpu_of_call[has_op], minlength=len(ops))
    mine = np.zeros(len(ops), dtype=bool)
    add_ts = ts[adds]
    next_free = 0  # each accumulation counted once, for the first range before it
    rows: list[dict[str, object]] = []
    for z in ranges[np.argsort(an_ts[ranges], kind="stable")].tolist():
        inner = _inside(ts, end, tid, float(an_ts[z]), float(an_end[z]), an_tid[z], order, sorted_ts)
        zeroing = [int(r) for r in inner.tolist()
                   if names[r] in ZERO_OPS and not (parent[r] >= 0 and names[parent[r]] in ZERO_OPS)]
        zeroed = sum(_zeroed_count(rank, r, str(names[r])) for r in zeroing)
        if zeroed < MIN_ZEROED:
            continue  # set_to_none=True (the default): nothing zeroed
        first = max(int(np.searchsorted(add_ts, an_end[z], side="left")), next_free)  # adds in time order
        add_rows = adds[first:first + zeroed]
        next_free = first + len(add_rows)
        mine[inner] = True
        mine[add_rows] = True
        zero_us, add_us = float(gpu_of_op[inner].sum()), float(gpu_of_op[add_rows].sum())
        rows.append({ZG_STEP: int(steps.annotations[z]), ZG_OP: str(an_names[z]), ZG_ZEROED: zeroed, ZG_ADDS: len(add_rows),
                     ZG_ZERO_GPU_US: zero_us, ZG_ADD_GPU_US: add_us, ZG_GPU_US: zero_us + add_us,
                     ZG_CALLS: int(calls_of_op[inner].sum() + calls_of_op[add_rows].sum()),
                     ZG_HOST_US: float(an_end[z] - an_ts[z]) + float((end[add_rows] - ts[add_rows]).sum())})
    if not rows:
        return none
    return ZeroedGrads(pd.DataFrame(rows, columns=list(ZEROED_COLUMNS)), has_op & mine[np.maximum(rt_op, 0)])
