"""Optimizer steps: each `Optimizer.step#<Name>.step` range, the kernels launched inside it and how they update the parameters."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.analyzers.names import matches
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

STEP_RANGE = re.compile(r"^Optimizer\.step#(\w+)\.step$")  # torch.optim's record_function around step()
FUSED = re.compile(r"fused", re.IGNORECASE)  # FusedAdamMathFunctor, fused_adamw, FusedSgd...
MULTI_TENSOR = re.compile(r"multi_tensor_apply")  # the _foreach_* kernels (foreach=True)

# How an optimizer step updates its parameters, from the kernels launched inside it.
PER_PARAMETER = "per-parameter"  # one small elementwise kernel per op per tensor (foreach=False)
MULTI_TENSOR_KIND = "multi-tensor"  # _foreach_* ops: one launch per op per group of tensors (foreach=True)
FUSED_KIND = "fused"  # one fused kernel per group of tensors does the whole update (fused=True)

# Element size of an op input type as the profiler writes it.
ITEMSIZE = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "c10::Float8_e4m3fn": 1}

# --- columns of Patterns.optimizer (one row per optimizer-step range) -----------------------------
OS_STEP = "step"
OS_OPTIMIZER = "optimizer"  # the class name in the range: AdamW, SGD...
OS_OP = "op"  # the range's name, Optimizer.step#AdamW.step
OS_CPU_US = "cpu_us"  # the range's duration on its thread (profiled)
OS_CPU_EVENTS = "cpu_events"  # recorded CPU events inside it: ops, runtime calls, nested annotations
OS_KERNELS = "kernels"  # GPU activities launched inside it
OS_LAUNCH_US = "launch_mean_us"  # mean duration of its launch calls (profiled; NaN without any)
OS_GPU_US = "gpu_us"  # their summed GPU time
OS_KIND = "kind"  # PER_PARAMETER, MULTI_TENSOR_KIND or FUSED_KIND
OS_TENSORS = "tensors"  # parameter tensors updated (per-parameter steps: calls of the least repeated op)
OS_ELEMENTS = "elements"  # their elements (NaN unknown)
OS_ITEMSIZE = "itemsize"  # bytes per parameter element (NaN unknown)
OPTIMIZER_COLUMNS = (OS_STEP, OS_OPTIMIZER, OS_OP, OS_CPU_US, OS_CPU_EVENTS, OS_KERNELS, OS_LAUNCH_US, OS_GPU_US,
                     OS_KIND, OS_TENSORS, OS_ELEMENTS, OS_ITEMSIZE)


def _label(ts: np.ndarray, tid: np.ndarray, starts: np.ndarray, ends: np.ndarray,
           range_tid: np.ndarray) -> np.ndarray:
    """For each row (time `ts` on thread `tid`): the index of the range that holds it, or -1.
    Ranges of one thread do not overlap (one optimizer step at a time)."""
    label = np.full(len(ts), -1, dtype=np.int64)
    for thread in np.unique(range_tid):
        rows = np.flatnonzero(tid == thread)
        order = rows[np.argsort(ts[rows], kind="stable")]
        sorted_ts = ts[order]
        for i in np.flatnonzero(range_tid == thread):
            lo = np.searchsorted(sorted_ts, starts[i], side="left")
            hi = np.searchsorted(sorted_ts, ends[i], side="right")
            label[order[lo:hi]] = i
    return label


def _kind(kernel_names: list[str]) -> str:
    names = np.asarray(kernel_names, dtype=object)
    if matches(names, FUSED).any():
        return FUSED_KIND
    if matches(names, MULTI_TENSOR).any():
        return MULTI_TENSOR_KIND
    return PER_PARAMETER


def _parameters(rank: RankTrace, op_rows: np.ndarray) -> tuple[float, float, float]:
    """(tensors, elements, itemsize) of a per-parameter step from the ops that launched its kernels:
    every tensor runs the same ops once or more, so the least repeated op runs once per tensor and
    its first input is the tensor."""
    if not len(op_rows):
        return math.nan, math.nan, math.nan
    names = rank.ops[tables.OP_NAME].to_numpy(dtype=object)[op_rows]
    uniques, counts = np.unique(names, return_counts=True)
    once = op_rows[names == uniques[int(np.argmin(counts))]]
    elements, itemsize = 0, math.nan
    for row in once.tolist():
        inputs = rank.op_inputs(int(row))
        dims = (inputs.get(tables.OP_INPUT_DIMS) or [None])[0]
        types = inputs.get(tables.OP_INPUT_TYPES) or [None]
        if not isinstance(dims, list) or not all(isinstance(d, int) for d in dims):
            return float(len(once)), math.nan, math.nan
        elements += math.prod(dims)
        itemsize = float(ITEMSIZE.get(str(types[0]), math.nan))
    return float(len(once)), float(elements), itemsize


def find_optimizer_steps(rank: RankTrace, steps: StepsOf) -> tuple[pd.DataFrame, np.ndarray]:
    """One row per optimizer-step range (OPTIMIZER_COLUMNS), and a bool per rank.gpu row: launched
    inside one of them."""
    an = rank.annotations
    names = an[tables.AN_NAME].to_numpy(dtype=object)
    is_range = matches(names, STEP_RANGE) & ~an[tables.AN_GPU].to_numpy(dtype=bool)
    in_optimizer = np.zeros(len(rank.gpu), dtype=bool)
    if not is_range.any():
        return pd.DataFrame(columns=list(OPTIMIZER_COLUMNS)), in_optimizer
    picked = np.flatnonzero(is_range)
    starts = an[tables.AN_TS].to_numpy(dtype=float)[picked]
    ends = an[tables.AN_END].to_numpy(dtype=float)[picked]
    range_tid = an[tables.AN_TID].to_numpy()[picked]
    ops, rt, gpu = rank.ops, rank.runtime, rank.gpu
    op_label = _label(ops[tables.OP_TS].to_numpy(dtype=float), ops[tables.OP_TID].to_numpy(), starts, ends, range_tid)
    rt_label = _label(rt[tables.RT_TS].to_numpy(dtype=float), rt[tables.RT_TID].to_numpy(), starts, ends, range_tid)
    an_label = _label(an[tables.AN_TS].to_numpy(dtype=float), an[tables.AN_TID].to_numpy(), starts, ends, range_tid)
    launch = gpu[tables.GPU_LAUNCH].to_numpy(dtype=np.int64)
    gpu_label = np.where(launch >= 0, rt_label[np.clip(launch, 0, None)] if len(rt_label) else -1, -1)
    in_optimizer = gpu_label >= 0
    gpu_dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    is_launch = np.isin(rt[tables.RT_KIND].to_numpy(dtype=object), tables.LAUNCH_KINDS)
    rt_dur = rt[tables.RT_DUR].to_numpy(dtype=float)
    gpu_op = gpu[tables.GPU_OP].to_numpy(dtype=np.int64)
    gpu_names = gpu[tables.GPU_NAME].to_numpy(dtype=object)
    rows = []
    for i, row in enumerate(picked.tolist()):
        mine = gpu_label == i
        kind = _kind(gpu_names[mine].tolist())
        launching = np.unique(gpu_op[mine & (gpu_op >= 0)])
        tensors, elements, itemsize = (_parameters(rank, launching) if kind == PER_PARAMETER
                                       else (math.nan, math.nan, math.nan))
        found = STEP_RANGE.match(str(names[row]))
        launches = rt_dur[(rt_label == i) & is_launch]
        rows.append({OS_STEP: int(steps.annotations[row]), OS_OPTIMIZER: found.group(1) if found else "",
                     OS_OP: str(names[row]), OS_CPU_US: float(ends[i] - starts[i]),
                     OS_CPU_EVENTS: int((op_label == i).sum() + (rt_label == i).sum() + (an_label == i).sum() - 1),
                     OS_KERNELS: int(mine.sum()),
                     OS_LAUNCH_US: float(launches.mean()) if len(launches) else math.nan, OS_GPU_US: float(gpu_dur[mine].sum()), OS_KIND: kind,
                     OS_TENSORS: tensors, OS_ELEMENTS: elements, OS_ITEMSIZE: itemsize})
    return pd.DataFrame(rows, columns=list(OPTIMIZER_COLUMNS)), in_optimizer
