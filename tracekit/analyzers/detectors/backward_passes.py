"""Backward run more than once over the same layers in a step: one `loss_k.backward(retain_graph=True)` per task loss walks the shared network's backward once per loss, where summing the losses walks it once.

The forward runs each layer once; one backward pass differentiates each layer once, so the autograd
engine's node calls of a layer kind (ConvolutionBackward0 for a convolution, AddmmBackward0 /
MmBackward0 for a linear layer, the norms' backward for a norm) match the forward's top-level calls of
that kind. Where the step's backward nodes of the weight-layer kinds outnumber their forward calls by
MIN_RATIO or more, the shared layers' backward ran about that many times (held-out multitask_backward:
51 ConvolutionBackward0 calls for 21 convolutions: a 15-convolution encoder under three task heads,
backward once per task). Gradient accumulation (k forwards, k backwards), per-sample loops and
checkpointing (the recomputed forward runs inside backward, on the engine's thread) keep the ratio
at 1; a double backward (gradient penalties) runs nodes of other names (ConvolutionBackwardBackward0).

One row per such step; per rank.gpu row, the factor its time takes with one pass: forward / backward
calls of its node's kind, 1 / passes for the step's other nodes (activations, adds, casts, gradient
accumulations: they repeat with the shared layers), 1 outside the backward."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.analyzers.detectors.toplevel import TopLevel
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

NODE = "autograd::engine::evaluate_function: "
# kind: (the forward's top-level ops, the backward's node names)
KINDS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "convolution": (frozenset({"aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution",
                               "aten::conv_transpose1d", "aten::conv_transpose2d", "aten::conv_transpose3d"}),
                    frozenset({"ConvolutionBackward0", "CudnnConvolutionBackward0"})),
    "linear": (frozenset({"aten::linear", "aten::addmm", "aten::mm", "aten::matmul", "aten::bmm", "aten::einsum",
                          "aten::tensordot"}),
               frozenset({"AddmmBackward0", "MmBackward0", "BmmBackward0"})),
    "norm": (frozenset({"aten::batch_norm", "aten::layer_norm", "aten::group_norm", "aten::rms_norm"}),
             frozenset({"NativeBatchNormBackward0", "CudnnBatchNormBackward0", "NativeLayerNormBackward0",
                        "NativeGroupNormBackward0", "FusedRmsNormBackward0"})),
}
MIN_FORWARD = 4  # weight-layer calls in the step's forward: fewer is too small a network to judge
MIN_RATIO = 1.5  # backward node calls per forward call of the weight-layer kinds together

# --- columns of Patterns.backward_passes (one row per step whose backward runs more than once) -----
BP_STEP = "step"
BP_FORWARD = "forward_layers"  # top-level forward calls of the weight-layer kinds
BP_BACKWARD = "backward_nodes"  # the engine's node calls of those kinds
BP_PASSES = "passes"  # backward_nodes / forward_layers
BP_GPU_US = "gpu_us"  # GPU time launched by the step's backward nodes
PASSES_COLUMNS = (BP_STEP, BP_FORWARD, BP_BACKWARD, BP_PASSES, BP_GPU_US)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(PASSES_COLUMNS))


def find_backward_passes(rank: RankTrace, steps: StepsOf, top: TopLevel) -> tuple[pd.DataFrame, np.ndarray]:
    """(PASSES_COLUMNS per step whose backward runs MIN_RATIO× or more, per rank.gpu row the factor
    its time takes with one backward pass); empty and all ones without such a step."""
    ops, gpu = rank.ops, rank.gpu
    factor = np.ones(len(gpu))
    if not len(ops) or not len(gpu):
        return empty(), factor
    # names repeat: each distinct one is classified once (the code of a node, a forward or backward kind)
    ids, uniques = pd.factorize(ops[tables.OP_NAME], use_na_sentinel=False)
    kinds = list(KINDS)
    other_node = 2 * len(kinds) + 1
    fwd_code = {n: 1 + i for i, (f_names, _) in enumerate(KINDS.values()) for n in f_names}
    bwd_code = {NODE + n: 1 + len(kinds) + i for i, (_, b_names) in enumerate(KINDS.values()) for n in b_names}
    text = [str(u) for u in uniques]
    u_node = np.array([t.startswith(NODE) for t in text], dtype=bool)
    if not u_node.any():
        return empty(), factor
    u_code = np.array([bwd_code.get(t, other_node) if u_node[i] else fwd_code.get(t, 0) for i, t in enumerate(text)],
                      dtype=np.int64)
    # per op: 0 none; 1..K the forward of kind k (top-level only); K+1..2K its backward node; 2K+1 another node
    code = u_code[ids]
    code[(code >= 1) & (code <= len(kinds)) & (ops[tables.OP_PARENT].to_numpy(dtype=np.int64) >= 0)] = 0
    op_steps = np.asarray(steps.ops, dtype=np.int64)
    counted = (code > 0) & (op_steps >= 0)
    if not counted.any():
        return empty(), factor
    step_ids, step_of = np.unique(op_steps[counted], return_inverse=True)
    width = 2 * len(kinds) + 2
    counts = np.bincount(step_of * width + code[counted], minlength=len(step_ids) * width).reshape(len(step_ids), width)
    fwd, bwd = counts[:, 1:1 + len(kinds)], counts[:, 1 + len(kinds):1 + 2 * len(kinds)]
    n_fwd, n_bwd = fwd.sum(axis=1), bwd.sum(axis=1)
    flagged = (n_fwd >= MIN_FORWARD) & (n_bwd >= MIN_RATIO * np.maximum(n_fwd, 1))
    if not flagged.any():
        return empty(), factor
    passes = n_bwd / np.maximum(n_fwd, 1)
    # per (step, code): the factor of that code's kernels with one pass
    ratio = np.ones((len(step_ids), width))
    ratio[:, 1 + len(kinds):1 + 2 * len(kinds)] = np.where((bwd > fwd) & (fwd > 0), fwd / np.maximum(bwd, 1), 1.0)
    ratio[:, width - 1] = 1.0 / passes
    ratio[~flagged] = 1.0
    gpu_op = top.gpu_top
    gpu_dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    op = np.maximum(gpu_op, 0)
    row_step = np.where(gpu_op >= 0, op_steps[op], -1)
    pos = np.searchsorted(step_ids, row_step)
    known = (gpu_op >= 0) & (row_step >= 0) & (pos < len(step_ids))
    known &= step_ids[np.minimum(pos, len(step_ids) - 1)] == row_step
    row_code = np.where(known, code[op], 0)
    backward = known & (row_code > len(kinds))
    factor[backward] = ratio[pos[backward], row_code[backward]]
    mine = backward & flagged[np.minimum(pos, len(step_ids) - 1)]
    gpu_us = np.bincount(pos[mine], weights=gpu_dur[mine], minlength=len(step_ids))
    rows = [{BP_STEP: int(step_ids[i]), BP_FORWARD: int(n_fwd[i]), BP_BACKWARD: int(n_bwd[i]),
             BP_PASSES: float(passes[i]), BP_GPU_US: float(gpu_us[i])} for i in np.flatnonzero(flagged).tolist()]
    return pd.DataFrame(rows, columns=list(PASSES_COLUMNS)), factor
