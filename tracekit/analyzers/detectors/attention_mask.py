"""Scaled-dot-product attention called with a square attention mask (self-attention, Lq == Lk) and is_causal=False.

The fused SDPA kernels skip the tiles above the diagonal only when told `is_causal=True`; given an
explicit mask they run every tile (and a mask rules the flash kernels out). One row per distinct
call signature, over the kernels of the headline steps: the kernels launched under the call (its
descendants' too), which SDPA backend ran (from their names) and whether the step builds the mask
with aten::tril / aten::triu (then it is causal for certain)."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from tracekit.analyzers.costs.op_args import OpArgs
from tracekit.analyzers.kernels import ATTENTION
from tracekit.analyzers.names import matches
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

# op -> (index of the mask / attn_bias argument, of is_causal, of the query; backward?)
MASKED_OPS: dict[str, tuple[int, int, int, bool]] = {
    "aten::scaled_dot_product_attention": (3, 5, 0, False),
    "aten::_scaled_dot_product_efficient_attention": (3, 6, 0, False),
    "aten::_scaled_dot_product_cudnn_attention": (3, 6, 0, False),
    "aten::_scaled_dot_product_attention_math": (3, 5, 0, False),
    "aten::_scaled_dot_product_efficient_attention_backward": (4, 11, 1, True),
    "aten::_scaled_dot_product_cudnn_attention_backward": (8, 14, 1, True),
}
BACKWARD_FACTOR = 2.5  # costs/models_matmul.py ATTENTION_BWD_FACTOR: 5 matmuls against the forward's 2
ANCESTOR_DEPTH = 8  # how far up from a kernel's op the SDPA call is looked for
TRIANGLE_OPS = re.compile(r"^aten::(tril|triu)_?$")

# The SDPA backend that ran, from the kernel names under the call (first match wins).
FLASH, CUDNN, EFFICIENT, MATH = "flash", "cudnn", "efficient", "math"
FUSED_BACKENDS = (FLASH, CUDNN, EFFICIENT)
BACKENDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (FLASH, re.compile(r"flash_fwd|flash_bwd|pytorch_flash")),
    (CUDNN, re.compile(r"cudnn|sdpa")),
    (EFFICIENT, re.compile(r"fmha_cutlass|efficient_attention|AttentionKernel<|AttentionBackwardKernel<")),
)

# --- columns of Patterns.masked_attention (one row per distinct masked call signature) -----------
MA_OP = "op"  # the outermost SDPA op of the call
MA_SHAPES = "shapes"  # "q [8, 16, 2048, 64], k [8, 16, 2048, 64]"
MA_MASK = "mask"  # the mask's shape, "[2048, 2048]"
MA_DTYPE = "dtype"  # the query's
MA_BACKEND = "backend"  # FLASH, CUDNN, EFFICIENT or MATH
MA_BACKWARD = "backward"  # the call is an SDPA backward op
MA_TRIANGLE = "triangle"  # the steps build a mask of that shape with aten::tril / aten::triu
MA_CALLS = "calls"  # calls in the headline steps
MA_KERNELS = "kernels"  # kernels launched under them
MA_TIME_US = "time_us"  # their summed time
MA_ATTN_US = "attention_us"  # the part of it in attention-class kernels
MA_FLOPS = "flops"  # 2·B·H·Lq·Lk·(E+Ev) per call (× BACKWARD_FACTOR for a backward op), no causal discount, summed
# what the kernels read of the mask: the (Lq, Lk) tile of every batch and head (B·H·Lq·Lk elements of
# its dtype, 2 bytes when unrecorded) per call, summed: a fused kernel reads the mask tile per head
# even where the mask broadcasts over heads
MA_MASK_BYTES = "mask_bytes"
MASKED_COLUMNS = (MA_OP, MA_SHAPES, MA_MASK, MA_DTYPE, MA_BACKEND, MA_BACKWARD, MA_TRIANGLE, MA_CALLS,
                  MA_KERNELS, MA_TIME_US, MA_ATTN_US, MA_FLOPS, MA_MASK_BYTES)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(MASKED_COLUMNS))


def _shape(v: object) -> tuple[int, ...] | None:
    if isinstance(v, (list, tuple)) and v and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return tuple(int(x) for x in v)
    return None


def _fmt(dims: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]"


def outermost_call(parent: np.ndarray, is_call: np.ndarray) -> np.ndarray:
    """For each op row: the outermost SDPA-call op among it and its ANCESTOR_DEPTH ancestors, or -1."""
    n = len(parent)
    top = np.full(n, -1, dtype=np.int64)
    anc = np.arange(n, dtype=np.int64)
    for _ in range(ANCESTOR_DEPTH + 1):
        valid = anc >= 0
        if not valid.any():
            break
        safe = np.where(valid, anc, 0)
        hit = valid & is_call[safe]
        top[hit] = anc[hit]
        anc = np.where(valid, parent[safe], -1)
    return top


def _call(rank: RankTrace, row: int, name: str) -> tuple[dict[str, object], int] | None:
    """(the call's columns, its sequence length) when it has a square mask matching Lq == Lk and is_causal is not set, else None."""
    mask_i, causal_i, qi, backward = MASKED_OPS[name]
    inputs = rank.op_inputs(row)
    a = OpArgs.of(inputs.get(tables.OP_INPUT_DIMS), inputs.get(tables.OP_INPUT_TYPES),
                  inputs.get(tables.OP_INPUT_STRIDES), inputs.get(tables.OP_CONCRETE_INPUTS))
    mask = _shape(a.dims[mask_i]) if mask_i < len(a.dims) else None
    q, k, v = a.tensor(qi), a.tensor(qi + 1), a.tensor(qi + 2)
    if mask is None or len(mask) < 2 or q is None or k is None or v is None or len(q.dims) != 4 or len(k.dims) != 4:
        return None
    if a.value(causal_i):  # is_causal=True already: the kernels skip the masked half
        return None
    b, h, lq, e = q.dims
    lk = k.dims[2]
    if lq != lk or mask[-2:] != (lq, lk) or lq < 2:
        return None  # cross-attention or a padding mask: not a triangle is_causal could replace
    m = a.tensor(mask_i)
    if m is not None and m.strides is not None and len(m.strides) == len(m.dims) and m.strides[-2] == 0:
        # a key-padding mask expanded over the queries (SDPA expands a [B, 1, 1, Lk] mask for its fused
        # kernels: stride 0 along the query dim): every query row is the same, so it is not causal
        return None
    flops = 2.0 * b * h * lq * lk * (e + v.dims[-1]) * (BACKWARD_FACTOR if backward else 1.0)
    mask_bytes = float(b * h * lq * lk) * (m.itemsize if m is not None else 2.0)
    return {MA_OP: name, MA_SHAPES: f"q {_fmt(q.dims)}, k {_fmt(k.dims)}", MA_MASK: _fmt(mask),
            MA_DTYPE: q.dtype, MA_BACKWARD: backward, MA_FLOPS: flops, MA_MASK_BYTES: mask_bytes}, lq


def _backend(kernel_names: np.ndarray) -> str:
    for backend, pattern in BACKENDS:
        if matches(kernel_names, pattern).any():
            return backend
    return MATH


def _triangles(rank: RankTrace, op_steps: np.ndarray, steps: set[int]) -> set[int]:
    """Sides L of the L × L triangles aten::tril / aten::triu build in `steps`."""
    ops = rank.ops
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    out: set[int] = set()
    for row in np.flatnonzero(matches(names, TRIANGLE_OPS)).tolist():
        if int(op_steps[row]) not in steps:
            continue
        dims = rank.op_inputs(int(row)).get(tables.OP_INPUT_DIMS) or [None]
        shape = _shape(dims[0])
        if shape is not None and len(shape) >= 2 and shape[-1] == shape[-2]:
            out.add(shape[-1])
    return out


def find_masked_attention(rank: RankTrace, classes: np.ndarray, gpu_steps: np.ndarray, op_steps: np.ndarray,
                          rows: np.ndarray | None = None) -> pd.DataFrame:
    """MASKED_COLUMNS rows for the SDPA calls with a square mask and is_causal False whose kernels run
    in the selected GPU rows (`rows`, a bool per rank.gpu row; None: every row)."""
    gpu, ops = rank.gpu, rank.ops
    if not len(gpu) or not len(ops):
        return empty()
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    is_call = np.isin(names, list(MASKED_OPS))
    if not is_call.any():
        return empty()
    top = outermost_call(ops[tables.OP_PARENT].to_numpy(dtype=np.int64), is_call)
    op_pos = gpu[tables.GPU_OP].to_numpy(dtype=np.int64)
    keep = (op_pos >= 0) & (gpu[tables.GPU_KIND].to_numpy(dtype=object) == tables.KIND_KERNEL)
    if rows is not None:
        keep &= rows
    call_of = np.where(keep, top[np.clip(op_pos, 0, None)], -1)
    picked = np.flatnonzero(call_of >= 0)
    if not len(picked):
        return empty()
    dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    kernel_names = gpu[tables.GPU_NAME].to_numpy(dtype=object)
    recs: list[dict[str, object]] = []
    sides: list[int] = []
    steps_seen: set[int] = set()
    by_call = pd.Series(picked).groupby(call_of[picked]).agg(list)
    calls: dict[tuple, tuple[dict[str, object], int] | None] = {}  # by name and inputs (shared decoded objects)
    backends: dict[tuple[str, ...], str] = {}
    for call, kernel_rows in by_call.items():
        name, inputs = str(names[int(call)]), rank.op_inputs(int(call))
        sig = (name, *(id(inputs.get(c)) for c in (tables.OP_INPUT_DIMS, tables.OP_INPUT_TYPES,
                                                    tables.OP_INPUT_STRIDES, tables.OP_CONCRETE_INPUTS)))
        if sig not in calls:
            calls[sig] = _call(rank, int(call), name)
        called = calls[sig]
        if called is None:
            continue
        found, side = dict(called[0]), called[1]
        k = np.asarray(kernel_rows, dtype=np.int64)
        launched = tuple(str(x) for x in kernel_names[k])
        if launched not in backends:
            backends[launched] = _backend(kernel_names[k])
        found.update({MA_BACKEND: backends[launched], MA_KERNELS: len(k), MA_TIME_US: float(dur[k].sum()),
                      MA_ATTN_US: float(dur[k][classes[k] == ATTENTION].sum())})
        steps_seen.update(int(s) for s in gpu_steps[k])
        recs.append(found)
        sides.append(side)
    if not recs:
        return empty()
    triangles = _triangles(rank, op_steps, steps_seen)
    frame = pd.DataFrame(recs)
    frame[MA_TRIANGLE] = [s in triangles for s in sides]
    frame[MA_CALLS] = 1
    g = frame.groupby([MA_OP, MA_SHAPES, MA_MASK, MA_DTYPE, MA_BACKEND, MA_BACKWARD, MA_TRIANGLE],
                      sort=False, dropna=False)
    out = g.agg(**{MA_CALLS: (MA_CALLS, "sum"), MA_KERNELS: (MA_KERNELS, "sum"), MA_TIME_US: (MA_TIME_US, "sum"),
                   MA_ATTN_US: (MA_ATTN_US, "sum"), MA_FLOPS: (MA_FLOPS, "sum"),
                   MA_MASK_BYTES: (MA_MASK_BYTES, "sum")}).reset_index()
    out = out.sort_values(MA_TIME_US, ascending=False, kind="stable")
    return out[list(MASKED_COLUMNS)].reset_index(drop=True)


def flash_estimate_us(flops: float, peak: float | None, efficiency: float) -> float:
    """A fused causal kernel's time for a call of `flops` (no causal discount): half the FLOPs at
    `efficiency` of the `peak` (FLOP/s); NaN without a peak."""
    return flops / 2 / (peak * efficiency) * 1e6 if peak else math.nan
