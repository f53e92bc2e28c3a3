"""A weight shared by every item of a batch, expanded to the batch (`w.expand(B, -1, -1)`) and multiplied with `bmm`: B small GEMMs against B copies of one matrix, which autocast materialises, autograd differentiates per item and sums back, where one GEMM over the flattened batch (`x @ w`, which broadcasts without expanding) reads the weight once.

A call is a `bmm` / `baddbmm` / `matmul` op whose 3-D operand has stride 0 in its batch dimension (its
recorded Input Strides) and a batch of at least MIN_BATCH, not called by `matmul` (BROADCASTING: its own
broadcast of a 2-D weight); the outermost such op (autocast's `bmm` wraps the cast and the inner `bmm`). Its expanded shapes (B, K, N) are then looked for in the whole
step: the kernels of the call's own subtree (the materialising cast, the GEMM), of every op reading a
tensor of an expanded shape or its transpose (the backward's GEMM for the input gradient, the cast
back, `ExpandBackward`'s sum over the batch), and of every `bmm` whose output has an expanded shape
(the per-item weight gradients). Held-out jet_tagging_expanded_weight_bmm (H100): a per-particle layer
of a particle-flow network as 1,024 GEMMs of 64 rows against an expanded 768 × 768 weight; those
kernels took ~11 ms of a 15.7 ms bare step, and one matmul over the 65,536 particles saved 10.9 ms.

One row per step with such calls; per rank.gpu row its part (PART_*), the elements of expanded-shape
tensors its op reads or writes (what a flattened GEMM reads or writes once instead of B times), its
time and its step (0 and -1 outside)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.analyzers.detectors.layers import under
from tracekit.analyzers.kernels import GEMM
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

CALLS = {"aten::bmm": (0, 1), "aten::baddbmm": (1, 2), "aten::matmul": (0, 1)}
BMM = frozenset({"aten::bmm", "aten::baddbmm"})
# torch's own broadcasting: matmul (and linear, einsum through it) expands a 2-D weight for an input it
# cannot fold into one GEMM, with no copy: what the user would write already (heldout6 frozen_backbone)
BROADCASTING = frozenset({"aten::matmul", "aten::linear", "aten::einsum", "aten::tensordot"})
MIN_BATCH = 8  # below, the copies are a few weights' worth
DEPTH = 6

PART_NONE, PART_GEMM, PART_OTHER = 0, 1, 2

# --- columns of Patterns.expanded_bmm (one row per step with such calls) ----------------------------
EB_STEP = "step"
EB_CALLS = "calls"  # calls with an expanded operand
EB_BATCH = "batch"  # the largest batch
EB_SHAPE = "shape"  # the largest expanded shape, "1024×768×768"
EB_GEMM_US = "gemm_us"  # the GEMM kernels touching expanded tensors
EB_OTHER_US = "other_us"  # the other kernels (casts, copies, the sums over the batch)
EB_US = "time_us"  # both
EB_KERNELS = "kernels"
EXPANDED_COLUMNS = (EB_STEP, EB_CALLS, EB_BATCH, EB_SHAPE, EB_GEMM_US, EB_OTHER_US, EB_US, EB_KERNELS)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(EXPANDED_COLUMNS))


@dataclass(frozen=True)
class ExpandedBmm:
    """The table, per rank.gpu row its part (PART_*), the expanded-shape elements its op touches, its µs
    and its step (0 and -1 outside the calls' kernels)."""

    table: pd.DataFrame
    part: np.ndarray
    touched: np.ndarray
    us: np.ndarray
    step: np.ndarray


def _shape3(v: object) -> tuple[int, int, int] | None:
    if isinstance(v, list) and len(v) == 3 and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in v):
        return int(v[0]), int(v[1]), int(v[2])
    return None


def _expanded(name: str, dims: object, strides: object) -> tuple[int, int, int] | None:
    """The expanded operand's shape of a call, or None."""
    if not isinstance(dims, list) or not isinstance(strides, list):
        return None
    for i in CALLS[name]:
        if i < min(len(dims), len(strides)):
            shape, st = _shape3(dims[i]), strides[i]
            if shape and shape[0] >= MIN_BATCH and isinstance(st, list) and len(st) == 3 and st[0] == 0:
                return shape
    return None


def _touched(name: str, dims: object, shapes: set[tuple[int, int, int]]) -> int:
    """Elements of expanded-shape tensors (or their transposes) an op reads, and for a bmm writes."""
    if not isinstance(dims, list):
        return 0
    got = [s for s in map(_shape3, dims[:3]) if s is not None]
    n = sum(math.prod(s) for s in got if s in shapes or (s[0], s[2], s[1]) in shapes)
    if name in BMM and len(got) >= 2 and (got[-2][0], got[-2][1], got[-1][2]) in shapes:
        n += got[-2][0] * got[-2][1] * got[-1][2]
    return n


def find_expanded_bmm(rank: RankTrace, classes: np.ndarray, steps: StepsOf, rows: np.ndarray | None = None) -> ExpandedBmm:
    """EXPANDED_COLUMNS per step, each GPU row's part and touched elements (`rows`: the GPU rows to consider)."""
    gpu, ops = rank.gpu, rank.ops
    part = np.zeros(len(gpu), dtype=np.int8)
    touched = np.zeros(len(gpu))
    none = ExpandedBmm(empty(), part, touched, np.zeros(len(gpu)), np.full(len(gpu), -1, dtype=np.int64))
    if not len(gpu) or not len(ops):
        return none
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    cand = np.flatnonzero(np.isin(names, list(CALLS)))
    parent = ops[tables.OP_PARENT].to_numpy(dtype=np.int64)[cand]
    cand = cand[(parent < 0) | ~np.isin(names[np.maximum(parent, 0)], list(BROADCASTING))]
    found: dict[int, tuple[int, int, int]] = {}
    for row, dims, strides in zip(cand.tolist(), rank.input_values(cand, tables.OP_INPUT_DIMS),
                                  rank.input_values(cand, tables.OP_INPUT_STRIDES), strict=True):
        shape = _expanded(str(names[row]), dims, strides)
        if shape is not None:
            found[row] = shape
    if not found:
        return none
    hit = np.zeros(len(ops), dtype=bool)
    hit[list(found)] = True
    outer = under(ops, hit, DEPTH, outermost=True)
    shapes = set(found.values())
    op = gpu[tables.GPU_OP].to_numpy(dtype=np.int64)
    keep = (op >= 0) if rows is None else (op >= 0) & rows
    at = np.flatnonzero(keep)
    uniq = np.unique(op[at])
    per_op = np.zeros(len(ops))
    per_op[uniq] = [_touched(str(names[o]), d, shapes)
                    for o, d in zip(uniq.tolist(), rank.input_values(uniq, tables.OP_INPUT_DIMS), strict=True)]
    mine = at[(outer[op[at]] >= 0) | (per_op[op[at]] > 0)]
    touched[mine] = per_op[op[mine]]
    part[mine] = np.where(classes[mine] == GEMM, PART_GEMM, PART_OTHER)
    if not (part > 0).any():
        return none
    dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    step = steps.gpu
    calls_at = np.array([r for r in found if outer[r] == r], dtype=np.int64)
    largest = max(shapes, key=math.prod)
    out = []
    for s in np.unique(step[part > 0]).tolist():
        if s < 0:
            continue
        here = (step == s) & (part > 0)
        n_calls = int((steps.ops[calls_at] == s).sum()) if len(calls_at) else 0
        out.append({EB_STEP: int(s), EB_CALLS: n_calls, EB_BATCH: largest[0], EB_SHAPE: "×".join(map(str, largest)),
                    EB_GEMM_US: float(dur[here & (part == PART_GEMM)].sum()),
                    EB_OTHER_US: float(dur[here & (part == PART_OTHER)].sum()), EB_US: float(dur[here].sum()),
                    EB_KERNELS: int(here.sum())})
    if not out:
        return none
    inside = part > 0
    return ExpandedBmm(pd.DataFrame(out, columns=list(EXPANDED_COLUMNS)), part, touched, np.where(inside, dur, 0.0),
                       np.where(inside, step, -1))
