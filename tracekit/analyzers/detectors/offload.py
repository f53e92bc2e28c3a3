"""Optimizer steps run on the host while the model runs on the GPU: an `Optimizer.step` range that launches no kernels, with gradients copied down and weights copied up around it."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.analyzers.detectors.optimizer import ITEMSIZE, STEP_RANGE
from tracekit.analyzers.names import matches
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

# Copy directions by the memcpy activity's name: "Memcpy DtoH (Device -> Pageable)",
# "Memcpy HtoD (Pinned -> Device)"; device-to-device copies are neither.
D2H = re.compile(r"DtoH|Device\s*->\s*(?:Pageable|Pinned)")
H2D = re.compile(r"HtoD|(?:Pageable|Pinned)\s*->\s*Device")
PAGEABLE = re.compile(r"Pageable")
# A copy of this many bytes or fewer is a scalar read (.item(), a loss logged) or a step counter,
# not a parameter or its gradient.
SCALAR_BYTES = 16
# "Launches no (or almost no) GPU kernels": kernels launched inside the range at most this share of
# its recorded CPU events. A GPU optimizer launches one or more kernels per op (a per-parameter
# AdamW: ~1 kernel per 2 events, op + launch call; foreach: ~1 per 3); a CPU one launches none.
HOST_KERNEL_SHARE = 0.05
# Both directions move at least this much per step, within this factor of each other: the gradients
# down and the weights up are the same parameters (a bf16 model with fp32 host masters copies 2 and 4
# bytes per parameter each way in some order: factor 2; DeepSpeed's flat partitions, the same).
MIN_COPY_BYTES = 1 << 20
MAX_BYTES_RATIO = 4.0
DEFAULT_ITEMSIZE = 4.0  # a weight copy whose op records no dtype: fp32

# --- columns of Patterns.offload (one row per optimizer step run on the host) --------------------
OF_STEP = "step"
OF_OPTIMIZER = "optimizer"  # the class name in the range: AdamW, DeepSpeedCPUAdam...
OF_OP = "op"  # the range's name
OF_TS = "ts"  # the range on its thread (µs, trace clock)
OF_END = "end"
OF_HOST_US = "host_us"  # its duration: the optimizer's host time
OF_KERNELS = "kernels"  # kernels launched inside it (0 or almost)
OF_STEP_KERNELS = "step_kernels"  # kernels of the step outside it: the model's, on the GPU
OF_D2H = "d2h_copies"  # device-to-host copies (the gradients) launched before the range's end
OF_D2H_BYTES = "d2h_bytes"
OF_H2D = "h2d_copies"  # host-to-device copies (the weights) launched after the range's start
OF_H2D_BYTES = "h2d_bytes"
OF_MATCHED = "size_matched"  # copies whose byte size a copy the other way has too (one tensor, both ways)
OF_PAGEABLE = "pageable"  # copies from or to pageable host memory (the rest pinned)
OF_COPY_US = "copy_us"  # the copies' GPU time
OF_CALL_US = "call_us"  # the copy ops' runtime calls outside the range (launch calls, their syncs)
OF_PARAMS = "params"  # parameters updated: the weight copies' elements (their op's dtype; else fp32)
OFFLOAD_COLUMNS = (OF_STEP, OF_OPTIMIZER, OF_OP, OF_TS, OF_END, OF_HOST_US, OF_KERNELS, OF_STEP_KERNELS, OF_D2H,
                   OF_D2H_BYTES, OF_H2D, OF_H2D_BYTES, OF_MATCHED, OF_PAGEABLE, OF_COPY_US, OF_CALL_US, OF_PARAMS)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(OFFLOAD_COLUMNS))


@dataclass(frozen=True)
class _Counts:
    """Recorded CPU events (ops, runtime calls, annotations) per thread, their start times sorted."""

    by_thread: dict[object, np.ndarray]

    @classmethod
    def of(cls, *columns: pd.Series) -> _Counts:
        ts = np.concatenate([c.to_numpy(dtype=float) for c in columns[0::2]])
        tid = np.concatenate([c.to_numpy() for c in columns[1::2]])
        return cls({t: np.sort(ts[tid == t]) for t in pd.unique(tid).tolist()})

    def events(self, tid: object, start: float, end: float) -> int:
        """Events of thread `tid` starting in [start, end] (the range's own annotation among them)."""
        ts = self.by_thread.get(tid.item() if isinstance(tid, np.generic) else tid)
        if ts is None:
            return 0
        return int(np.searchsorted(ts, end, side="right") - np.searchsorted(ts, start, side="left"))


def _matched(down: np.ndarray, up: np.ndarray) -> int:
    """Copies (both directions) whose byte size is matched by one the other way, pair by pair."""
    pairs = Counter(down.tolist()) & Counter(up.tolist())
    return 2 * sum(pairs.values())


def _params(rank: RankTrace, op_rows: np.ndarray, nbytes: np.ndarray) -> float:
    """Elements of the weight copies: bytes / the item size of their op's first input (the GPU
    tensor written), fp32 where the op or its dtype is unknown."""
    size = np.full(len(nbytes), DEFAULT_ITEMSIZE)
    known = op_rows >= 0
    if known.any():
        types = rank.input_values(op_rows[known], tables.OP_INPUT_TYPES)
        first = [t[0] if isinstance(t, list) and t else None for t in types]
        size[known] = [ITEMSIZE.get(str(t), DEFAULT_ITEMSIZE) for t in first]
    return float((nbytes / size).sum())


def find_host_steps(rank: RankTrace, steps: StepsOf) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, np.ndarray]:
    """Optimizer steps run on the host while the model runs on the GPU: an `Optimizer.step#<Name>.step`
    range whose launches are at most HOST_KERNEL_SHARE of its recorded CPU events, in a step with
    kernels outside it, with device-to-host copies launched before its end and host-to-device copies
    launched after its start (each > SCALAR_BYTES) of ≥ MIN_COPY_BYTES each way, within
    MAX_BYTES_RATIO. Returns (OFFLOAD_COLUMNS rows; per rank.gpu row: one of their copies; per
    rank.runtime row: a call of their copies' ops (the copy, its syncs); per rank.runtime row: on the
    thread of such a range)."""
    gpu, rt, an, ops = rank.gpu, rank.runtime, rank.annotations, rank.ops
    copies, calls, thread = (np.zeros(len(gpu), dtype=bool), np.zeros(len(rt), dtype=bool),
                             np.zeros(len(rt), dtype=bool))
    if not len(an) or not len(gpu) or not len(rt):
        return empty(), copies, calls, thread
    names = an[tables.AN_NAME].to_numpy(dtype=object)
    picked = np.flatnonzero(matches(names, STEP_RANGE) & ~an[tables.AN_GPU].to_numpy(dtype=bool))
    if not len(picked):
        return empty(), copies, calls, thread
    rt_ts, rt_tid = rt[tables.RT_TS].to_numpy(dtype=float), rt[tables.RT_TID].to_numpy()
    rt_op, rt_dur = rt[tables.RT_OP].to_numpy(), rt[tables.RT_DUR].to_numpy(dtype=float)
    launch = gpu[tables.GPU_LAUNCH].to_numpy(dtype=np.int64)
    linked = launch >= 0
    at = np.clip(launch, 0, None)
    call_ts, call_tid = np.where(linked, rt_ts[at], np.nan), rt_tid[at]
    kind = gpu[tables.GPU_KIND].to_numpy(dtype=object)
    is_kernel, is_copy = kind == tables.KIND_KERNEL, (kind == tables.KIND_MEMCPY) & linked
    gpu_names = gpu[tables.GPU_NAME].to_numpy(dtype=object)
    nbytes = np.nan_to_num(gpu[tables.GPU_BYTES].to_numpy(dtype=float))
    d2h = is_copy & matches(gpu_names, D2H) & (nbytes > SCALAR_BYTES)
    h2d = is_copy & ~d2h & matches(gpu_names, H2D) & (nbytes > SCALAR_BYTES)
    pageable = matches(gpu_names, PAGEABLE)
    gpu_dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    counts = _Counts.of(ops[tables.OP_TS], ops[tables.OP_TID], rt[tables.RT_TS], rt[tables.RT_TID],
                        an[tables.AN_TS], an[tables.AN_TID])
    an_ts, an_end, an_tid = (an[tables.AN_TS].to_numpy(dtype=float), an[tables.AN_END].to_numpy(dtype=float),
                             an[tables.AN_TID].to_numpy())
    rows = []
    for row in picked.tolist():
        start, end = float(an_ts[row]), float(an_end[row])
        tid, step = an_tid[row], int(steps.annotations[row])
        in_step = np.flatnonzero(steps.gpu == step)  # the step's GPU rows
        inside = (call_tid[in_step] == tid) & (call_ts[in_step] >= start) & (call_ts[in_step] <= end)
        kernels = int((is_kernel[in_step] & inside).sum())
        outside = int((is_kernel[in_step] & ~inside).sum())
        if kernels > HOST_KERNEL_SHARE * max(counts.events(tid, start, end) - 1, 1) or not outside:
            continue  # a GPU optimizer (fused_optimizer's), or no model on the GPU
        down = in_step[d2h[in_step] & (call_ts[in_step] < end)]
        up = in_step[h2d[in_step] & (call_ts[in_step] >= start)]
        low, high = sorted((float(nbytes[down].sum()), float(nbytes[up].sum())))
        if low < MIN_COPY_BYTES or high > MAX_BYTES_RATIO * low:
            continue
        down, up = down[~copies[down]], up[~copies[up]]  # a copy an earlier range of the step claimed counts once
        mine = np.concatenate([down, up])
        ops_of = np.unique(rt_op[launch[mine]])
        own = np.isin(rt_op, ops_of[ops_of >= 0])
        own[launch[mine]] = True
        own &= ~calls
        in_range = (rt_tid == tid) & (rt_ts >= start) & (rt_ts <= end)
        copies[mine] = True
        calls |= own
        thread |= rt_tid == tid
        found = STEP_RANGE.match(str(names[row]))
        rows.append({OF_STEP: step, OF_OPTIMIZER: found.group(1) if found else "", OF_OP: str(names[row]),
                     OF_TS: start, OF_END: end, OF_HOST_US: end - start, OF_KERNELS: kernels,
                     OF_STEP_KERNELS: outside, OF_D2H: len(down), OF_D2H_BYTES: float(nbytes[down].sum()),
                     OF_H2D: len(up), OF_H2D_BYTES: float(nbytes[up].sum()),
                     OF_MATCHED: _matched(nbytes[down], nbytes[up]), OF_PAGEABLE: int(pageable[mine].sum()),
                     OF_COPY_US: float(gpu_dur[mine].sum()), OF_CALL_US: float(rt_dur[own & ~in_range].sum()),
                     OF_PARAMS: _params(rank, rt_op[launch[up]], nbytes[up])})
    return (pd.DataFrame(rows, columns=list(OFFLOAD_COLUMNS)) if rows else empty()), copies, calls, thread
