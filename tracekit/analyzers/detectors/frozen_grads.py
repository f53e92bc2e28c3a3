"""Gradients nobody reads: parameters whose gradients backward accumulates every step while the step's optimizer updates fewer tensors (a "frozen" backbone left with requires_grad=True).

Per step: the shapes of the parameters the optimizer updates, from its multi-tensor calls' first
input (a list of tensors: `_fused_adamw_`, `_foreach_*`), and the
`torch::autograd::AccumulateGrad` calls of the step's backward with their gradient's shape. An
accumulation whose shape is among those the step's multi-tensor calls update is trainable (a frozen
tensor of a trained one's shape counts as trained: conservative); the others feed no optimizer. When every unread accumulation comes after the step's last trainable one (the
untrained parameters are a prefix of the network, reached last by backward), `requires_grad_(False)`
on them stops backward at the trainable part: the GPU work launched on the backward thread after that
last trainable accumulation goes. Interleaved ones (adapters between frozen layers) are counted but
not priced: backward still runs through the frozen layers for the adapters' inputs.

One row per step; per rank.runtime row, whether it is a launch of that cut-off backward work."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analyzers.names import matches
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

ACCUMULATE = "torch::autograd::AccumulateGrad"
MULTI_TENSOR = re.compile(r"^aten::(_fused_adamw?_|_fused_sgd_|_fused_adagrad_|_foreach_\w+)$")
MIN_UNREAD = 4  # accumulations per step into tensors no optimizer updates: fewer is a buffer or two

# --- columns of Patterns.frozen_grads (one row per step) ------------------------------------------
FG_STEP = "step"
FG_ACCUMULATED = "accumulated"  # gradients accumulated in the step's backward
FG_UPDATED = "updated"  # tensors the optimizer updates
FG_UNREAD = "unread"  # accumulations no optimizer reads
FG_PREFIX = "prefix"  # the unread ones all come after the last trainable one (priced)
FG_CUT_US = "cut_us"  # GPU time launched on the backward thread after the last trainable accumulation
FROZEN_COLUMNS = (FG_STEP, FG_ACCUMULATED, FG_UPDATED, FG_UNREAD, FG_PREFIX, FG_CUT_US)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(FROZEN_COLUMNS))


@dataclass(frozen=True)
class FrozenGrads:
    table: pd.DataFrame
    calls: np.ndarray  # per rank.runtime row: a launch of the backward work after the last trainable accumulation


def _shape(v: object) -> tuple[int, ...] | None:
    if isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return tuple(int(x) for x in v)
    return None


def _updated(rank: RankTrace, ops_in_step: np.ndarray, names: np.ndarray) -> tuple[set[tuple[int, ...]], int]:
    """(the shapes of the tensors the step's multi-tensor calls update, the longest such list's length):
    the optimizer's parameters (0-d lists are step counters). A gradient clip or scale over every
    gradient lists them all, so it can only hide unread gradients, never invent them; a step of several
    updates repeats the same lists."""
    shapes_seen: set[tuple[int, ...]] = set()
    longest = 0
    for r in ops_in_step.tolist():
        if not MULTI_TENSOR.search(str(names[r])):
            continue
        dims = rank.op_inputs(r).get(tables.OP_INPUT_DIMS) or []
        listed = dims[0] if dims and isinstance(dims[0], list) else []
        shapes = [s for s in (_shape(x) for x in listed) if s is not None]
        if len(shapes) == len(listed) and all(shapes):
            shapes_seen.update(shapes)
            longest = max(longest, len(shapes))
    return shapes_seen, longest


def find_frozen_grads(rank: RankTrace, steps_of_ops: np.ndarray) -> FrozenGrads:
    """The steps whose backward accumulates gradients no optimizer reads (module docstring)."""
    ops, rt, gpu = rank.ops, rank.runtime, rank.gpu
    none = FrozenGrads(empty(), np.zeros(len(rt), dtype=bool))
    if not len(ops) or not len(rt):
        return none
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    is_acc = names == ACCUMULATE
    if not is_acc.any() or not matches(names, MULTI_TENSOR).any():
        return none
    ts, tid = ops[tables.OP_TS].to_numpy(dtype=float), ops[tables.OP_TID].to_numpy()
    rt_ts, rt_tid, rt_step = rt[tables.RT_TS].to_numpy(dtype=float), rt[tables.RT_TID].to_numpy(), rt[tables.RT_STEP].to_numpy()
    launch = gpu[tables.GPU_LAUNCH].to_numpy(dtype=np.int64)
    dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    gpu_of_call = pd.Series(dur[launch >= 0]).groupby(launch[launch >= 0]).sum()
    calls = np.zeros(len(rt), dtype=bool)
    recs = []
    # op and runtime rows grouped by step once (a pass per step over every row would be quadratic)
    op_order = np.argsort(steps_of_ops, kind="stable")
    op_keys, op_first = np.unique(steps_of_ops[op_order], return_index=True)
    op_bounds = dict(zip(op_keys.tolist(), zip(op_first.tolist(), [*op_first[1:].tolist(), len(op_order)], strict=True),
                         strict=True))
    rt_order = np.argsort(rt_step, kind="stable")
    rt_keys, rt_first = np.unique(rt_step[rt_order], return_index=True)
    rt_bounds = dict(zip(rt_keys.tolist(), zip(rt_first.tolist(), [*rt_first[1:].tolist(), len(rt_order)], strict=True),
                         strict=True))
    for step in np.unique(steps_of_ops[is_acc]).tolist():
        if step < 0:
            continue
        lo, hi = op_bounds[step]
        in_step = op_order[lo:hi]
        updated, n_updated = _updated(rank, in_step, names)
        if not updated:
            continue
        acc = in_step[is_acc[in_step]]
        acc = acc[np.argsort(ts[acc], kind="stable")]
        trainable = np.zeros(len(acc), dtype=bool)
        for k, r in enumerate(acc.tolist()):
            dims = rank.op_inputs(r).get(tables.OP_INPUT_DIMS) or []
            s = _shape(dims[0]) if dims else None
            trainable[k] = s is None or s in updated  # unknown: counted as read
        unread = int((~trainable).sum())
        if unread < MIN_UNREAD or not trainable.any():
            continue
        last = int(np.flatnonzero(trainable)[-1])
        prefix = bool(trainable[: last + 1].all()) and last + 1 < len(acc)  # every unread one after
        cut = 0.0
        if prefix:
            t_cut, thread = float(ts[acc[last]]), tid[acc[last]]
            lo, hi = rt_bounds.get(step, (0, 0))
            rows = rt_order[lo:hi]
            mine = rows[(rt_tid[rows] == thread) & (rt_ts[rows] > t_cut) & (rt_ts[rows] <= float(ts[acc[-1]]))]
            calls[mine] = True
            cut = float(gpu_of_call.reindex(mine).fillna(0.0).sum())
        recs.append({FG_STEP: int(step), FG_ACCUMULATED: len(acc), FG_UPDATED: n_updated,
                     FG_UNREAD: unread, FG_PREFIX: prefix, FG_CUT_US: cut})
    if not recs:
        return none
    return FrozenGrads(pd.DataFrame(recs, columns=list(FROZEN_COLUMNS)), calls)
