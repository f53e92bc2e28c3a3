"""What-if transform of convert_weights_once: the weight conversions' calls and kernels gone, the GEMMs that read the weights at least at their roof."""

from __future__ import annotations

import numpy as np

from tracekit.analyzers.analysis import RankAnalysis
from tracekit.model.outlook import Transform
from tracekit.model.whatif import compose, remove_calls, scale_rows
from tracekit.suggestions.model import Suggestion
from tracekit.suggestions.rules_batching import batched_roof
from tracekit.suggestions.whatif_evidence import evidence_number, rank_evidence


def convert_once_transform(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """The conversion chains' calls (patterns.weight_convert_calls) cost nothing with the host gaps
    before them (the ops' dispatch), their kernels take no time (model/whatif.py remove_calls); each
    GEMM reading a converted weight (patterns.weight_consumers) keeps its time, at least its roof for
    the FLOPs and bytes of its op (rules_batching.batched_roof at k = 1): the bytes of the weight as the
    GEMM reads it, bf16 for an int8 weight dequantised once, which a GEMV that read a copy still warm
    in L2 may not have paid. Float8 weights run in FP8 GEMMs (the rule's gemm_factor < 1): each GEMM
    reading a converted weight × that factor instead, no floor."""
    p = r.patterns
    if p is None or not len(p.weight_convert_calls) or not p.weight_convert_calls.any():
        return None
    # each group's GEMM time × its factor, as one factor on the consumers: weighted by their time
    weighted = [(f, evidence_number(e, "gemm_us_per_step")) for e in rank_evidence(s, r)
                if (f := evidence_number(e, "gemm_factor")) > 0]
    total = sum(w for _, w in weighted if w > 0)
    factor = sum(f * w for f, w in weighted if w > 0) / total if total > 0 else \
        min((f for f, _ in weighted), default=1.0)
    if factor < 1.0 and len(p.weight_consumers) == len(r.classification.table):
        return compose([remove_calls(p.weight_convert_calls), scale_rows(np.where(p.weight_consumers, factor, 1.0))])
    device = r.roofline.device
    floor = batched_roof(r, device, 1.0, p.weight_consumers) if device is not None \
        and len(p.weight_consumers) == len(r.classification.table) else None
    return remove_calls(p.weight_convert_calls, floor)
