"""What-if transform of preprocess_off_thread: the main thread's host work gone from its gaps, and where that work post-processed results copied back from the GPU, those copies gone too."""

from __future__ import annotations

from tracekit.analyzers.analysis import RankAnalysis
from tracekit.model.outlook import Transform
from tracekit.model.whatif import compose, remove_calls, shorter_longest_gap
from tracekit.suggestions.model import Suggestion
from tracekit.suggestions.whatif_evidence import evidence_number, rank_evidence


def preprocess_transform(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """The main thread's longest gaps shorter by the rule's traced saving per step (dataloader_workers'
    change); with `copied_back` rows, by its gaps' share of it, the step's tail counts as a gap (the work on
    the results sits at the step's end) and the calls of the ops that copied results back
    (patterns.copy_back_calls: the copy and its waits) are removed as well (model/whatif.py remove_calls)."""
    rows = rank_evidence(s, r)
    p = r.patterns
    if not rows or not any(e.get("copied_back") for e in rows) or p is None or not p.copy_back_calls.any():
        return shorter_longest_gap(per_step)
    share = evidence_number(rows[0], "idle_share") or 1.0
    return compose([shorter_longest_gap(per_step * share, tail=True), remove_calls(p.copy_back_calls)])
