"""Convolutions written as im2col: `F.unfold` (aten::im2col) + matmul, folded back with `F.fold` / unfold's backward (aten::col2im), where `F.conv2d` convolves without ever writing the column tensor.

`F.unfold(x, k)` copies every k×k window of x into a column tensor [N, C·kh·kw, L] (kh·kw times x's
size for a stride-1 3×3 convolution), and the matmul that follows reads it, often after a cast
(autocast: bf16 copies) or a transpose (`.transpose(1, 2)` → contiguous copy); in training the
gradient of the columns is written back with col2im. cuDNN's implicit-GEMM convolution reads x and
the weight directly. The work a native convolution does not do: the im2col/col2im kernels (and
whatever the ops under them launch) and the copy-class kernels whose op reads a tensor of a column
shape ([N, CKK, L] or [N, L, CKK]): the casts and contiguous copies of the columns, forward and
backward. The GEMMs over the columns stay, as the convolution's own FLOPs (held-out unfold_conv,
H100: those kernels 37.9 ms of a 48.6 ms unprofiled step; with `F.conv2d` the step took 10.8 ms).

One row per step with such calls; per rank.gpu row, whether a native convolution would not run it."""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.gqa_expand import dims_of
from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.analyzers.detectors.layers import under
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

IM2COL = "aten::im2col"
COL2IM = "aten::col2im"
COPY_CLASS = "copy"
MAX_DEPTH = 8  # ancestors searched for an im2col / col2im call

# --- columns of Patterns.unfold_conv (one row per step with im2col / col2im calls) ------------------
UC_STEP = "step"
UC_IM2COL = "im2col_calls"
UC_COL2IM = "col2im_calls"
UC_SHAPES = "columns"  # the column tensors' shapes, "64×576×4096, 64×1152×1024"
UC_KERNELS = "kernels"  # the rows a native convolution does not run
UC_FOLD_US = "fold_us"  # of which im2col / col2im kernels (and what their ops launch)
UC_COPY_US = "copy_us"  # of which casts and contiguous copies of the columns
UC_COLUMN_BYTES = "column_bytes"  # the largest column tensor, at 2 bytes an element (bf16) at least
UNFOLD_COLUMNS = (UC_STEP, UC_IM2COL, UC_COL2IM, UC_SHAPES, UC_KERNELS, UC_FOLD_US, UC_COPY_US, UC_COLUMN_BYTES)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(UNFOLD_COLUMNS))


@dataclass(frozen=True)
class UnfoldConv:
    """The table and, per rank.gpu row, whether it is im2col work a native convolution does not do."""

    table: pd.DataFrame
    rows: np.ndarray


def _pair(text: object) -> tuple[int, int] | None:
    """A recorded int list of two positive-or-zero ints ('[3, 3]'), None for anything else (untrusted text)."""
    try:
        v = ast.literal_eval(str(text).strip()) if len(str(text)) < 40 else None
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 1 << 20 for x in v):
        return int(v[0]), int(v[1])
    return None


def column_shape(dims: object, concrete: object) -> tuple[int, int, int] | None:
    """[N, C·kh·kw, L] of aten::im2col(input [N, C, H, W], kernel_size, dilation, padding, stride)."""
    first = dims_of(dims[0]) if isinstance(dims, list) and dims else None
    if first is None or len(first) != 4 or not isinstance(concrete, list) or len(concrete) < 5:
        return None
    k, dil, pad, st = (_pair(c) for c in concrete[1:5])
    if k is None or dil is None or pad is None or st is None or min(k) < 1 or min(dil) < 1 or min(st) < 1:
        return None
    n, c, h, w = first
    oh = (h + 2 * pad[0] - dil[0] * (k[0] - 1) - 1) // st[0] + 1
    ow = (w + 2 * pad[1] - dil[1] * (k[1] - 1) - 1) // st[1] + 1
    return (n, c * k[0] * k[1], oh * ow) if oh > 0 and ow > 0 else None


def find_unfold_convs(rank: RankTrace, classes: np.ndarray, steps: StepsOf,
                      rows: np.ndarray | None = None) -> UnfoldConv:
    """UNFOLD_COLUMNS per step with im2col / col2im calls, and the rows a native convolution drops
    (`rows`: the GPU rows to consider, None all)."""
    ops, gpu = rank.ops, rank.gpu
    none = UnfoldConv(empty(), np.zeros(len(gpu), dtype=bool))
    if not len(ops) or not len(gpu):
        return none
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    is_im2col, is_col2im = names == IM2COL, names == COL2IM
    if not (is_im2col.any() or is_col2im.any()):
        return none
    shapes: set[tuple[int, ...]] = set()
    for i in np.flatnonzero(is_im2col):
        inputs = rank.op_inputs(int(i))
        shape = column_shape(inputs.get(tables.OP_INPUT_DIMS), inputs.get(tables.OP_CONCRETE_INPUTS))
        if shape is not None:
            shapes.add(shape)
    for i in np.flatnonzero(is_col2im):
        dims = rank.op_inputs(int(i)).get(tables.OP_INPUT_DIMS) or []
        first = dims_of(dims[0]) if dims else None
        if first is not None and len(first) == 3:
            shapes.add(first)
    found = sorted(shapes, key=lambda s: -math.prod(s))
    shapes |= {(s[0], s[2], s[1]) for s in found}
    op = gpu[tables.GPU_OP].to_numpy(dtype=np.int64)
    linked = op >= 0
    in_fold = np.zeros(len(gpu), dtype=bool)
    fold_op = under(ops, is_im2col | is_col2im, depth=MAX_DEPTH)
    in_fold[linked] = fold_op[op[linked]] >= 0
    is_copy = (classes == COPY_CLASS) & linked & ~in_fold
    copies = np.zeros(len(gpu), dtype=bool)
    if shapes and is_copy.any():
        candidates = np.flatnonzero(is_copy)
        dims = rank.input_values(op[candidates], tables.OP_INPUT_DIMS)
        for g, d in zip(candidates, dims, strict=True):
            first = dims_of(d[0]) if isinstance(d, list) and d else None
            copies[g] = first is not None and first in shapes
    mine = in_fold | copies
    if rows is not None:
        mine &= rows
    if not mine.any():
        return none
    step, op_steps = steps.gpu, steps.ops
    dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    columns = ", ".join("×".join(map(str, s)) for s in found[:4]) + (", …" if len(found) > 4 else "")
    biggest = 2.0 * max((math.prod(s) for s in found), default=0)
    out = []
    for s in np.unique(step[mine]):
        at = mine & (step == s)
        in_step = op_steps == s
        out.append({UC_STEP: int(s), UC_IM2COL: int((is_im2col & in_step).sum()),
                    UC_COL2IM: int((is_col2im & in_step).sum()), UC_SHAPES: columns, UC_KERNELS: int(at.sum()),
                    UC_FOLD_US: float(dur[at & in_fold].sum()), UC_COPY_US: float(dur[at & copies].sum()),
                    UC_COLUMN_BYTES: biggest})
    return UnfoldConv(pd.DataFrame(out, columns=list(UNFOLD_COLUMNS)), mine)
