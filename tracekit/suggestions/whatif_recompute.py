"""What-if transform of drop_checkpointing: the forwards re-run in backward gone, their calls, dispatch and kernels."""

from __future__ import annotations

from tracekit.analyzers.analysis import RankAnalysis
from tracekit.model.outlook import Transform
from tracekit.model.whatif import remove_calls
from tracekit.suggestions.model import Suggestion


def drop_checkpointing_transform(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """The re-runs' runtime calls (patterns.recompute_calls) cost nothing with the host gaps before
    them (the ops' Python and dispatch), their kernels take no time (model/whatif.py remove_calls)."""
    p = r.patterns
    if p is None or not len(p.recompute_calls) or not p.recompute_calls.any():
        return None
    return remove_calls(p.recompute_calls)
