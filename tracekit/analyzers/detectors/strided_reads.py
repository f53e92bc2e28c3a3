"""Element-wise kernels that read a tensor column by column: an input whose innermost dimension (of more than one element) steps 2 to 64 elements in memory and none of whose dimensions is contiguous, a field of an (N, F) array of structures (`state[:, 0]`, `t[..., ::2]`), which torch's element-wise kernels read without vectorised loads, one element per 32-byte sector.

Stored as F contiguous tensors (a structure of arrays, or an (F, N) tensor whose rows are the fields),
the same ops read contiguous memory (held-out ocean_particles_aos_columns, H100: 78 such kernels a
step took 11.4 ms of the step's 15.2 ms of kernels; with the (8, N) layout the step's kernels took
5.9 ms and the unprofiled step fell by 9.1 ms). Only inputs of at least MIN_ELEMENTS elements count
(smaller reads stay in cache lines the kernel uses anyway); a stride of 0 is a broadcast, not a column;
an input with a contiguous dimension that is not its innermost is a permuted layout (a channels_last
tensor added to an NCHW one: xDiT's Flux capture trace), which storing fields apart does not fix.

One row per step with such kernels; per rank.gpu row, whether its op reads such a column."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analyzers.costs.attribution import KernelCosts
from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.analyzers.kernels import COPY, ELEMENTWISE
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

CLASSES = (ELEMENTWISE, COPY)
MIN_ELEMENTS = 1 << 16
MIN_STRIDE, MAX_STRIDE = 2, 64  # wider steps are other layouts (a transposed matrix), not fields of a record
MAX_DIMS = 12

# --- columns of Patterns.strided_reads (one row per step with such kernels) ------------------------
SR_STEP = "step"
SR_KERNELS = "kernels"
SR_US = "time_us"  # their kernel time in the step
SR_STRIDE = "stride"  # the most common column stride among them (elements)
SR_SHAPE = "shape"  # the largest column read: "8388608 (stride 8)"
SR_BYTES = "bytes"  # what they move read contiguously (the costs model's bytes), NaN where unknown
# the rank's reference: contiguous element-wise and copy kernels moving at least REF_MIN_BYTES a call,
# their bytes and time summed over the selected rows (the rate a contiguous read reaches on this GPU)
SR_REF_BYTES = "reference_bytes"
SR_REF_US = "reference_us"
STRIDED_COLUMNS = (SR_STEP, SR_KERNELS, SR_US, SR_STRIDE, SR_SHAPE, SR_BYTES, SR_REF_BYTES, SR_REF_US)
REF_MIN_BYTES = 1 << 20


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(STRIDED_COLUMNS))


@dataclass(frozen=True)
class StridedReads:
    """The table and, per rank.gpu row, the column stride its op reads (0: none)."""

    table: pd.DataFrame
    stride: np.ndarray


def _ints(v: object) -> tuple[int, ...] | None:
    """A recorded int list of at most MAX_DIMS non-negative ints, None for anything else (untrusted text)."""
    if isinstance(v, list) and len(v) <= MAX_DIMS and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v):
        return tuple(int(x) for x in v)
    return None


def column_read(dims: object, strides: object) -> tuple[int, int] | None:
    """(stride, elements) of the largest input read column by column: its innermost dimension of more
    than one element steps MIN_STRIDE..MAX_STRIDE elements and none of them is contiguous (the
    record's other fields were indexed away); None when no input does."""
    if not isinstance(dims, list) or not isinstance(strides, list):
        return None
    best: tuple[int, int] | None = None
    for d_raw, s_raw in zip(dims, strides, strict=False):
        d, s = _ints(d_raw), _ints(s_raw)
        if not d or s is None or len(s) != len(d):
            continue
        n = math.prod(d)
        inner = [i for i, x in enumerate(d) if x > 1]
        if n < MIN_ELEMENTS or not inner or not MIN_STRIDE <= s[inner[-1]] <= MAX_STRIDE:
            continue
        if any(s[i] == 1 for i in inner):  # a permuted layout (channels_last read as NCHW), not a field
            continue
        if best is None or n > best[1]:
            best = (s[inner[-1]], n)
    return best


def find_strided_reads(rank: RankTrace, classes: np.ndarray, steps: StepsOf, costs: KernelCosts | None = None,
                       rows: np.ndarray | None = None) -> StridedReads:
    """STRIDED_COLUMNS per step, and the column stride of each GPU row's op (`rows`: the GPU rows to
    consider, None all; `costs`: the bytes of each row, None: unknown)."""
    gpu = rank.gpu
    stride = np.zeros(len(gpu), dtype=np.int64)
    none = StridedReads(empty(), stride)
    if not len(gpu) or not len(rank.ops) or len(classes) != len(gpu):
        return none
    op = gpu[tables.GPU_OP].to_numpy(dtype=np.int64)
    moved = np.full(len(gpu), np.nan)
    if costs is not None and len(costs.table) == len(gpu):
        moved = costs.table["bytes"].to_numpy(dtype=float)
    keep = (op >= 0) & np.isin(classes, CLASSES)
    if rows is not None:
        keep &= rows
    # a kernel whose op reads MIN_ELEMENTS elements moves at least that many bytes: only those are decoded
    cand = np.flatnonzero(keep & ~(moved < MIN_ELEMENTS))
    if not len(cand):
        return none
    ops_of = op[cand]
    dims = rank.input_values(ops_of, tables.OP_INPUT_DIMS)
    strides = rank.input_values(ops_of, tables.OP_INPUT_STRIDES)
    size = np.zeros(len(gpu), dtype=np.int64)
    seen: dict[tuple[int, int], tuple[int, int] | None] = {}  # decoded values are shared per distinct text
    for g, d, s in zip(cand.tolist(), dims, strides, strict=True):
        key = (id(d), id(s))
        if key not in seen:
            seen[key] = column_read(d, s)
        found = seen[key]
        if found is not None:
            stride[g], size[g] = found
    mine = stride > 0
    if not mine.any():
        return none
    dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    ref = keep & ~mine & (moved >= REF_MIN_BYTES) & (dur > 0)
    ref_bytes, ref_us = float(moved[ref].sum()), float(dur[ref].sum())
    step = steps.gpu
    values, counts = np.unique(stride[mine], return_counts=True)
    common = int(values[np.argmax(counts)])
    largest = int(np.argmax(np.where(mine, size, -1)))
    shape = f"{int(size[largest])} (stride {int(stride[largest])})"
    out = []
    for s in np.unique(step[mine]).tolist():
        at = mine & (step == s)
        out.append({SR_STEP: int(s), SR_KERNELS: int(at.sum()), SR_US: float(dur[at].sum()), SR_STRIDE: common,
                    SR_SHAPE: shape, SR_BYTES: float(moved[at].sum()) if not np.isnan(moved[at]).any() else math.nan,
                    SR_REF_BYTES: ref_bytes, SR_REF_US: ref_us})
    return StridedReads(pd.DataFrame(out, columns=list(STRIDED_COLUMNS)), stride)
