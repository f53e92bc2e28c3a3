"""Rules about computations written by hand that a library call does with far less memory traffic: convolutions as im2col through `F.unfold` + matmul (F.conv2d), pairwise distances by a broadcast difference (a GEMM: torch.cdist)."""

from __future__ import annotations

from tracekit.analyzers.analysis import Analysis, RankAnalysis
from tracekit.analyzers.detectors import broadcast_distance as bd
from tracekit.analyzers.detectors import unfold_conv as uc
from tracekit.model.whatif import Transform, compose, scale_host, scale_nodes, scale_rows
from tracekit.suggestions.common import (
    SILENT_BELOW_PCT,
    Scope,
    every_step_tables,
    fmt_bytes,
    fmt_us,
    in_headline,
    rank_tables,
    suggestion,
)
from tracekit.suggestions.model import Suggestion
from tracekit.units import plural


def use_conv2d(analysis: Analysis) -> Suggestion | None:
    """Convolutions as im2col + matmul (patterns.unfold_conv), in every headline step: the im2col /
    col2im kernels and the column tensors' casts and copies are work a native convolution does not
    do. Traced estimate: their kernel time (the GEMMs over the columns stay, as the convolution's
    FLOPs); the what-if also removes the host work that launches them. Silent below SILENT_BELOW_PCT."""
    scope = Scope.of(analysis)
    rows: list[dict[str, object]] = []
    total, calls, largest, first = 0.0, 0, 0.0, ""
    for r, table in rank_tables(analysis, "unfold_conv"):
        if table is None or not len(table):
            continue
        t = table[in_headline(r, table[uc.UC_STEP].to_numpy())]
        if len(t) < max(len(r.launch.steady_steps), 1):
            continue  # not in every headline step
        fold, copies = float(t[uc.UC_FOLD_US].sum()), float(t[uc.UC_COPY_US].sum())
        total += fold + copies
        n = len(t)
        if not rows:
            calls = round(float(t[uc.UC_IM2COL].sum() + t[uc.UC_COL2IM].sum()) / n)
            largest, first = float(t[uc.UC_COLUMN_BYTES].max()), str(t[uc.UC_SHAPES].iloc[0]).split(", ")[0]
        rows.append({"rank": r.rank, "steps": n, "im2col_calls_per_step": float(t[uc.UC_IM2COL].sum()) / n,
                     "col2im_calls_per_step": float(t[uc.UC_COL2IM].sum()) / n, "columns": str(t[uc.UC_SHAPES].iloc[0]),
                     "kernels_per_step": float(t[uc.UC_KERNELS].sum()) / n, "im2col_col2im_us_per_step": fold / n,
                     "column_copies_us_per_step": copies / n, "largest_column_bytes": float(t[uc.UC_COLUMN_BYTES].max())})
    if not rows:
        return None
    x = rows[0]
    saving = total / scope.ranks
    title = (f"Convolve with F.conv2d instead of F.unfold + matmul: {plural(calls, 'im2col/col2im call')} per step "
             f"write column tensors up to {fmt_bytes(largest)} ({first}), "
             f"{fmt_us(saving / scope.steps)} of kernels per step a native convolution does not run")
    formula = (f"im2col/col2im kernels {fmt_us(x['im2col_col2im_us_per_step'])} + the columns' casts and contiguous "
               f"copies {fmt_us(x['column_copies_us_per_step'])} per step ({x['kernels_per_step']:.0f} kernels); "
               "the GEMMs over the columns stay, as the convolution's own FLOPs")
    return suggestion("use_conv2d", title, saving, scope, formula, rows, min_pct=SILENT_BELOW_PCT)


def use_conv2d_transform(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """The im2col work's kernels gone (patterns.in_unfold_conv) and the host work that launches them."""
    p = r.patterns
    mask = p.in_unfold_conv if p is not None else None
    if mask is None or len(mask) != len(r.classification.table) or not mask.any():
        return None
    return compose([scale_rows(1.0 - mask.astype(float)), scale_host(mask, 0.0)])


def distance_gemm(analysis: Analysis) -> Suggestion | None:
    """Pairwise distances through a broadcast difference (patterns.broadcast_distance), in every headline
    step: its kernels (the difference, its square, the reduction) against one float32 GEMM of 2·N·M·D
    FLOPs writing N × M at the device's roof. Traced and what-if: the chains' kernels at that roof's
    share of their time. Silent below SILENT_BELOW_PCT."""
    scope = Scope.of(analysis)
    device = analysis.device
    rows: list[dict[str, object]] = []
    total = 0.0
    if device is None:
        return None
    for r, t, n in every_step_tables(analysis, "broadcast_distance", bd.BD_STEP):
        calls = float(t[bd.BD_CALLS].sum())
        gpu = float(t[bd.BD_GPU_US].sum())
        elements = float(t[bd.BD_ELEMENTS].max())
        flops = float(t[bd.BD_GEMM_FLOPS].sum())
        peak = device.peak_flops("fp32") or 0.0
        roof = flops / peak * 1e6 if peak else 0.0
        saving = max(gpu - roof, 0.0)
        total += saving
        rows.append({"rank": r.rank, "shapes": str(t[bd.BD_SHAPES].iat[0]), "calls_per_step": calls / n,
                     "difference_elements": elements, "kernel_us_per_step": gpu / n,
                     "gemm_us_per_step": roof / n, "saving_us": saving})
    if not rows:
        return None
    x = rows[0]
    saving = total / scope.ranks
    title = (f"Compute the distances as a GEMM (torch.cdist, or ‖a‖² − 2·a·bᵀ + ‖b‖²): "
             f"{plural(round(float(str(x['calls_per_step']))), 'broadcast difference')} per step "
             f"({x['shapes']}: {fmt_bytes(4 * float(str(x['difference_elements'])))} "
             "each, squared and reduced) instead of one matrix product")
    formula = (f"the chains' kernels {fmt_us(float(str(x['kernel_us_per_step'])))} per step − one float32 GEMM of 2·N·M·D "
               f"FLOPs per call at the device's peak ({fmt_us(float(str(x['gemm_us_per_step'])))} per step)")
    return suggestion("distance_gemm", title, saving, scope, formula, rows, min_pct=SILENT_BELOW_PCT)


def distance_gemm_transform(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """The chains' kernels (patterns.in_broadcast_distance) shorter by the rule's saving per step (one
    factor: their time per step falls to the GEMM's); the host side as it is."""
    p = r.patterns
    mask = p.in_broadcast_distance if p is not None else None
    if mask is None or len(mask) != len(r.classification.table) or not mask.any():
        return None
    return scale_nodes(mask, per_step)
