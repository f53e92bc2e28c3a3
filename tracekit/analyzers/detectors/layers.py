"""Layer-level kernel groups the layout and fused-kernel rules read: cuDNN's NCHW ↔ NHWC transposes, and the unfused LLM layer chains (RMSNorm, SwiGLU, RoPE, cross-entropy) named by their aten ops.

An LLM chain is read from the kernels between two matrix kernels on one stream (a "segment": the
elementwise, reduction, normalization and copy kernels from one GEMM / attention / conv kernel to
the next, in one step): a segment whose kernels' ops (or the autograd nodes above them) include an
anchor op of a chain belongs to that chain. A fused kernel (Liger, torch.compile) launches no such
aten op, so a fused chain has no anchor."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit.analyzers.kernels import (
    ATTENTION,
    COMMUNICATION,
    CONV,
    EMBEDDING,
    GEMM,
    MEMCPY,
    MEMSET,
)
from tracekit.analyzers.names import matches
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

# cuDNN's layout transposes around NCHW convolutions whose kernels want NHWC (H200 traces of
# sample_traces/scripts/train_conv.py; the ResNet-50 fp32 trace of the issue).
LAYOUT_TRANSPOSE = re.compile(r"nchwToNhwc|nhwcToNchw")

# Chain -> the aten ops (forward) and autograd nodes (backward) that only that chain launches in a
# Llama/Mistral/Qwen-style block written in eager PyTorch (HF transformers' LlamaRMSNorm,
# LlamaMLP act_fn(gate) * up, rotate_half, the loss's log_softmax + nll_loss).
RMS_NORM, SWIGLU, ROPE, CROSS_ENTROPY = "rms_norm", "swiglu", "rope", "cross_entropy"
ANCHORS: dict[str, re.Pattern[str]] = {
    RMS_NORM: re.compile(r"^aten::rsqrt$|RsqrtBackward"),
    SWIGLU: re.compile(r"^aten::silu(_backward)?$|SiluBackward"),
    ROPE: re.compile(r"^aten::neg$|NegBackward"),
    CROSS_ENTROPY: re.compile(r"^aten::(_log_softmax|_log_softmax_backward_data|nll_loss_forward|nll_loss_backward)$"
                              r"|LogSoftmaxBackward|NllLossBackward"),
}
# SwiGLU is SiLU(gate) × up: a segment with a SiLU and no product is an activation (a VAE's or a
# ResNet's GroupNorm + SiLU before a conv, held-out vae_decode_fp32), not a gated MLP.
GATE = re.compile(r"^aten::mul$|MulBackward")
ANCESTOR_DEPTH = 4  # how far above a kernel's op an anchor is looked for (the autograd node of a backward op)
# Kernels that end a segment: matrix work, lookups, communication and copies to or from the host.
BOUNDARY_CLASSES = (GEMM, ATTENTION, CONV, EMBEDDING, COMMUNICATION, MEMCPY, MEMSET)
# ... and kernels of gathers by index (`t[indices]`, index_select): no fused norm / RoPE / SwiGLU /
# loss kernel does their work (heldout14 swa_roll_cache: a K/V window gathered one slot to the left,
# zeroed and added back after each layer's RoPE, 16 times the RoPE's own time, counted as the RoPE
# chain's until the gather ended its segment). Fills and scatters stay: a slice's backward fills
# zeros inside RoPE's backward chain (heldout12 neox_causal_mask).
BOUNDARY_OPS = re.compile(r"^aten::(index|index_select)$")

# --- columns of Patterns.llm_chains (one row per chain kind) --------------------------------------
LC_KIND = "kind"  # RMS_NORM, SWIGLU, ROPE, CROSS_ENTROPY
LC_SEGMENTS = "segments"  # segments in the headline steps
LC_KERNELS = "kernels"  # kernels in them
LC_TIME_US = "time_us"  # their summed time
LC_FUSED_US = "fused_us"  # Σ over segments of the segment's mean kernel time: one kernel per segment
LC_OPS = "ops"  # the anchor ops seen, "aten::rsqrt, RsqrtBackward0"
LLM_COLUMNS = (LC_KIND, LC_SEGMENTS, LC_KERNELS, LC_TIME_US, LC_FUSED_US, LC_OPS)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(LLM_COLUMNS))


def _kernels(rank: RankTrace, rows: np.ndarray | None) -> np.ndarray:
    keep = rank.gpu[tables.GPU_KIND].to_numpy(dtype=object) == tables.KIND_KERNEL
    return keep & rows if rows is not None else keep


def find_layout_transposes(rank: RankTrace, rows: np.ndarray | None = None) -> np.ndarray:
    """Per rank.gpu row: a cuDNN NCHW ↔ NHWC transpose kernel among the selected rows."""
    gpu = rank.gpu
    if not len(gpu):
        return np.zeros(0, dtype=bool)
    return _kernels(rank, rows) & matches(gpu[tables.GPU_NAME].to_numpy(dtype=object), LAYOUT_TRANSPOSE)


def under(ops: pd.DataFrame, hit: np.ndarray, depth: int = 6, outermost: bool = False) -> np.ndarray:
    """Per op row: the row of the nearest op at or above it (up to `depth` parents) where `hit` is
    true, -1 none; `outermost`: the farthest such op instead."""
    parent = ops[tables.OP_PARENT].to_numpy(dtype=np.int64)
    found = np.where(hit, np.arange(len(ops)), -1)
    anc = parent.copy()
    for _ in range(depth):
        valid = anc >= 0
        if not valid.any():
            break
        safe = np.where(valid, anc, 0)
        take = valid & hit[safe] & ((found < 0) | outermost)
        found[take] = safe[take]
        anc = np.where(valid, parent[safe], -1)
    return found


def _anchors(rank: RankTrace) -> tuple[np.ndarray, np.ndarray]:
    """Per op row: (the chain whose anchor is the op or one of its ANCESTOR_DEPTH ancestors, '' none;
    that anchor's op row, -1 none)."""
    ops = rank.ops
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    kinds = np.array([*ANCHORS, ""], dtype=object)  # by code; -1 (none) picks the last, ''
    own = np.full(len(ops), -1, dtype=np.int64)
    for code, pattern in enumerate(ANCHORS.values()):
        own[(own < 0) & matches(names, pattern)] = code
    at = under(ops, own >= 0, ANCESTOR_DEPTH)
    found = np.where(at >= 0, own[np.maximum(at, 0)], -1)
    out = kinds[found]
    return out, at


def find_llm_chains(rank: RankTrace, classes: np.ndarray, rows: np.ndarray | None = None,
                    ) -> tuple[pd.DataFrame, np.ndarray]:
    """(LLM_COLUMNS rows, per rank.gpu row: in a chain segment) over the selected kernel rows."""
    gpu, ops = rank.gpu, rank.ops
    in_chain = np.zeros(len(gpu), dtype=bool)
    if not len(gpu) or not len(ops):
        return empty(), in_chain
    kind_of_op, anchor_of_op = _anchors(rank)
    if not (kind_of_op != "").any():
        return empty(), in_chain
    op_names = ops[tables.OP_NAME].to_numpy(dtype=object)
    keep = np.flatnonzero(_kernels(rank, rows))
    op_pos = gpu[tables.GPU_OP].to_numpy(dtype=np.int64)
    kind = np.where(op_pos >= 0, kind_of_op[np.clip(op_pos, 0, None)], "")
    frame = pd.DataFrame({"row": keep, "stream": gpu[tables.GPU_STREAM].to_numpy()[keep],
                          "step": gpu[tables.GPU_STEP].to_numpy()[keep], "ts": gpu[tables.GPU_TS].to_numpy(dtype=float)[keep]})
    frame = frame.sort_values(["stream", "ts"], kind="stable")
    order = frame["row"].to_numpy(dtype=np.int64)
    moves = matches(op_names, BOUNDARY_OPS)
    boundary = np.isin(classes[order], BOUNDARY_CLASSES) | ((op_pos[order] >= 0) & moves[np.clip(op_pos[order], 0, None)])
    new = boundary.copy()
    if len(order):
        new[1:] |= (frame["stream"].to_numpy()[1:] != frame["stream"].to_numpy()[:-1])
        new[1:] |= (frame["step"].to_numpy()[1:] != frame["step"].to_numpy()[:-1])
        new[1:] |= boundary[:-1]
    segment = np.cumsum(new)
    dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    recs: list[dict[str, object]] = []
    anchored = np.unique(segment[kind[order] != ""])  # only segments holding an anchor are read
    inside = np.flatnonzero(np.isin(segment, anchored) & ~boundary)
    gated = under(ops, matches(op_names, GATE), ANCESTOR_DEPTH) >= 0
    gate = np.where(op_pos >= 0, gated[np.clip(op_pos, 0, None)], False)
    for _, members in pd.Series(inside).groupby(segment[inside]):
        k = order[members.to_numpy()]
        kinds = sorted({str(x) for x in kind[k] if x and (x != SWIGLU or gate[k].any())})
        if not kinds:
            continue
        time_us = float(dur[k].sum())
        anchor_ops = anchor_of_op[np.clip(op_pos[k], 0, None)][np.isin(kind[k], kinds)]
        anchors = {str(op_names[i]).removeprefix("autograd::engine::evaluate_function: ") for i in anchor_ops if i >= 0}
        recs.append({LC_KIND: "+".join(kinds), LC_SEGMENTS: 1, LC_KERNELS: len(k), LC_TIME_US: time_us,
                     LC_FUSED_US: time_us / len(k), LC_OPS: ", ".join(sorted(anchors))})
        in_chain[k] = True
    if not recs:
        return empty(), in_chain
    frame = pd.DataFrame(recs)
    out = frame.groupby(LC_KIND, sort=False).agg(**{
        LC_SEGMENTS: (LC_SEGMENTS, "sum"), LC_KERNELS: (LC_KERNELS, "sum"), LC_TIME_US: (LC_TIME_US, "sum"),
        LC_FUSED_US: (LC_FUSED_US, "sum"),
        LC_OPS: (LC_OPS, lambda v: ", ".join(sorted({n for x in v for n in str(x).split(", ") if n})))}).reset_index()
    out = out.sort_values(LC_TIME_US, ascending=False, kind="stable").reset_index(drop=True)
    return out[list(LLM_COLUMNS)], in_chain
