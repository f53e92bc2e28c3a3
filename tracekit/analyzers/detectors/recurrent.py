"""RNN cells stepped in a Python loop: `nn.LSTMCell` / `GRUCell` / `RNNCell` calls per step, the kernels launched while the loop runs (forward and backward) and what each of them does.

A cell module runs one time step per call (`aten::lstm_cell` → two GEMMs and the fused gate kernel
`_thnn_fused_lstm_cell`; `gru_cell`, `rnn_tanh_cell`, `rnn_relu_cell` alike), so a sequence of T
steps over L layers is T × L calls, each launched from Python, and its backward as many autograd
nodes with their GEMMs and the gradient accumulations between them. The loop is read as windows: on
each thread of a step, from the first cell call (forward) or cell backward node (backward) to the last;
every kernel launched inside a window belongs to the loop. `nn.LSTM` / `nn.GRU` run the whole
sequence in one `aten::_cudnn_rnn` call (and one `_cudnn_rnn_backward`): no cell op, no window."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit.analyzers.costs.attribution import FLOPS, KernelCosts
from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.analyzers.detectors.layers import under
from tracekit.analyzers.kernels import GEMM
from tracekit.analyzers.names import matches
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

# The ops of one cell call (ATen's RNN cells, aten/src/ATen/native/RNN.cpp; the _thnn_fused_* gate
# kernels they call on CUDA) and the backward nodes that only a cell's fused gates have. RNNCell
# (rnn_tanh_cell) has no node of its own in the backward: its loop is read from the forward only.
CELL = re.compile(r"^aten::(lstm_cell|gru_cell|rnn_tanh_cell|rnn_relu_cell|_thnn_fused_lstm_cell|_thnn_fused_gru_cell)$")
CELL_BACKWARD = re.compile(r"^autograd::engine::evaluate_function: ThnnFused(Lstm|Gru)CellBackward\d*$")
CELL_BACKWARD_OP = re.compile(r"^(ThnnFused(Lstm|Gru)CellBackward\d*|aten::_thnn_fused_(lstm|gru)_cell_backward(_impl)?)$")
ANCESTOR_DEPTH = 6  # how far above a kernel's op a cell op is looked for

# What a kernel launched in the loop does (per rank.gpu row; Patterns.rnn_rows)
ROW_NONE = 0  # outside any loop window
ROW_GEMM = 1  # a GEMM (the cell's input and recurrent products, their gradients)
ROW_CELL = 2  # a kernel of the cell's own op (fused gates, bias-gradient sums)
ROW_OTHER = 3  # anything else in the window: gradient accumulation, slicing and stacking copies, fills

# --- columns of Patterns.rnn_cells (one row per step with cell calls) -----------------------------
RC_STEP = "step"
RC_CELL = "cell"  # the most frequent cell op, "aten::lstm_cell"
RC_CALLS = "calls"  # cell calls in the step (time steps × layers)
RC_BATCH = "batch"  # rows of the cell input
RC_INPUT = "input_size"
RC_HIDDEN = "hidden_size"  # from w_hh (input, hx, w_ih, w_hh, ... of every cell op)
RC_DTYPE = "dtype"  # the input's type as recorded ("float", "c10::BFloat16")
RC_WINDOWS = "windows"  # loop windows (threads × forward/backward)
RC_BACKWARD = "backward_windows"  # of them, backward ones (the cell backward nodes' threads)
RC_WINDOW_US = "window_us"  # their summed wall time (profiled)
RC_LAUNCHES = "launches"  # launch calls inside them
RC_KERNELS = "kernels"  # GPU activities they launched
RC_GPU_US = "gpu_us"  # their summed GPU time
RC_GEMM_KERNELS = "gemm_kernels"
RC_GEMM_US = "gemm_us"
RC_GEMM_FLOPS = "gemm_flops"  # NaN where no GEMM's FLOPs are known
RC_CELL_US = "cell_us"  # ROW_CELL kernels' time
RC_OTHER_US = "other_us"  # ROW_OTHER kernels' time
# kernels of the forward windows that no cell op launched: work in the loop besides the cells (an
# attention or output layer per time step, whose result the next step reads)
RC_FOREIGN = "forward_foreign"
RC_REF_RATE = "ref_flops_per_us"  # FLOP rate of the rank's largest GEMM kernel (NaN: none known)
RNN_COLUMNS = (RC_STEP, RC_CELL, RC_CALLS, RC_BATCH, RC_INPUT, RC_HIDDEN, RC_DTYPE, RC_WINDOWS, RC_BACKWARD, RC_WINDOW_US,
               RC_LAUNCHES, RC_KERNELS, RC_GPU_US, RC_GEMM_KERNELS, RC_GEMM_US, RC_GEMM_FLOPS, RC_CELL_US,
               RC_OTHER_US, RC_FOREIGN, RC_REF_RATE)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(RNN_COLUMNS))


def _ref_rate(classes: np.ndarray, dur: np.ndarray, costs: KernelCosts | None) -> float:
    """FLOPs per µs of the GEMM kernel with the most FLOPs (NaN: no GEMM with known FLOPs)."""
    if costs is None or len(costs.table) != len(dur):
        return float("nan")
    flops = costs.table[FLOPS].to_numpy(dtype=float)
    ok = (classes == GEMM) & np.isfinite(flops) & (dur > 0)
    if not ok.any():
        return float("nan")
    i = int(np.flatnonzero(ok)[np.argmax(flops[ok])])
    return float(flops[i] / dur[i])


def _windows(ts: np.ndarray, end: np.ndarray, tid: np.ndarray, step: np.ndarray, picked: np.ndarray,
             ) -> list[tuple[int, object, float, float]]:
    """(step, thread, start, end) of each window: the span of the picked ops of one step on one thread."""
    out = []
    frame = pd.DataFrame({"step": step[picked], "tid": tid[picked], "ts": ts[picked], "end": end[picked]})
    for (s, t), g in frame.groupby(["step", "tid"], sort=True):
        out.append((int(s), t, float(g["ts"].min()), float(g["end"].max())))
    return out


def find_rnn_cells(rank: RankTrace, classes: np.ndarray, steps: StepsOf, costs: KernelCosts | None = None,
                   rows: np.ndarray | None = None) -> tuple[pd.DataFrame, np.ndarray]:
    """(RNN_COLUMNS rows, per rank.gpu row its ROW_* code) over the selected kernel rows."""
    ops, gpu, rt = rank.ops, rank.gpu, rank.runtime
    codes = np.zeros(len(gpu), dtype=np.int8)
    if not len(ops) or not len(gpu):
        return empty(), codes
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    is_cell = matches(names, CELL)
    if not is_cell.any():
        return empty(), codes
    parent = ops[tables.OP_PARENT].to_numpy(dtype=np.int64)
    outer = is_cell & ~np.where(parent >= 0, is_cell[np.maximum(parent, 0)], False)
    is_back = matches(names, CELL_BACKWARD)
    ts, end = ops[tables.OP_TS].to_numpy(dtype=float), ops[tables.OP_END].to_numpy(dtype=float)
    tid, op_step = ops[tables.OP_TID].to_numpy(), steps.ops
    back = _windows(ts, end, tid, op_step, np.flatnonzero(is_back))
    fwd = _windows(ts, end, tid, op_step, np.flatnonzero(outer))
    windows = fwd + back
    back_of_step: dict[int, int] = {}
    for w in back:
        back_of_step[w[0]] = back_of_step.get(w[0], 0) + 1
    rt_ts, rt_tid = rt[tables.RT_TS].to_numpy(dtype=float), rt[tables.RT_TID].to_numpy()
    is_launch = np.isin(rt[tables.RT_KIND].to_numpy(dtype=object), tables.LAUNCH_KINDS)
    in_window = np.zeros(len(rt), dtype=bool)
    in_forward = np.zeros(len(rt), dtype=bool)
    for _, t, lo, hi in fwd:
        in_forward |= (rt_tid == t) & (rt_ts >= lo) & (rt_ts <= hi)
    window_of_step: dict[int, list[float]] = {}
    for s, t, lo, hi in windows:
        in_window |= (rt_tid == t) & (rt_ts >= lo) & (rt_ts <= hi)
        window_of_step.setdefault(s, []).append(hi - lo)
    launch = gpu[tables.GPU_LAUNCH].to_numpy(dtype=np.int64)
    mine = (launch >= 0) & in_window[np.maximum(launch, 0)]
    if rows is not None:
        mine &= rows
    own = under(ops, is_cell | matches(names, CELL_BACKWARD_OP), ANCESTOR_DEPTH) >= 0
    gpu_op = gpu[tables.GPU_OP].to_numpy(dtype=np.int64)
    of_cell = (gpu_op >= 0) & own[np.maximum(gpu_op, 0)]
    foreign = (launch >= 0) & in_forward[np.maximum(launch, 0)] & ~of_cell
    codes[mine] = np.where(classes[mine] == GEMM, ROW_GEMM, np.where(of_cell[mine], ROW_CELL, ROW_OTHER))
    dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    flops = (costs.table[FLOPS].to_numpy(dtype=float) if costs is not None and len(costs.table) == len(gpu)
             else np.full(len(gpu), np.nan))
    ref = _ref_rate(classes, dur, costs)
    gpu_step = steps.gpu
    launches_step = steps.runtime
    recs = []
    for s in sorted(window_of_step):
        calls = np.flatnonzero(outer & (op_step == s))
        if not len(calls):
            continue
        k = mine & (gpu_step == s)
        if not k.any():
            continue  # a step outside the selected rows
        cell_names, counts = np.unique(names[calls].astype(str), return_counts=True)
        first = rank.op_inputs(int(calls[0]))
        dims = first.get(tables.OP_INPUT_DIMS) or []
        types = first.get(tables.OP_INPUT_TYPES) or [None]
        x = [v for v in dims[0] if isinstance(v, int)] if dims and isinstance(dims[0], list) else []
        h = [v for v in dims[3] if isinstance(v, int)] if len(dims) > 3 and isinstance(dims[3], list) else []  # w_hh [gates × H, H]
        gemm = k & (codes == ROW_GEMM)
        gemm_flops = flops[gemm]
        recs.append({RC_STEP: s, RC_CELL: str(cell_names[int(np.argmax(counts))]), RC_CALLS: len(calls),
                     RC_BATCH: int(x[0]) if len(x) == 2 else -1, RC_INPUT: int(x[-1]) if x else -1,
                     RC_HIDDEN: int(h[-1]) if h else -1, RC_DTYPE: str(types[0]),
                     RC_WINDOWS: len(window_of_step[s]), RC_BACKWARD: back_of_step.get(s, 0), RC_WINDOW_US: float(sum(window_of_step[s])),
                     RC_LAUNCHES: int((in_window & is_launch & (launches_step == s)).sum()),
                     RC_KERNELS: int(k.sum()), RC_GPU_US: float(dur[k].sum()),
                     RC_GEMM_KERNELS: int(gemm.sum()), RC_GEMM_US: float(dur[gemm].sum()),
                     RC_GEMM_FLOPS: float(np.nansum(gemm_flops)) if np.isfinite(gemm_flops).any() else float("nan"),
                     RC_CELL_US: float(dur[k & (codes == ROW_CELL)].sum()),
                     RC_OTHER_US: float(dur[k & (codes == ROW_OTHER)].sum()),
                     RC_FOREIGN: int((foreign & (gpu_step == s)).sum()), RC_REF_RATE: ref})
    return (pd.DataFrame(recs, columns=list(RNN_COLUMNS)) if recs else empty()), codes
