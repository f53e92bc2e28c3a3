"""scaled_dot_product_attention calls that ran the math backend or fell back for a head dim that is not a multiple of 8.

Flash, cuDNN and memory-efficient SDPA need the head dim of half-precision inputs to be a multiple
of 8 (16-byte aligned rows); otherwise torch runs the math backend (scores GEMM → mask → softmax →
GEMM, upcast to fp32) or a slower fused one. A call with aligned head dims counts too when the math
backend ran it by the trace's own op (`aten::_scaled_dot_product_attention_math` under the call):
the fused backends were switched off (`torch.backends.cuda.enable_*_sdp(False)`, an `sdpa_kernel`
context) or refused the inputs. One row per distinct call signature over the headline
steps: the backend that ran (from the kernel names under the call, attention_mask.BACKENDS), the
head dim, the forward kernels (launched under the call) and the backward kernels: those of the SDPA
backward ops and, for the math backend, the autograd backward ops that read or write a tensor of the
call's score shape (B·H, Lq, Lk) — the score matrix only an unfused attention stores."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from tracekit.analyzers.costs.op_args import DTYPE_SIZE, OpArgs
from tracekit.analyzers.detectors import attention_mask as am
from tracekit.analyzers.names import matches
from tracekit.trace import tables
from tracekit.trace.model import RankTrace
from tracekit.trace.store import INPUT_COLUMNS

SDPA_OP = "aten::scaled_dot_product_attention"
MATH_OP = "aten::_scaled_dot_product_attention_math"  # recorded under a call the math backend ran
ALIGN = 8  # elements: the head-dim multiple the fused SDPA kernels need (torch sdp_utils check_head_dim_size)
SDPA_BACKWARD = re.compile(r"^aten::_scaled_dot_product_\w+_backward$|^aten::_(efficient|flash)_attention_backward$")
AUTOGRAD = re.compile(r"^autograd::engine::evaluate_function: ")
MATMUL_OPS = re.compile(r"^aten::(bmm|baddbmm|matmul|mm|einsum)$")  # ops whose output is the last two inputs' product
SLOW_BACKENDS = (am.MATH, am.EFFICIENT)  # what a misaligned head dim falls back to

# --- columns of Patterns.sdpa_fallback (one row per distinct call signature) ---------------------
SF_SHAPES = "shapes"  # "q [16, 12, 1000, 100], k [16, 12, 1000, 100]"
SF_MASK = "mask"  # the attn_mask's shape, "" without one
SF_DTYPE = "dtype"  # the query's
SF_HEAD_DIM = "head_dim"  # E of the query (the last dim)
SF_BACKEND = "backend"  # attention_mask.MATH or EFFICIENT
SF_CALLS = "calls"  # forward calls in the headline steps
SF_FWD_US = "forward_us"  # the kernels launched under the calls
SF_BWD_US = "backward_us"  # their backward kernels (see the module docstring)
SF_KERNELS = "kernels"  # forward + backward kernels
SF_FLOPS = "flops"  # 2·B·H·Lq·Lk·(E + Ev) per call, × (1 + BACKWARD_FACTOR) with a backward, summed
SF_IO_BYTES = "io_bytes"  # Q, K, V read and O written once per call (forward; × 2 with a backward), summed
SF_SCORES = "scores"  # (B·H, Lq, Lk): the score matrix the math backend's batched GEMMs write and read
SF_CAUSE = "cause"  # HEAD_DIM (misaligned) or SWITCHED_OFF (aligned, math op recorded under the call)
HEAD_DIM, SWITCHED_OFF = "head_dim", "switched_off"
FALLBACK_COLUMNS = (SF_SHAPES, SF_MASK, SF_DTYPE, SF_HEAD_DIM, SF_BACKEND, SF_CALLS, SF_FWD_US, SF_BWD_US,
                    SF_KERNELS, SF_FLOPS, SF_IO_BYTES, SF_SCORES, SF_CAUSE)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(FALLBACK_COLUMNS))


def _call(rank: RankTrace, row: int) -> dict[str, object] | None:
    """The call's columns and its score shape (SF_CAUSE: HEAD_DIM when its head dim is misaligned,
    else SWITCHED_OFF), or None for a call without four-dimensional q, k and v."""
    inputs = rank.op_inputs(row)
    a = OpArgs.of(inputs.get(tables.OP_INPUT_DIMS), inputs.get(tables.OP_INPUT_TYPES),
                  inputs.get(tables.OP_INPUT_STRIDES), inputs.get(tables.OP_CONCRETE_INPUTS))
    q, k, v = a.tensor(0), a.tensor(1), a.tensor(2)
    if q is None or k is None or v is None or len(q.dims) != 4 or len(k.dims) != 4 or len(v.dims) != 4:
        return None
    b, h, lq, e = q.dims
    lk, ev = k.dims[2], v.dims[3]
    mask = am._shape(a.dims[3]) if len(a.dims) > 3 else None
    size = DTYPE_SIZE.get(q.dtype, 2.0)
    return {SF_SHAPES: f"q {am._fmt(q.dims)}, k {am._fmt(k.dims)}", SF_MASK: am._fmt(mask) if mask else "",
            SF_DTYPE: q.dtype, SF_HEAD_DIM: e, "fwd_flops": 2.0 * b * h * lq * lk * (e + ev),
            "io": (b * h * lq * e + b * h * lk * e + b * h * lk * ev + b * h * lq * ev) * size,
            SF_SCORES: (b * h, lq, lk), SF_CAUSE: SWITCHED_OFF if e % ALIGN == 0 and ev % ALIGN == 0 else HEAD_DIM}


def _calls(rank: RankTrace, rows: list[int]) -> list[dict[str, object] | None]:
    """_call of each op row, computed once per distinct recorded inputs (decode steps repeat one call
    signature per layer and step). Treat the returned dicts as read-only."""
    store = rank.op_input_store
    if store is None:
        return [_call(rank, r) for r in rows]
    index = np.asarray(rows, dtype=np.int64)
    memo: dict[tuple[bytes, ...], dict[str, object] | None] = {}
    out = []
    for row, key in zip(rows, zip(*(store.raw_values(index, c) for c in INPUT_COLUMNS), strict=True), strict=True):
        if key not in memo:
            memo[key] = _call(rank, row)
        out.append(memo[key])
    return out


def score_shaped(dims: object, scores: set[tuple[int, ...]]) -> bool:
    """Some tensor of `dims` (a list of recorded shapes) is one of the `scores` matrices (leading dims folded)."""
    for d in dims if isinstance(dims, (list, tuple)) else ():
        shape = am._shape(d)
        if shape is not None and len(shape) >= 3 and (math.prod(shape[:-2]), *shape[-2:]) in scores:
            return True
    return False


def find_sdpa_fallback(rank: RankTrace, rows: np.ndarray | None = None) -> tuple[pd.DataFrame, np.ndarray]:
    """FALLBACK_COLUMNS rows for the SDPA calls with a misaligned head dim that ran a SLOW_BACKENDS
    backend, and those with aligned head dims that ran the math op, in the selected GPU rows (`rows`,
    a bool per rank.gpu row; None: every row), and a bool per rank.gpu row marking their forward and
    backward kernels."""
    gpu, ops = rank.gpu, rank.ops
    covered = np.zeros(len(gpu), dtype=bool)
    if not len(gpu) or not len(ops):
        return empty(), covered
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    is_call = names == SDPA_OP
    if not is_call.any():
        return empty(), covered
    parent = ops[tables.OP_PARENT].to_numpy(dtype=np.int64)
    top = am.outermost_call(parent, is_call)
    math_calls = set(top[(names == MATH_OP) & (top >= 0)].tolist())  # calls the math backend ran, by their op
    op_pos = gpu[tables.GPU_OP].to_numpy(dtype=np.int64)
    keep = (op_pos >= 0) & (gpu[tables.GPU_KIND].to_numpy(dtype=object) == tables.KIND_KERNEL)
    if rows is not None:
        keep &= rows
    safe_op = np.clip(op_pos, 0, None)
    call_of = np.where(keep, top[safe_op], -1)
    dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    kernel_names = gpu[tables.GPU_NAME].to_numpy(dtype=object)
    recs: list[dict[str, object]] = []
    picked = np.flatnonzero(call_of >= 0)
    picked = picked[np.argsort(call_of[picked], kind="stable")]  # by call, kernels in row order
    if not len(picked):
        return empty(), covered
    cuts = np.flatnonzero(call_of[picked][1:] != call_of[picked][:-1]) + 1
    groups = np.split(picked, cuts)
    backend_hits: list[tuple[str, np.ndarray]] = []  # per attention_mask.BACKENDS: bool per rank.gpu row
    calls = [int(call_of[k[0]]) for k in groups]
    # each call's innermost nested SDPA op (rows in start order): autocast re-dispatches an fp32 call
    # with the dtype the kernels ran in, the dtype a fused kernel would take
    inner = np.arange(len(names), dtype=np.int64)
    at = np.flatnonzero(is_call & (top >= 0))
    np.maximum.at(inner, top[at], at)
    for k, call, found in zip(groups, calls, _calls(rank, [int(inner[c]) for c in calls]), strict=True):
        if found is None or (found[SF_CAUSE] == SWITCHED_OFF and call not in math_calls):
            continue  # aligned head dims and a fused backend (the common case): no backend to look up
        if not backend_hits:
            backend_hits = [(b, matches(kernel_names, pattern)) for b, pattern in am.BACKENDS]
        backend = next((b for b, hits in backend_hits if hits[k].any()), am.MATH)  # as attention_mask._backend
        if backend not in SLOW_BACKENDS:
            continue
        covered[k] = True
        recs.append({**found, SF_BACKEND: backend, SF_FWD_US: float(dur[k].sum()), "n": len(k)})
    if not recs:
        return empty(), covered
    # the backward: kernels under an SDPA backward op, or (math) under an autograd node on the score matrix
    scores: set[tuple[int, ...]] = {tuple(r[SF_SCORES]) for r in recs if r[SF_BACKEND] == am.MATH}  # type: ignore[arg-type]
    fused = any(r[SF_BACKEND] != am.MATH for r in recs)
    backward = _backward_rows(rank, keep & ~covered, names, parent, op_pos, scores, fused)
    covered |= backward
    frame = pd.DataFrame(recs)
    # the backward time spread over the signatures in proportion to their forward kernel time
    fwd_total = float(frame[SF_FWD_US].sum())
    bwd_us, bwd_n = float(dur[backward].sum()), int(backward.sum())
    frame[SF_BWD_US] = frame[SF_FWD_US] / fwd_total * bwd_us if fwd_total > 0 else 0.0
    frame[SF_KERNELS] = frame["n"] + (frame[SF_FWD_US] / fwd_total * bwd_n if fwd_total > 0 else 0.0)
    factor = 1.0 + am.BACKWARD_FACTOR if bwd_n else 1.0
    frame[SF_FLOPS] = frame["fwd_flops"] * factor
    frame[SF_IO_BYTES] = frame["io"] * (2.0 if bwd_n else 1.0)
    frame[SF_CALLS] = 1
    g = frame.groupby([SF_SHAPES, SF_MASK, SF_DTYPE, SF_HEAD_DIM, SF_BACKEND, SF_SCORES, SF_CAUSE], sort=False, dropna=False)
    out = g.agg(**{c: (c, "sum") for c in (SF_CALLS, SF_FWD_US, SF_BWD_US, SF_KERNELS, SF_FLOPS, SF_IO_BYTES)})
    out = out.reset_index().sort_values(SF_FWD_US, ascending=False, kind="stable")
    return out[list(FALLBACK_COLUMNS)].reset_index(drop=True), covered


def gemm_on_scores(shapes: object, scores: set[tuple[int, ...]]) -> bool:
    """A matmul of recorded input `shapes` reads or writes one of the `scores` matrices (its output:
    the last two inputs' product)."""
    dims = [am._shape(d) for d in shapes] if isinstance(shapes, (list, tuple)) else []
    a, b = (dims[-2], dims[-1]) if len(dims) >= 2 else (None, None)
    out = [(*a[:-1], b[-1])] if a is not None and b is not None and len(a) >= 2 and len(b) >= 2 else []
    return score_shaped([d for d in dims if d is not None] + out, scores)


def _backward_rows(rank: RankTrace, keep: np.ndarray, names: np.ndarray, parent: np.ndarray, op_pos: np.ndarray,
                   scores: set[tuple[int, ...]], fused: bool) -> np.ndarray:
    """Per rank.gpu row: a kept kernel of an SDPA backward op (`fused`: a slow fused backend ran), or
    of an op under an autograd node that reads or writes one of the `scores` matrices (a matmul's
    output counts: the gradient of the probabilities, dO @ Vᵀ, reads no score-shaped input)."""
    out = np.zeros(len(keep), dtype=bool)
    in_sdpa_bwd = (am.outermost_call(parent, matches(names, SDPA_BACKWARD)) >= 0) & fused
    in_autograd = am.outermost_call(parent, matches(names, AUTOGRAD)) >= 0
    seen: dict[int, bool] = {}
    for i in np.flatnonzero(keep).tolist():
        r = int(op_pos[i])
        if r not in seen:
            on_scores = gemm_on_scores if MATMUL_OPS.match(str(names[r])) else score_shaped
            seen[r] = bool(in_sdpa_bwd[r]) or (bool(scores) and bool(in_autograd[r]) and on_scores(
                rank.op_inputs(r).get(tables.OP_INPUT_DIMS), scores))
        out[i] = seen[r]
    return out


def score_backward(rank: RankTrace, keep: np.ndarray, scores: set[tuple[int, ...]]) -> np.ndarray:
    """Per rank.gpu row: a `keep` kernel (bool per row) of an autograd node on one of the `scores`
    matrices ((B·H, Lq, Lk), leading dims folded): the backward of a hand-written attention."""
    gpu, ops = rank.gpu, rank.ops
    if not len(gpu) or not len(ops) or not scores:
        return np.zeros(len(gpu), dtype=bool)
    op_pos = gpu[tables.GPU_OP].to_numpy(dtype=np.int64)
    keep = keep & (op_pos >= 0) & (gpu[tables.GPU_KIND].to_numpy(dtype=object) == tables.KIND_KERNEL)
    return _backward_rows(rank, keep, ops[tables.OP_NAME].to_numpy(dtype=object),
                          ops[tables.OP_PARENT].to_numpy(dtype=np.int64), op_pos, scores, False)
