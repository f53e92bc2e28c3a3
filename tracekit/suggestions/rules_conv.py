"""Rules about convolutions written by hand: im2col through `F.unfold` + matmul where `F.conv2d` reads the input and the weight directly."""

from __future__ import annotations

from tracekit.analyzers.analysis import Analysis, RankAnalysis
from tracekit.analyzers.detectors import unfold_conv as uc
from tracekit.model.whatif import Transform, compose, scale_host, scale_rows
from tracekit.suggestions.common import (
    SILENT_BELOW_PCT,
    Scope,
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
