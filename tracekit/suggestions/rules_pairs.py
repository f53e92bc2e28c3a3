"""Rule about a Linear over the concatenation of every pair: split its weight, apply each half per item and add the two by broadcasting."""

from __future__ import annotations

import numpy as np

from tracekit.analyzers.analysis import Analysis, RankAnalysis
from tracekit.analyzers.detectors import pair_concat as pc
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


def split_pair_linear(analysis: Analysis) -> Suggestion | None:
    """Pair concatenations feeding a Linear (patterns.pair_concat), in every headline step: the kernel
    time of the work the split removes (the concatenation written, cast and read, the GEMMs over every
    pair's row, their backward) − what it adds (the broadcast add's M × H output written and its gradient
    read twice, at the device's memory bandwidth). Silent below SILENT_BELOW_PCT."""
    scope = Scope.of(analysis)
    device = analysis.device
    if device is None:
        return None
    rows: list[dict[str, object]] = []
    total = 0.0
    for r, t, n in every_step_tables(analysis, "pair_concat", pc.PC_STEP):
        gone = float(t[pc.PC_GONE_US].sum())
        added = float((t[pc.PC_ADDED_BYTES] * t[pc.PC_CALLS]).sum()) / device.memory_bandwidth * 1e6
        saving = max(gone - added, 0.0)
        total += saving
        rows.append({"rank": r.rank, "pairs": str(t[pc.PC_PAIRS].iat[0]), "features": int(t[pc.PC_FEATURES].iat[0]),
                     "out_features": int(t[pc.PC_OUT].iat[0]), "calls_per_step": float(t[pc.PC_CALLS].sum()) / n,
                     "removed_us_per_step": gone / n, "added_us_per_step": added / n, "saving_us": saving})
    if not rows:
        return None
    x = rows[0]
    title = (f"Split the Linear over concatenated pairs: it runs on every pair's row ({x['pairs']} × "
             f"{x['features']} → {x['out_features']}); apply its two halves per item and add them by broadcasting "
             f"(W·[h_i; h_j] = W₁h_i + W₂h_j), {fmt_us(float(str(x['removed_us_per_step'])))} of kernels per step gone")
    formula = ("per step, the kernels of the concatenation, its casts and copies, the GEMMs over every pair's row and "
               "their backward − the broadcast add's output written and its gradient read twice at the device's "
               "memory bandwidth (2-byte elements)")
    return suggestion("split_pair_linear", title, total / scope.ranks, scope, formula, rows, min_pct=SILENT_BELOW_PCT)


def split_pair_transform(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """The removed kernels (patterns.in_pair_concat) at the share of their time the split's added work
    takes (the rule's added / removed), the rest of the step as it is."""
    p = r.patterns
    rows = rank_evidence(s, r)
    if p is None or not rows or len(p.in_pair_concat) != len(r.classification.table) or not p.in_pair_concat.any():
        return None
    removed, added = evidence_number(rows[0], "removed_us_per_step"), evidence_number(rows[0], "added_us_per_step")
    share = min(added / removed, 1.0) if removed > 0 else 1.0
    return scale_rows(np.where(p.in_pair_concat, share, 1.0))
