"""Embedding lookups of one width called many times per step (a DLRM-style model with one `nn.EmbeddingBag` per sparse feature): the calls, their kernels and the bytes each must move, forward and backward.

Each `aten::embedding_bag` / `aten::embedding` call (and its `_embedding_bag_backward` /
`embedding_backward`) launches the same short kernel sequence for its own table; one concatenated
table (ids shifted by each table's first row) or FBGEMM's table-batched embedding runs that sequence
once for all of them. Calls are grouped per step by (direction, op, embedding dim, dtype); per call
its kernels are numbered in launch order, so `slot_us` (Σ over positions of the slowest call's kernel
there) is the time of one call's sequence, the floor of a merged one."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from tracekit.analyzers.costs.attribution import BYTES, KernelCosts
from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.analyzers.detectors.layers import under
from tracekit.analyzers.detectors.optimizer import ITEMSIZE
from tracekit.analyzers.names import matches
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

FORWARD = re.compile(r"^aten::(embedding_bag|embedding)$")
BACKWARD = re.compile(r"^aten::(_embedding_bag_backward|embedding_backward)$")
INDEX_BYTES = 8  # int64 ids and offsets, as nn.Embedding(Bag) takes them
# The concrete input that holds num_weights (the table's rows) and the `sparse` flag, by backward op
# (aten/src/ATen/native/native_functions.yaml: _embedding_bag_backward(grad, indices, offsets,
# offset2bag, bag_size, maximum_indices, num_weights, scale_grad_by_freq, mode, sparse, ...),
# embedding_backward(grad, indices, num_weights, padding_idx, scale_grad_by_freq, sparse)).
NUM_WEIGHTS_AT = {"aten::_embedding_bag_backward": 6, "aten::embedding_backward": 2}
SPARSE_AT = {"aten::_embedding_bag_backward": 9, "aten::embedding_backward": 5}

DIRECTION_FORWARD, DIRECTION_BACKWARD = "forward", "backward"
ACHIEVED_MIN_BYTES = 1 << 20  # kernels that move at least this much set the rank's achieved bandwidth

# --- columns of Patterns.embedding_lookups (one row per step × group) -----------------------------
EL_STEP = "step"
EL_DIRECTION = "direction"  # DIRECTION_FORWARD / DIRECTION_BACKWARD
EL_OP = "op"  # the forward op of the group: aten::embedding_bag / aten::embedding
EL_DIM = "dim"  # embedding width
EL_DTYPE = "dtype"  # the table's (forward) or gradient's (backward) type as recorded
EL_CALLS = "calls"
EL_ROWS = "rows"  # Σ table rows (forward: the weights' first dim; backward: num_weights), -1 unknown
EL_KERNELS = "kernels"  # GPU activities the calls launched
EL_SLOTS = "slots"  # kernels of the longest call: what one merged call launches
EL_TIME_US = "time_us"  # their summed GPU time
EL_SLOT_US = "slot_us"  # Σ over kernel positions of the slowest call's kernel there
EL_BYTES = "bytes"  # compulsory bytes of the calls (ids, rows read, outputs or gradients written)
EL_CPU_US = "cpu_us"  # Σ of the calls' op durations (profiled)
EL_CPU_MAX_US = "cpu_max_us"  # the longest call
# launch calls on the calls' thread between the first call's start and the last call's end that launch
# no kernel of theirs: other work between the lookups (a request's whole forward after its embedding)
EL_BETWEEN = "between"
# the highest bandwidth (B/s) a kernel of the rank moving ≥ ACHIEVED_MIN_BYTES reached (its cost
# model's bytes / its time; NaN: none known), the same in every row
EL_ACHIEVED = "achieved_bps"
LOOKUP_COLUMNS = (EL_STEP, EL_DIRECTION, EL_OP, EL_DIM, EL_DTYPE, EL_CALLS, EL_ROWS, EL_KERNELS, EL_SLOTS,
                  EL_TIME_US, EL_SLOT_US, EL_BYTES, EL_CPU_US, EL_CPU_MAX_US, EL_BETWEEN, EL_ACHIEVED)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(LOOKUP_COLUMNS))


def _numel(d: object) -> int:
    """Elements of a recorded shape; 0 for anything but a list of non-negative ints (untrusted text)."""
    if not isinstance(d, list) or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in d):
        return 0
    return math.prod(int(x) for x in d)


def _call(rank: RankTrace, row: int, name: str) -> tuple[str, int, str, int, float] | None:
    """(forward op, dim, dtype, table rows, bytes) of one call from its recorded inputs; None unreadable."""
    inputs = rank.op_inputs(row)
    dims = inputs.get(tables.OP_INPUT_DIMS) or []
    types = inputs.get(tables.OP_INPUT_TYPES) or []
    concrete = inputs.get(tables.OP_CONCRETE_INPUTS) or []
    if len(dims) < 2 or not _numel(dims[0]) or len(dims[0]) < 2:
        return None  # no weight / grad shape of ints
    dim, dtype = int(dims[0][-1]), str(types[0]) if types else ""
    size = ITEMSIZE.get(dtype, 4)
    ids = _numel(dims[1])
    bag = "bag" in name
    if name in NUM_WEIGHTS_AT:  # backward: grad [bags or ids, D] read, ids read, gradient rows written
        at, sp = NUM_WEIGHTS_AT[name], SPARSE_AT[name]
        value = str(concrete[at]) if len(concrete) > at else ""
        rows = int(value) if value.isdigit() else -1
        sparse = len(concrete) > sp and str(concrete[sp]) == "True"
        written = ids * dim if sparse or rows < 0 else rows * dim
        op = "aten::embedding_bag" if bag else "aten::embedding"
        return op, dim, dtype, rows, float((_numel(dims[0]) + written) * size + ids * INDEX_BYTES)
    rows = int(dims[0][0])
    bags = ids
    if bag:  # one output row per offset, or per row of 2-D ids (no offsets)
        offsets = dims[2] if len(dims) > 2 and isinstance(dims[2], list) and dims[2] else None
        bags = _numel(offsets) if offsets is not None else (_numel(dims[1][:1]) if isinstance(dims[1], list) and len(dims[1]) == 2 else 1)
    return name, dim, dtype, rows, float((ids + bags) * dim * size + (ids + (bags if bag else 0)) * INDEX_BYTES)


def _achieved(dur: np.ndarray, costs: KernelCosts | None) -> float:
    if costs is None or len(costs.table) != len(dur):
        return float("nan")
    moved = costs.table[BYTES].to_numpy(dtype=float)
    ok = (moved >= ACHIEVED_MIN_BYTES) & (dur > 0)
    return float((moved[ok] / dur[ok]).max() * 1e6) if ok.any() else float("nan")


def find_embedding_lookups(rank: RankTrace, steps: StepsOf, costs: KernelCosts | None = None,
                           rows: np.ndarray | None = None) -> tuple[pd.DataFrame, np.ndarray]:
    """(LOOKUP_COLUMNS rows, per rank.gpu row the index of its table row, -1 none) over the selected rows."""
    ops, gpu = rank.ops, rank.gpu
    group_of_row = np.full(len(gpu), -1, dtype=np.int64)
    if not len(ops) or not len(gpu):
        return empty(), group_of_row
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    is_fwd, is_bwd = matches(names, FORWARD), matches(names, BACKWARD)
    if not is_fwd.any():
        return empty(), group_of_row
    top = under(ops, is_fwd | is_bwd, outermost=True)
    gpu_op = gpu[tables.GPU_OP].to_numpy(dtype=np.int64)
    call_of_row = np.where(gpu_op >= 0, top[np.maximum(gpu_op, 0)], -1)
    if rows is not None:
        call_of_row = np.where(rows, call_of_row, -1)
    calls = np.flatnonzero((is_fwd | is_bwd) & (top == np.arange(len(ops))))
    dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    gpu_ts = gpu[tables.GPU_TS].to_numpy(dtype=float)
    op_dur = ops[tables.OP_DUR].to_numpy(dtype=float)
    by_call = pd.Series(np.flatnonzero(call_of_row >= 0)).groupby(call_of_row[call_of_row >= 0])
    kernels_of = {int(c): g.to_numpy() for c, g in by_call}
    groups: dict[tuple[int, str, str, int, str], list[int]] = {}
    info: dict[int, tuple[int, float]] = {}
    for c in calls.tolist():
        name = str(names[c])
        read = _call(rank, c, name)
        if read is None or c not in kernels_of:
            continue
        op, dim, dtype, table_rows, nbytes = read
        direction = DIRECTION_BACKWARD if name in NUM_WEIGHTS_AT else DIRECTION_FORWARD
        groups.setdefault((int(steps.ops[c]), direction, op, dim, dtype), []).append(c)
        info[c] = (table_rows, nbytes)
    op_ts, op_end, op_tid = (ops[c].to_numpy() for c in (tables.OP_TS, tables.OP_END, tables.OP_TID))
    rt = rank.runtime
    rt_ts, rt_tid = rt[tables.RT_TS].to_numpy(dtype=float), rt[tables.RT_TID].to_numpy()
    is_launch = np.isin(rt[tables.RT_KIND].to_numpy(dtype=object), tables.LAUNCH_KINDS)
    launch = gpu[tables.GPU_LAUNCH].to_numpy(dtype=np.int64)
    recs: list[dict[str, object]] = []
    achieved = _achieved(dur, costs)
    for (s, direction, op, dim, dtype), members in sorted(groups.items()):
        seqs = [kernels_of[c][np.argsort(gpu_ts[kernels_of[c]], kind="stable")] for c in members]
        slots = max(len(q) for q in seqs)
        slot_us = sum(max((float(dur[q[p]]) for q in seqs if p < len(q)), default=0.0) for p in range(slots))
        for c in members:
            group_of_row[kernels_of[c]] = len(recs)
        lo, hi, tid = float(op_ts[members].min()), float(op_end[members].max()), op_tid[members[0]]
        own = {int(launch[k]) for q in seqs for k in q.tolist() if launch[k] >= 0}
        inside = np.flatnonzero(is_launch & (rt_tid == tid) & (rt_ts >= lo) & (rt_ts <= hi))
        sizes = [info[c][0] for c in members]
        recs.append({EL_STEP: s, EL_DIRECTION: direction, EL_OP: op, EL_DIM: dim, EL_DTYPE: dtype,
                     EL_CALLS: len(members), EL_ROWS: sum(sizes) if min(sizes) >= 0 else -1,
                     EL_KERNELS: sum(len(q) for q in seqs), EL_SLOTS: slots,
                     EL_TIME_US: float(sum(dur[q].sum() for q in seqs)), EL_SLOT_US: slot_us,
                     EL_BYTES: sum(info[c][1] for c in members),
                     EL_CPU_US: float(op_dur[members].sum()), EL_CPU_MAX_US: float(op_dur[members].max()),
                     EL_BETWEEN: int(sum(1 for i in inside.tolist() if i not in own)), EL_ACHIEVED: achieved})
    return (pd.DataFrame(recs, columns=list(LOOKUP_COLUMNS)) if recs else empty()), group_of_row
