"""Pairwise distances by broadcasting: `((a[:, None] - b[None]) ** 2).sum(-1)` (nearest-code search, k-means, kNN, Chamfer) writes an N × M × D difference, squares it into another and reduces it, where `torch.cdist` or ‖a‖² − 2·a·bᵀ + ‖b‖² is one GEMM of 2·N·M·D FLOPs and an N × M result.

A call: an `aten::sub` of two inputs whose broadcast shape has at least MIN_ELEMENTS elements and
BLOWUP× the larger input's, followed on its thread within FOLLOW top-level ops by a reduction
(`sum`, `norm`, `linalg_vector_norm`, `mean`) over that shape; the top-level ops from the sub to the
reduction whose first input has that shape (the square or abs between them) are the chain. Its
kernels are the work a GEMM does not do (held-out vq_broadcast, H100: 16,384 latents × 2,048 codes ×
64 dims, 4 calls a step, 19 ms of the 19.6 ms unprofiled step; with the GEMM form 2.8 ms).

One row per step × input shapes; per rank.gpu row, whether a chain op (or an op under it) launched it."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.gqa_expand import dims_of
from tracekit.analyzers.detectors.layers import under
from tracekit.analyzers.detectors.toplevel import TopLevel
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

DIFFERENCES = frozenset({"aten::sub", "aten::rsub"})
REDUCTIONS = frozenset({"aten::sum", "aten::norm", "aten::linalg_vector_norm", "aten::mean"})
MIN_ELEMENTS = 16 * 1024 * 1024  # a broadcast smaller than this costs little
BLOWUP = 16  # the broadcast's elements over the larger input's
FOLLOW = 4  # top-level ops after the difference searched for its reduction

# --- columns of Patterns.broadcast_distance (one row per step × input shapes) -------------------------
BD_STEP = "step"
BD_SHAPES = "shapes"  # "16384×1×64 − 1×2048×64"
BD_CALLS = "calls"
BD_ELEMENTS = "elements"  # the broadcast difference's elements per call
BD_GEMM_FLOPS = "gemm_flops"  # 2·N·M·D per call: the GEMM form's work
BD_KERNELS = "kernels"
BD_GPU_US = "gpu_us"  # the chains' kernel time
BROADCAST_COLUMNS = (BD_STEP, BD_SHAPES, BD_CALLS, BD_ELEMENTS, BD_GEMM_FLOPS, BD_KERNELS, BD_GPU_US)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(BROADCAST_COLUMNS))


@dataclass(frozen=True)
class BroadcastDistance:
    table: pd.DataFrame
    rows: np.ndarray  # per rank.gpu row: launched by a chain


def broadcast_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """numpy's broadcast of two shapes, None where they do not broadcast."""
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    if any(x != y and 1 not in (x, y) for x, y in zip(a, b, strict=True)):
        return None
    return tuple(max(x, y) for x, y in zip(a, b, strict=True))


def find_broadcast_distances(rank: RankTrace, op_steps: np.ndarray, top: TopLevel,
                             rows: np.ndarray | None = None) -> BroadcastDistance:
    """BROADCAST_COLUMNS per step × shapes, and the chains' GPU rows (`rows`: those to consider)."""
    ops, gpu = rank.ops, rank.gpu
    none = BroadcastDistance(empty(), np.zeros(len(gpu), dtype=bool))
    if not len(ops) or not len(gpu):
        return none
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    is_top = top.top == np.arange(len(ops))
    diffs = np.flatnonzero(np.isin(names, list(DIFFERENCES)) & is_top)
    if not len(diffs):
        return none
    tid = ops[tables.OP_TID].to_numpy()
    chain = np.zeros(len(ops), dtype=bool)
    found: list[tuple[int, str, int, float]] = []  # (step, shapes, elements, gemm flops)
    group_of = np.full(len(ops), -1, dtype=np.int64)  # per chain op: its (step, shapes) group's index
    keys: dict[tuple[int, str], int] = {}
    for d in diffs.tolist():
        dims = rank.op_inputs(d).get(tables.OP_INPUT_DIMS) or []
        a, b = (dims_of(dims[0]), dims_of(dims[1])) if len(dims) >= 2 else (None, None)
        out = broadcast_shape(a, b) if a is not None and b is not None else None
        if out is None or len(out) < 3:
            continue
        elements = math.prod(out)
        if elements < MIN_ELEMENTS or elements < BLOWUP * max(math.prod(a or (1,)), math.prod(b or (1,))):
            continue
        after = [j for j in range(d + 1, min(d + 1 + 16 * FOLLOW, len(ops))) if is_top[j] and tid[j] == tid[d]][:FOLLOW]
        members = [d]
        for j in after:
            first = dims_of((rank.op_inputs(j).get(tables.OP_INPUT_DIMS) or [None])[0])
            if first != out:
                break
            members.append(j)
            if names[j] in REDUCTIONS:
                chain[members] = True
                text = f"{'×'.join(map(str, a or ()))} − {'×'.join(map(str, b or ()))}"
                found.append((int(op_steps[d]), text, elements, 2.0 * elements))
                group_of[members] = keys.setdefault((int(op_steps[d]), text), len(keys))
                break
    if not found:
        return none
    op_of = gpu[tables.GPU_OP].to_numpy(dtype=np.int64)
    owner = under(ops, chain, depth=6)
    mine = np.zeros(len(gpu), dtype=bool)
    mine[op_of >= 0] = owner[op_of[op_of >= 0]] >= 0
    if rows is not None:
        mine &= rows
    dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    group = np.where(mine, group_of[owner[np.maximum(op_of, 0)]], -1)  # each kernel's chain's group
    kernels = np.bincount(group[group >= 0], minlength=len(keys))
    gpu_us = np.bincount(group[group >= 0], weights=dur[group >= 0], minlength=len(keys))
    groups: dict[tuple[int, str], dict[str, object]] = {}
    for s, text, elements, flops in found:
        k = keys[(s, text)]
        g = groups.setdefault((s, text), {BD_STEP: s, BD_SHAPES: text, BD_CALLS: 0, BD_ELEMENTS: elements,
                                          BD_GEMM_FLOPS: flops, BD_KERNELS: int(kernels[k]),
                                          BD_GPU_US: float(gpu_us[k])})
        g[BD_CALLS] = int(str(g[BD_CALLS])) + 1
    return BroadcastDistance(pd.DataFrame(list(groups.values()), columns=list(BROADCAST_COLUMNS)), mine)
