"""What-if transform of causal_mask: the masked attention kernels shorter, and the mask built every step gone (its host stretch, its copy or kernels)."""

from __future__ import annotations

import numpy as np

from tracekit.analyzers.analysis import RankAnalysis
from tracekit.analyzers.detectors import mask_build as mb
from tracekit.analyzers.kernels import ATTENTION
from tracekit.model.outlook import Transform
from tracekit.model.whatif import Breaks, compose, merge_breaks, scale_nodes
from tracekit.suggestions.common import in_headline
from tracekit.suggestions.model import Suggestion
from tracekit.suggestions.rules_attention import KIND_BUILD
from tracekit.suggestions.whatif_evidence import class_rows, evidence_number, rank_evidence


def causal_mask_transform(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """The attention kernels faster by the masked calls' share of the saving; each mask build of the
    headline steps removed as a graph break's stretch is (model/whatif.py merge_breaks: the host ops
    between its first op's start and its last op's end cost nothing, its copy and sync calls wait for
    nothing) and the copies and kernels its ops launched (patterns.in_mask_build) take no time."""
    rows = rank_evidence(s, r)
    build = sum(evidence_number(e, "saving_us_per_step") for e in rows if e.get("kind") == KIND_BUILD)
    build_gpu = sum(evidence_number(e, "kernel_us_per_step") for e in rows if e.get("kind") == KIND_BUILD)
    kernels = scale_nodes(class_rows(r, (ATTENTION,)), max(per_step - build, 0.0))
    p = r.patterns
    t = p.mask_builds if p is not None else None
    if p is None or t is None or not len(t) or build <= 0 or len(p.in_mask_build) != len(r.classification.table):
        return kernels
    t = t[in_headline(r, t[mb.MB_STEP].to_numpy())]
    stretches = Breaks(p.mask_build_thread, t[mb.MB_START].to_numpy(dtype=float), t[mb.MB_END].to_numpy(dtype=float))
    parts = [kernels, merge_breaks(stretches)]
    if build_gpu > 0 and np.any(p.in_mask_build):
        parts.append(scale_nodes(p.in_mask_build, build_gpu))
    return compose(parts)
