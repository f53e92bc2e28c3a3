"""Unfused attention behind use_sdpa: scores GEMM → scale/mask → softmax → GEMM on the probabilities, and its backward on the score matrix."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tracekit.analyzers.costs import attribution
from tracekit.analyzers.costs.op_args import DTYPE_SIZE
from tracekit.analyzers.detectors import sdpa_fallback
from tracekit.analyzers.detectors.sequences import _fmt_shape, _Inputs, _stream_order
from tracekit.analyzers.kernels import GEMM, SOFTMAX
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

SCORE_GEMM_OPS = sdpa_fallback.MATMUL_OPS
# How far (in GPU activities on the stream, memsets included) the scores GEMM may precede the softmax
# and the probs @ V GEMM follow it. nanoGPT's masked path under bf16 autocast (heldout7 tril_attention)
# puts 5 activities between the first pair (scale, mask == 0, the clone's DtoD memcpy, masked_fill,
# the fp32 cast) and 3 between the second (the probs' bf16 cast, V's contiguous copy, the bmm's
# memset); the margins take a dropout and a second cast.
ATTN_LOOKBACK = 8
ATTN_LOOKAHEAD = 5

# --- columns of Patterns.attention (one row per distinct unfused attention pattern) -------------
AT_OPS = "ops"
AT_SCORES = "scores"  # shape of the score matrix the softmax reads
AT_DTYPE = "dtype"
AT_COUNT = "count"
AT_KERNELS = "kernels"
AT_TIME_US = "time_us"  # all kernels from the scores GEMM to the probs @ V GEMM
AT_GEMM_US = "gemm_us"  # the two GEMMs
AT_OTHER_US = "other_us"  # everything between them (scale, mask, softmax, dropout, casts)
AT_FLOPS = "flops"  # the two GEMMs' FLOPs, NaN unknown
AT_IO_BYTES = "io_bytes"  # Q, K, V read + output written once (what a fused kernel must move)
AT_BWD_US = "backward_us"  # the autograd ops' kernels on the score matrix (sdpa_fallback.score_backward), 0 without
AT_BWD_KERNELS = "backward_kernels"

ATTENTION_COLUMNS = (AT_OPS, AT_SCORES, AT_DTYPE, AT_COUNT, AT_KERNELS, AT_TIME_US, AT_GEMM_US,
                     AT_OTHER_US, AT_FLOPS, AT_IO_BYTES, AT_BWD_US, AT_BWD_KERNELS)


def _gemm_io(inputs: _Inputs, row: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None:
    """(a, b, out) shapes of a batched/plain matmul op call (the last two operands of baddbmm)."""
    tensors = inputs(row)
    if not tensors or len(tensors) < 2:
        return None
    a, b = tensors[-2][0], tensors[-1][0]
    if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
        return None
    return a, b, (*a[:-1], b[-1])


def find_attention(rank: RankTrace, classes: np.ndarray, costs: attribution.KernelCosts | None,
                   rows: np.ndarray | None = None) -> tuple[pd.DataFrame, np.ndarray]:
    """Unfused attention: GEMM (scores) → up to ATTN_LOOKBACK kernels → softmax → up to
    ATTN_LOOKAHEAD kernels → GEMM reading the probabilities, and its backward (the autograd ops on the
    score matrix, spread over the patterns by forward time). Returns the patterns and a bool per GPU
    row marking the kernels they cover."""
    gpu, ops = rank.gpu, rank.ops
    covered = np.zeros(len(gpu), dtype=bool)
    order = _stream_order(rank, kernels_only=False, rows=rows)  # the clone's device copy of masked_fill counts
    if not len(order):
        return pd.DataFrame(columns=list(ATTENTION_COLUMNS)), covered
    op_pos = gpu[tables.GPU_OP].to_numpy()
    names = ops[tables.OP_NAME].to_numpy(dtype=object) if len(ops) else np.empty(0, dtype=object)
    stream = gpu[tables.GPU_STREAM].to_numpy()
    dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    flops = costs.table[attribution.FLOPS].to_numpy(dtype=float) if costs is not None else np.full(len(gpu), np.nan)

    def gemm_at(i: int) -> tuple | None:
        r = int(op_pos[i])
        if classes[i] != GEMM or r < 0 or not SCORE_GEMM_OPS.match(str(names[r])):
            return None
        return _gemm_io(inputs, r)

    inputs = _Inputs(ops)
    recs = []
    seq = order.tolist()
    for j, i in enumerate(seq):
        r = int(op_pos[i])
        # a softmax's backward (its kernels are class softmax too) belongs to the backward pass
        if classes[i] != SOFTMAX or r < 0 or covered[i] or "backward" in str(names[r]):
            continue
        tensors = inputs(r)
        if not tensors or len(tensors[0][0]) < 3:
            continue
        scores, dtype = tensors[0]
        first = next((k for k in range(j - 1, max(j - 1 - ATTN_LOOKBACK, -1), -1)
                      if stream[seq[k]] == stream[i] and (io := gemm_at(seq[k])) is not None
                      and io[2][-2:] == scores[-2:]), None)
        last = next((k for k in range(j + 1, min(j + 1 + ATTN_LOOKAHEAD, len(seq)))
                     if stream[seq[k]] == stream[i] and (io := gemm_at(seq[k])) is not None
                     and io[0][-2:] == scores[-2:]), None)
        if first is None or last is None:
            continue
        rows = seq[first:last + 1]
        if any(stream[k] != stream[i] for k in rows):
            continue
        before, after = gemm_at(seq[first]), gemm_at(seq[last])
        if before is None or after is None:
            continue
        q, kt, _ = before
        _, v, o = after
        # the matmuls' operand dtype (what SDPA would run in; a softmax upcast to fp32 does not change it)
        operands = inputs(int(op_pos[seq[first]]))
        dtype = operands[-1][1] if operands and operands[-1][1] in DTYPE_SIZE else dtype
        size = DTYPE_SIZE.get(dtype, 2.0)
        io_bytes = (math.prod(q) + math.prod(kt) + math.prod(v) + math.prod(o)) * size
        gemm_rows = [seq[first], seq[last]]
        f = flops[gemm_rows]
        labels = [str(names[op_pos[k]]) for k in rows if op_pos[k] >= 0]
        labels = [x for n, x in enumerate(labels) if n == 0 or x != labels[n - 1]]
        recs.append({AT_OPS: " → ".join(labels),
                     AT_SCORES: _fmt_shape(scores), AT_DTYPE: dtype, AT_KERNELS: len(rows),
                     AT_TIME_US: float(dur[rows].sum()), AT_GEMM_US: float(dur[gemm_rows].sum()),
                     AT_FLOPS: float(f.sum()) if not np.isnan(f).any() else np.nan, AT_IO_BYTES: io_bytes,
                     "folded": (math.prod(scores[:-2]), *scores[-2:])})
        covered[rows] = True
    if not recs:
        return pd.DataFrame(columns=list(ATTENTION_COLUMNS)), covered
    frame = pd.DataFrame(recs)
    picked = np.zeros(len(gpu), dtype=bool)
    picked[order] = True
    backward = sdpa_fallback.score_backward(rank, picked & ~covered, set(frame.pop("folded")))
    covered |= backward
    share = frame[AT_TIME_US] / frame[AT_TIME_US].sum() if frame[AT_TIME_US].sum() > 0 else 0.0
    frame[AT_BWD_US], frame[AT_BWD_KERNELS] = share * float(dur[backward].sum()), share * int(backward.sum())
    g = frame.groupby([AT_OPS, AT_SCORES, AT_DTYPE], sort=False, dropna=False)
    out = g.agg(**{AT_COUNT: (AT_KERNELS, "size"), AT_KERNELS: (AT_KERNELS, "sum"),
                   AT_TIME_US: (AT_TIME_US, "sum"), AT_GEMM_US: (AT_GEMM_US, "sum"),
                   AT_FLOPS: (AT_FLOPS, lambda s: s.sum(min_count=len(s))),
                   AT_IO_BYTES: (AT_IO_BYTES, "sum"), AT_BWD_US: (AT_BWD_US, "sum"),
                   AT_BWD_KERNELS: (AT_BWD_KERNELS, "sum")}).reset_index()
    out[AT_OTHER_US] = out[AT_TIME_US] - out[AT_GEMM_US]
    out[AT_BWD_KERNELS] = out[AT_BWD_KERNELS].round(6)  # a share of a count: no float dust
    out = out.sort_values(AT_TIME_US, ascending=False, kind="stable")
    return out[list(ATTENTION_COLUMNS)].reset_index(drop=True), covered
