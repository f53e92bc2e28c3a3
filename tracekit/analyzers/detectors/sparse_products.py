"""Sparse × dense products (torch.sparse.mm, a sparse matrix in addmm/mm) whose sparse operand is an uncoalesced COO tensor, coalesced again by every call, or so dense that one dense GEMM would do the work faster.

A COO product on CUDA coalesces (sorts and merges) its sparse operand's indices at every call (the
`aten::_coalesce` under the product: a merge sort, a unique-by-key sweep and a segmented sum, with a
host sync for the new nnz), converts the indices to 32 bits and transposes the dense operand and the
result for the legacy column-major SpMM (held-out copurchase_gcn_uncoalesced_coo, H100: 524,288 nodes,
8.9 M entries, three products a step: the coalesces 11.2 ms, the transposes 6.5 ms and the COO SpMM
12.6 ms of a 34.5 ms bare step; with the adjacency converted to CSR once, `csrmm_alg2` took 4.25 ms and
the bare step 6.35 ms). A matrix with a tenth of its entries nonzero is no longer sparse for a GEMM
(held-out gcn_sparse_dense_graph, H100: 8,192 nodes, 6.3 M entries; the dense adjacency saved 42.0 ms
of a 45.6 ms bare step).

A product is the outermost product op (PRODUCTS) above a cuSPARSE kernel. Its sparse operand is the
2-D tensor input whose recorded strides are an empty list (a sparse tensor has none); its number of
stored entries is the `[2, nnz]` index tensor the coalesce builds its result from (0 when no coalesce
ran: a CSR operand records none). Each kernel of a product gets a part: the SpMM itself (library
cusparse), the coalesce's kernels, the zero fill of the output, and the rest (index conversions,
transposes: the COO path's layout work).

One row per product call in the steps; per rank.gpu row, its part (PART_*) and its call's row in the
table (-1 none); per rank.runtime row, whether it is a call of a product's coalesce or layout work (what
a CSR or dense operand no longer runs)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analyzers.costs.op_args import DTYPE_SIZE, DTYPES
from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.analyzers.detectors.layers import under
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

LIBRARY = "cusparse"
PRODUCTS = frozenset({"aten::mm", "aten::addmm", "aten::_sparse_mm", "aten::_sparse_addmm", "aten::sparse_mm",
                      "aten::matmul", "aten::spmm", "aten::hspmm", "aten::sspaddmm", "aten::smm", "aten::bmm"})
COALESCE = frozenset({"aten::_coalesce", "aten::coalesce"})
FILLS = frozenset({"aten::zero_", "aten::fill_", "aten::zeros", "aten::zeros_like"})
BUILD = "aten::_sparse_coo_tensor_with_dims_and_tensors"  # the coalesced result: its [2, nnz] indices
DEPTH = 8  # op levels searched above a kernel's op (addmm under _sparse_addmm under _sparse_mm, the coalesce's)

PART_NONE, PART_SPMM, PART_COALESCE, PART_FILL, PART_LAYOUT = 0, 1, 2, 3, 4

# --- columns of Patterns.sparse_products (one row per product call in the steps) --------------------
SP_STEP = "step"
SP_OP = "op_row"  # the product op's row in rank.ops
SP_M, SP_K, SP_N = "m", "k", "n"  # sparse M×K times dense K×N
SP_NNZ = "nnz"  # stored entries of the sparse operand (0: unknown)
SP_DTYPE = "dtype"  # the dense operand's dtype ("fp32", ...)
SP_ITEMSIZE = "itemsize"
SP_COALESCED = "coalesces"  # whether the call coalesced its operand
SP_SPMM_US = "spmm_us"  # the cuSPARSE kernels' time
SP_COALESCE_US = "coalesce_us"  # the coalesce's kernels' time
SP_LAYOUT_US = "layout_us"  # the other kernels' time (index conversions, transposes), fills excluded
SP_FILL_US = "fill_us"
SP_WORK_US = "work_us"  # SpMM + coalesce + layout: what a CSR or dense operand changes
SP_KERNELS = "kernels"
SPARSE_COLUMNS = (SP_STEP, SP_OP, SP_M, SP_K, SP_N, SP_NNZ, SP_DTYPE, SP_ITEMSIZE, SP_COALESCED, SP_SPMM_US,
                  SP_COALESCE_US, SP_LAYOUT_US, SP_FILL_US, SP_WORK_US, SP_KERNELS)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(SPARSE_COLUMNS))


@dataclass(frozen=True)
class SparseProducts:
    """The table, per rank.gpu row its part (PART_*) and its product call's table row (-1 none), per
    rank.runtime row whether it is the coalesce's or the layout work's."""

    table: pd.DataFrame
    part: np.ndarray
    call: np.ndarray
    calls: np.ndarray


def _shape2(v: object) -> tuple[int, int] | None:
    if isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in v):
        return int(v[0]), int(v[1])
    return None


def _operands(dims: object, strides: object, types: object) -> tuple[int, int, int, str, float] | None:
    """(M, K, N, dtype, itemsize) of a product call: the 2-D input with recorded empty strides is the
    sparse M×K one, the first strided 2-D input with K rows after it the dense K×N one."""
    if not isinstance(dims, list) or not isinstance(strides, list) or not isinstance(types, list):
        return None
    sparse = next((i for i, (d, s) in enumerate(zip(dims, strides, strict=False)) if s == [] and _shape2(d)), None)
    if sparse is None:
        return None
    m, k = _shape2(dims[sparse]) or (0, 0)
    for i in range(sparse + 1, min(len(dims), len(strides), len(types))):
        d = _shape2(dims[i])
        info = DTYPES.get(str(types[i]))
        if d is not None and d[0] == k and isinstance(strides[i], list) and strides[i] and info is not None:
            return m, k, d[1], info[0], float(DTYPE_SIZE.get(info[0], info[1]))
    return None


def _nnz(rank: RankTrace, names: np.ndarray, product: np.ndarray) -> dict[int, int]:
    """Per product op row: the stored entries of the coalesced result built under it."""
    rows = np.flatnonzero((names == BUILD) & (product >= 0))
    out: dict[int, int] = {}
    for row, dims in zip(rows.tolist(), rank.input_values(rows, tables.OP_INPUT_DIMS), strict=True):
        if isinstance(dims, list):
            nnz = next((d[1] for d in dims if _shape2(d) and d[0] == 2), 0)
            if nnz:
                out.setdefault(int(product[row]), int(nnz))
    return out


def find_sparse_products(rank: RankTrace, libraries: np.ndarray, steps: StepsOf,
                         rows: np.ndarray | None = None) -> SparseProducts:
    """SPARSE_COLUMNS per product call and each GPU row's part (`rows`: the GPU rows to consider, None all)."""
    gpu, ops = rank.gpu, rank.ops
    part = np.zeros(len(gpu), dtype=np.int8)
    call = np.full(len(gpu), -1, dtype=np.int64)
    none = SparseProducts(empty(), part, call, np.zeros(len(rank.runtime), dtype=bool))
    spmm = libraries == LIBRARY if len(libraries) == len(gpu) else np.zeros(len(gpu), dtype=bool)
    if rows is not None:
        spmm &= rows
    op = gpu[tables.GPU_OP].to_numpy(dtype=np.int64) if len(gpu) else np.zeros(0, dtype=np.int64)
    if not (spmm & (op >= 0)).any():
        return none
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    product = under(ops, np.isin(names, list(PRODUCTS)), DEPTH, outermost=True)
    coalesce = under(ops, np.isin(names, list(COALESCE)), DEPTH) >= 0
    mine = np.flatnonzero(spmm & (op >= 0))
    calls = np.unique(product[op[mine]])
    calls = calls[calls >= 0]
    if not len(calls):
        return none
    nnz = _nnz(rank, names, product)
    shapes = {int(c): _operands(d, s, t) for c, d, s, t in zip(
        calls.tolist(), rank.input_values(calls, tables.OP_INPUT_DIMS), rank.input_values(calls, tables.OP_INPUT_STRIDES),
        rank.input_values(calls, tables.OP_INPUT_TYPES), strict=True)}
    index = {c: i for i, c in enumerate(c for c in calls.tolist() if shapes[c] is not None)}
    if not index:
        return none
    linked = op >= 0
    owner = np.where(linked, product[np.where(linked, op, 0)], -1)
    in_call = np.isin(owner, list(index)) & (rows if rows is not None else True)
    at = np.flatnonzero(in_call)
    call[at] = [index[int(o)] for o in owner[at].tolist()]
    kernel_op = op[at]
    part[at] = np.where(spmm[at], PART_SPMM, np.where(coalesce[kernel_op], PART_COALESCE,
                        np.where(np.isin(names[kernel_op], list(FILLS)), PART_FILL, PART_LAYOUT)))
    dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    spent = np.zeros((len(index), PART_LAYOUT + 1))
    count = np.zeros(len(index), dtype=np.int64)
    np.add.at(spent, (call[at], part[at]), dur[at])
    np.add.at(count, call[at], 1)
    out = []
    for c, i in index.items():
        m, k, n, dtype, itemsize = shapes[c] or (0, 0, 0, "", 0.0)
        out.append({SP_STEP: int(steps.ops[c]), SP_OP: c, SP_M: m, SP_K: k, SP_N: n, SP_NNZ: nnz.get(c, 0),
                    SP_DTYPE: dtype, SP_ITEMSIZE: itemsize, SP_COALESCED: bool(spent[i, PART_COALESCE] > 0),
                    SP_SPMM_US: float(spent[i, PART_SPMM]), SP_COALESCE_US: float(spent[i, PART_COALESCE]),
                    SP_LAYOUT_US: float(spent[i, PART_LAYOUT]), SP_FILL_US: float(spent[i, PART_FILL]),
                    SP_WORK_US: float(spent[i, PART_SPMM] + spent[i, PART_COALESCE] + spent[i, PART_LAYOUT]),
                    SP_KERNELS: int(count[i])})
    return SparseProducts(pd.DataFrame(out, columns=list(SPARSE_COLUMNS)), part, call,
                          _work_calls(rank, names, product, coalesce, set(index), set(op[at[part[at] == PART_SPMM]].tolist())))


def _work_calls(rank: RankTrace, names: np.ndarray, product: np.ndarray, coalesce: np.ndarray,
                calls: set[int], spmm_ops: set[int]) -> np.ndarray:
    """Per rank.runtime row: a call of a product's coalesce or of its other work (not the SpMM's own
    op, not a fill)."""
    rt = rank.runtime
    if not len(rt):
        return np.zeros(0, dtype=bool)
    rt_op = rt[tables.RT_OP].to_numpy(dtype=np.int64)
    linked = rt_op >= 0
    at = np.where(linked, rt_op, 0)
    mine = linked & np.isin(product[at], list(calls))
    return mine & (coalesce[at] | (~np.isin(at, list(spmm_ops)) & ~np.isin(names[at], list(FILLS))))
