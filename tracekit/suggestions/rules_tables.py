"""Rule about embedding tables trained with dense gradients (`nn.Embedding(..., sparse=True)` with an optimizer that takes sparse gradients), and its what-if transform."""

from __future__ import annotations

from tracekit.analyzers.analysis import Analysis, RankAnalysis
from tracekit.analyzers.detectors import table_grads as tg
from tracekit.model.whatif import Transform, scale_rows
from tracekit.suggestions.common import (
    SILENT_BELOW_PCT,
    Scope,
    every_step_tables,
    fmt_us,
    suggestion,
)
from tracekit.suggestions.model import Suggestion
from tracekit.suggestions.whatif_evidence import evidence_number, rank_evidence
from tracekit.units import plural


def sparse_grads(analysis: Analysis) -> Suggestion | None:
    """Whole-table sweeps of embedding tables with dense gradients (patterns.table_grads), in every
    headline step: with sparse gradients each sweep touches only the looked-up rows, so the sweeps keep
    lookups / rows of their time (an upper bound on the rows a step touches: repeated ids count once
    in a sparse update). Silent below SILENT_BELOW_PCT."""
    scope = Scope.of(analysis)
    rows: list[dict[str, object]] = []
    total = 0.0
    first: tuple[str, float, float, float, float] | None = None  # shape, kernels, time, lookups per step, touched
    for r, t, n in every_step_tables(analysis, "table_grads", tg.TG_STEP):
        spent = float(t[tg.TG_US].sum())
        touched = min(float(t[tg.TG_LOOKUPS].sum()) / float(t[tg.TG_ROWS].sum()), 1.0)
        saving = spent * (1.0 - touched)
        total += saving
        row = {"rank": r.rank, "table_shapes": int(t[tg.TG_TABLES].iat[0]), "largest_table": str(t[tg.TG_SHAPE].iat[0]),
               "lookups_per_step": float(t[tg.TG_LOOKUPS].sum()) / n, "touched_share": touched,
               "sweep_kernels_per_step": float(t[tg.TG_KERNELS].sum()) / n, "sweep_us_per_step": spent / n,
               "saving_us_per_step": saving / n}
        rows.append(row)
        first = first or (str(t[tg.TG_SHAPE].iat[0]), float(t[tg.TG_KERNELS].sum()) / n, spent / n,
                          float(t[tg.TG_LOOKUPS].sum()) / n, touched)
    if first is None:
        return None
    saving = total / scope.ranks
    shape, kernels, spent_per_step, lookups, touched = first
    title = (f"Train the embedding tables with sparse gradients (nn.Embedding(..., sparse=True)): each step "
             f"zero-fills, accumulates and updates every row of a {shape} table "
             f"({plural(round(kernels), 'kernel')}, {fmt_us(spent_per_step)} per step) for "
             f"{lookups:,.0f} looked-up rows ({touched:.1%} of it)")
    formula = (f"the kernels that read a whole table (the gradient's zero fill, its accumulation, the "
               f"optimizer's update) keep the looked-up rows' share of their time: Σ their time × (1 − "
               f"{touched:.3f}) = {fmt_us(saving)} ({fmt_us(saving / scope.steps)} per step); the sparse "
               "gradient's own coalescing and index_add_ are not counted")
    return suggestion("sparse_grads", title, saving, scope, formula, rows, min_pct=SILENT_BELOW_PCT)


def sparse_grads_transform(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """The table sweeps' kernels at the looked-up share of their table part (this rank's evidence)."""
    p = r.patterns
    share = p.table_sweep if p is not None else None
    rows = rank_evidence(s, r)
    if share is None or not rows or len(share) != len(r.classification.table) or not (share > 0).any():
        return None
    touched = evidence_number(rows[0], "touched_share")
    return scale_rows(1.0 - share * (1.0 - min(max(touched, 0.0), 1.0)))
