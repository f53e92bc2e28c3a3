"""What-if transform of channels_last: cuDNN's layout transposes gone, NCHW BatchNorm at NHWC rates, and the per-channel sums slower by their measured NHWC factor."""

from __future__ import annotations

import numpy as np

from tracekit.analyzers.analysis import RankAnalysis
from tracekit.analyzers.kernels import CLASS, NORMALIZATION, REDUCTION
from tracekit.model.outlook import Transform
from tracekit.model.whatif import compose, scale_nodes, scale_rows
from tracekit.suggestions.layout_sums import nhwc_sum_factor
from tracekit.suggestions.model import Suggestion
from tracekit.suggestions.whatif_evidence import class_rows, evidence_number, rank_evidence

TRANSPOSE_GONE = "layout transpose removed"  # rules_precision.channels_last's evidence


def sum_factors(r: RankAnalysis) -> np.ndarray:
    """Per rank.gpu row: the NHWC / NCHW time factor of a per-channel sum (layout_sums.py), 1 elsewhere."""
    costs, classes = r.costs.table, r.classification.table[CLASS].to_numpy(dtype=object)
    out = np.ones(len(classes))
    if len(costs) != len(classes):
        return out
    ops, shapes, dtypes = (costs[c].to_numpy(dtype=object) for c in ("op", "shapes", "dtype"))
    for i in np.flatnonzero(classes == REDUCTION).tolist():
        f = nhwc_sum_factor(ops[i], shapes[i], dtypes[i])
        if f is not None and f > 1.0:
            out[i] = f
    return out


def channels_last_transform(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """The layout transposes gone and the BatchNorm kernels faster, each by its part of the rule's
    saving per step (the evidence splits them), and each per-channel sum × its measured NHWC factor."""
    p = r.patterns
    if p is None or len(p.layout_transposes) != len(r.classification.table):
        return None
    rows = rank_evidence(s, r)
    transposes = sum(evidence_number(e, "saving_us") for e in rows if e.get("change") == TRANSPOSE_GONE)
    norms = sum(evidence_number(e, "saving_us") for e in rows
                if e.get("change") != TRANSPOSE_GONE and evidence_number(e, "saving_us") > 0)
    net = sum(evidence_number(e, "saving_us") for e in rows)
    if net <= 0:
        return None
    scale = per_step / net  # the evidence's totals → per step of this rank
    parts = [scale_nodes(p.layout_transposes, transposes * scale)]
    if norms > 0:
        parts.append(scale_nodes(class_rows(r, (NORMALIZATION,)), norms * scale))
    factors = sum_factors(r)
    if (factors > 1.0).any():
        parts.append(scale_rows(factors))
    return compose(parts) if len(parts) > 1 else parts[0]
