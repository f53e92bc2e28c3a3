"""Rule about sparse × dense products that coalesce a COO operand at every call (store it as CSR once) or whose operand is dense enough for a GEMM (store it dense), and its what-if transform."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tracekit.analyzers.analysis import Analysis, RankAnalysis
from tracekit.analyzers.detectors import sparse_products as sp
from tracekit.analyzers.devices import Device
from tracekit.model.whatif import Transform, compose, remove_calls, scale_rows
from tracekit.suggestions.common import (
    SILENT_BELOW_PCT,
    Scope,
    every_step_tables,
    fmt_us,
    suggestion,
)
from tracekit.suggestions.model import Suggestion
from tracekit.suggestions.whatif_evidence import rank_evidence
from tracekit.units import plural

INDEX_BYTES = 4  # a CSR column index (int32, as cuSPARSE's SpMM takes it)
CSR, DENSE = "csr", "dense"


def _nnz(t: pd.DataFrame) -> np.ndarray:
    """Each call's stored entries; a call that built none (its operand was not coalesced there) takes
    the largest count known for the same matrix shape or its transpose."""
    known: dict[tuple[int, int], int] = {}
    for m, k, n in zip(t[sp.SP_M].tolist(), t[sp.SP_K].tolist(), t[sp.SP_NNZ].tolist(), strict=True):
        for key in ((m, k), (k, m)):
            known[key] = max(known.get(key, 0), int(n))
    return np.array([int(n) or known.get((m, k), 0) for m, k, n in
                     zip(t[sp.SP_M].tolist(), t[sp.SP_K].tolist(), t[sp.SP_NNZ].tolist(), strict=True)], dtype=float)


def targets(t: pd.DataFrame, device: Device) -> tuple[np.ndarray, np.ndarray]:
    """Per call (µs): (the SpMM from a CSR operand at the memory roof: each stored entry reads its value,
    its column index and a row of the dense operand, and the result is written once — NaN where the
    entries are unknown; one dense GEMM at the dtype's roof, NaN where unknown)."""
    nnz = _nnz(t)
    m, k, n = (t[c].to_numpy(dtype=float) for c in (sp.SP_M, sp.SP_K, sp.SP_N))
    size = t[sp.SP_ITEMSIZE].to_numpy(dtype=float)
    bw = device.memory_bandwidth
    csr = np.where(nnz > 0, (nnz * (n * size + size + INDEX_BYTES) + m * n * size) / bw * 1e6, np.nan)
    peak = np.array([device.peak_flops(str(d)) or math.nan for d in t[sp.SP_DTYPE].tolist()], dtype=float)
    dense = np.maximum(2.0 * m * k * n / peak, (m * k + k * n + m * n) * size / bw) * 1e6
    return csr, np.where(nnz > 0, dense, np.nan)


def savings(t: pd.DataFrame, device: Device) -> tuple[float, float]:
    """(with a CSR operand stored once: the coalesces and the COO path's layout work gone, the SpMM at
    most its CSR roof; with a dense operand: the products' kernels but for their fills as one GEMM each)."""
    csr, dense = targets(t, device)
    spmm = t[sp.SP_SPMM_US].to_numpy(dtype=float)
    extra = t[sp.SP_COALESCE_US].to_numpy(dtype=float) + t[sp.SP_LAYOUT_US].to_numpy(dtype=float)
    coo = extra > 0  # a CSR operand runs no coalesce or layout work: nothing to store differently
    as_csr = float(np.where(coo, extra + np.maximum(spmm - np.nan_to_num(csr, nan=np.inf), 0.0), 0.0).sum())
    as_dense = float(np.nansum(np.maximum(spmm + extra - dense, 0.0))) if not np.isnan(dense).all() else 0.0
    return as_csr, as_dense


def sparse_format(analysis: Analysis) -> Suggestion | None:
    """Sparse products (patterns.sparse_products) in every headline step whose COO operand is coalesced
    per call, or whose operand would be faster as a dense GEMM: the better of the two changes, priced
    per call at the device's roofs. Silent below SILENT_BELOW_PCT."""
    device = analysis.device
    if device is None:
        return None
    scope = Scope.of(analysis)
    rows: list[dict[str, object]] = []
    totals = {CSR: 0.0, DENSE: 0.0}
    head: tuple[float, float, str, float, float, float] | None = None  # products, coalescing, matrix, entries, density, µs
    for r, t, n in every_step_tables(analysis, "sparse_products", sp.SP_STEP):
        as_csr, as_dense = savings(t, device)
        totals[CSR] += as_csr
        totals[DENSE] += as_dense
        entries = float(_nnz(t).max())
        m, k = int(t[sp.SP_M].iat[0]), int(t[sp.SP_K].iat[0])
        density = entries / (m * k) if m * k else 0.0
        spent = float((t[sp.SP_SPMM_US] + t[sp.SP_COALESCE_US] + t[sp.SP_LAYOUT_US]).sum()) / n
        coalescing = float(t[sp.SP_COALESCED].sum()) / n
        rows.append({"rank": r.rank, "change": DENSE if as_dense > as_csr else CSR, "products_per_step": len(t) / n,
                     "coalescing_per_step": coalescing, "matrix": f"{m}×{k}", "stored_entries": entries,
                     "density": density, "spmm_us_per_step": float(t[sp.SP_SPMM_US].sum()) / n,
                     "coalesce_us_per_step": float(t[sp.SP_COALESCE_US].sum()) / n,
                     "layout_us_per_step": float(t[sp.SP_LAYOUT_US].sum()) / n,
                     "saving_us_per_step": max(as_csr, as_dense) / n})
        head = head or (len(t) / n, coalescing, f"{m}×{k}", entries, density, spent)
    if head is None:
        return None
    choice = DENSE if totals[DENSE] > totals[CSR] else CSR
    saving = totals[choice] / scope.ranks
    products, coalescing, matrix, entries, density, spent = head
    what = (f"{plural(round(products), 'sparse product')} per step ({fmt_us(spent)}), a {matrix} matrix"
            + (f" with {entries:,.0f} stored entries" if entries else ""))
    if choice == DENSE:
        title = (f"Store the sparse matrix dense: {density:.1%} of its entries are nonzero, so one GEMM per "
                 f"product beats cuSPARSE; {what}")
        formula = ("each product's kernels but its output fill replaced by one dense GEMM at the roof, "
                   "max(2·M·K·N FLOPs at the dtype's peak, (M·K + K·N + M·N) elements at the memory bandwidth)")
    else:
        title = (f"Convert the sparse COO matrix to CSR once (A.to_sparse_csr()): "
                 f"{plural(round(coalescing), 'product')} per step coalesce it again; {what}")
        formula = ("per COO product: its coalesce and layout kernels (index conversions, transposes) gone and its "
                   "SpMM at most the CSR roof, each stored entry's value, column index and dense row read once "
                   "and the result written once at the memory bandwidth")
    formula += f" = {fmt_us(saving)} ({fmt_us(saving / scope.steps)} per step)"
    return suggestion("sparse_format", title, saving, scope, formula, rows, min_pct=SILENT_BELOW_PCT)


def sparse_format_transform(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """The products' coalesce and layout calls gone with their kernels (remove_calls); each SpMM kernel
    × the call's target / its SpMM time (CSR: at most its CSR roof; dense: one GEMM at its roof)."""
    p, device = r.patterns, r.roofline.device
    rows = rank_evidence(s, r)
    if p is None or device is None or not rows or not len(p.sparse_products):
        return None
    if len(p.sparse_part) != len(r.classification.table) or not len(p.sparse_calls):
        return None
    t = p.sparse_products
    csr, dense = targets(t, device)
    spmm = t[sp.SP_SPMM_US].to_numpy(dtype=float)
    target = dense if rows[0].get("change") == DENSE else csr
    ratio = np.where(np.isnan(target) | (spmm <= 0), 1.0, np.minimum(np.nan_to_num(target) / np.where(spmm > 0, spmm, 1.0), 1.0))
    mine = (p.sparse_call >= 0) & (p.sparse_part == sp.PART_SPMM)
    factor = np.where(mine, ratio[np.maximum(p.sparse_call, 0)], 1.0)
    return compose([remove_calls(p.sparse_calls), scale_rows(factor)])
