"""Leading dimensions of the GEMM calls behind the kernels, from the recorded strides: which operand's rows start off a 16-byte boundary (what keeps cuBLAS/CUTLASS off their aligned kernels).

For a 2-D operand (the last two dims of a batched one) with strides (s0, s1): row-major (s1 = 1)
has leading dimension s0, column-major / transposed (s0 = 1) has s1; the output, written fresh and
contiguous, has leading dimension N. One row per (kernel, op, shapes) over the headline steps'
kernels."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analyzers.costs.op_args import OpArgs, format_shapes, shapes_of
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

ALIGN_BYTES = 16  # cuBLAS/CUTLASS aligned kernels want 16-byte multiples of the leading dims
# op -> positions of the two matrix operands
GEMM_OPERANDS: dict[str, tuple[int, int]] = {
    "aten::mm": (0, 1), "aten::bmm": (0, 1), "aten::addmm": (1, 2), "aten::baddbmm": (1, 2),
    "aten::matmul": (0, 1), "aten::_scaled_mm": (0, 1),
}

# --- columns of Patterns.gemm_layouts -------------------------------------------------------------
GL_KERNEL = "kernel"
GL_OP = "op"
GL_SHAPES = "shapes"  # format_shapes text, as the kernel rows' shapes are written
GL_LDS = "leading_dims"  # "A 768, B 768, C 50257": each operand's leading dimension (elements)
GL_MISALIGNED = "misaligned_lds"  # "B 50257, C 50257": those not a multiple of 16 bytes ("" when none)
GEMM_LAYOUT_COLUMNS = (GL_KERNEL, GL_OP, GL_SHAPES, GL_LDS, GL_MISALIGNED)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(GEMM_LAYOUT_COLUMNS))


def _ld(dims: tuple[int, ...], strides: tuple[int, ...] | None) -> int | None:
    if strides is None or len(dims) < 2 or len(strides) != len(dims):
        return None
    s0, s1 = strides[-2], strides[-1]
    if s1 == 1 or dims[-1] == 1:
        return s0
    if s0 == 1 or dims[-2] == 1:
        return s1
    return None  # neither dim contiguous: not a layout a GEMM takes as is


def layout(name: str, args: OpArgs) -> tuple[str, str] | None:
    """(leading dims text, misaligned ones text) of one GEMM call, None when its strides are unknown."""
    pos = GEMM_OPERANDS.get(name)
    if pos is None:
        return None
    a, b = args.tensor(pos[0]), args.tensor(pos[1])
    if a is None or b is None or len(a.dims) < 2 or len(b.dims) < 2:
        return None
    lda, ldb = _ld(a.dims, a.strides), _ld(b.dims, b.strides)
    if lda is None or ldb is None:
        return None
    align = max(int(ALIGN_BYTES // max(a.itemsize, 1)), 1)
    lds = (("A", lda), ("B", ldb), ("C", b.dims[-1]))
    bad = [f"{n} {v}" for n, v in lds if v > 1 and v % align]
    return ", ".join(f"{n} {v}" for n, v in lds), ", ".join(bad)


def find_gemm_layouts(rank: RankTrace, classes: np.ndarray, rows: np.ndarray | None = None) -> pd.DataFrame:
    """GEMM_LAYOUT_COLUMNS rows for the GEMM-class kernels in the selected GPU rows (`rows`, a bool
    per rank.gpu row; None: every row) whose op recorded its operands' strides."""
    gpu, ops = rank.gpu, rank.ops
    if not len(gpu) or not len(ops):
        return empty()
    op_pos = gpu[tables.GPU_OP].to_numpy(dtype=np.int64)
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    keep = (op_pos >= 0) & (classes == "gemm")
    if rows is not None:
        keep &= rows
    keep &= np.isin(names[np.clip(op_pos, 0, None)], list(GEMM_OPERANDS))
    kernel_names = gpu[tables.GPU_NAME].to_numpy(dtype=object)
    seen: dict[tuple[str, str, str], tuple[str, str]] = {}
    done_ops: dict[int, tuple[str, tuple[str, str]] | None] = {}
    by_sig: dict[tuple[str, int, int, int], tuple[str, tuple[str, str]] | None] = {}
    for g in np.flatnonzero(keep).tolist():
        op = int(op_pos[g])
        if op not in done_ops:
            inputs = rank.op_inputs(op)
            dims, types, strides = (inputs.get(tables.OP_INPUT_DIMS), inputs.get(tables.OP_INPUT_TYPES),
                                    inputs.get(tables.OP_INPUT_STRIDES))
            sig = (str(names[op]), id(dims), id(types), id(strides))  # equal inputs share their decoded objects
            if sig not in by_sig:
                found = layout(sig[0], OpArgs.of(dims, types, strides))
                by_sig[sig] = None if found is None else (format_shapes(shapes_of(dims)) or "", found)
            done_ops[op] = by_sig[sig]
        got = done_ops[op]
        if got is not None:
            seen.setdefault((str(kernel_names[g]), str(names[op]), got[0]), got[1])
    recs = [{GL_KERNEL: k, GL_OP: o, GL_SHAPES: s, GL_LDS: lds, GL_MISALIGNED: bad}
            for (k, o, s), (lds, bad) in seen.items()]
    return pd.DataFrame(recs, columns=list(GEMM_LAYOUT_COLUMNS)) if recs else empty()
