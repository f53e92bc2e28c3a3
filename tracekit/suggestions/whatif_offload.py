"""What-if transform of optimizer_on_gpu: the host optimizer step and its gradient and weight copies gone, a fused AdamW on the GPU instead."""

from __future__ import annotations

from tracekit.analyzers.analysis import RankAnalysis
from tracekit.analyzers.detectors import offload as of
from tracekit.model.outlook import Transform
from tracekit.model.whatif import Breaks
from tracekit.model.whatif_offload import optimizer_to_gpu
from tracekit.suggestions.model import Suggestion
from tracekit.suggestions.whatif_evidence import BARE_LAUNCH_US, evidence_number, rank_evidence


def offload_transform(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """The rank's host optimizer steps (patterns.offload: their ranges on their thread) removed, their
    copies (patterns.offload_copies) and the copy ops' calls (patterns.offload_calls) gone, and one
    fused AdamW launched (3 µs) that runs the rule's fused time (the rank's mean over its steps)."""
    p = r.patterns
    rows = rank_evidence(s, r)
    if p is None or not rows or not len(p.offload) or len(p.offload_copies) != len(r.classification.table):
        return None
    fused = sum(evidence_number(e, "fused_us") for e in rows) / len(rows)
    steps = Breaks(p.offload_thread, p.offload[of.OF_TS].to_numpy(dtype=float), p.offload[of.OF_END].to_numpy(dtype=float))
    return optimizer_to_gpu(steps, p.offload_copies, p.offload_calls, fused, BARE_LAUNCH_US)
