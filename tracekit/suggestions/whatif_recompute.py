"""What-if transform of drop_checkpointing: the forwards re-run in backward gone (their calls, dispatch and kernels) and the forward's checkpoint entries with them."""

from __future__ import annotations

import dataclasses

import numpy as np

from tracekit.analyzers.analysis import RankAnalysis
from tracekit.model.outlook import StepModel, Transform
from tracekit.model.replay import ReplayCosts
from tracekit.model.whatif import compose, remove_calls, step_costs
from tracekit.suggestions.model import Suggestion


def cut_entries(cut_us: np.ndarray, scale: float | None = None) -> Transform:
    """The host gap before each runtime call less `cut_us` of it (per rank.runtime row, traced µs):
    the projected gap shrinks by the same share of the traced one (the projection's own correction
    of that gap kept), never below 0. With `scale` (the unprofiled cost per traced µs), the projected
    gap loses `scale` × `cut_us` instead: host work the profiler does not slow, which the projection's
    own shrinking of the gap must not shrink again (inference_mode's graph nodes)."""

    def apply(step: StepModel) -> ReplayCosts:
        g = step.graph
        cut = cut_us[g.call_row] if len(cut_us) else np.zeros(g.n_calls)
        if not (cut > 0).any():
            return step.costs
        gap, _, _, _ = step_costs(step)
        if scale is not None:
            return dataclasses.replace(step.costs, call_gap_us=np.clip(gap - scale * cut, 0.0, None))
        traced = g.call_gap_us
        share = np.divide(cut, traced, out=np.zeros(len(cut)), where=traced > 0)
        return dataclasses.replace(step.costs, call_gap_us=gap * (1.0 - np.clip(share, 0.0, 1.0)))

    return apply


def drop_checkpointing_transform(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """The re-runs' runtime calls (patterns.recompute_calls) cost nothing with the host gaps before
    them (the ops' Python and dispatch), their kernels take no time (model/whatif.py remove_calls),
    and the host time of entering each checkpointed region in the forward goes
    (patterns.recompute_entry_us, detectors/checkpoint_entry.py)."""
    p = r.patterns
    if p is None or not len(p.recompute_calls) or not p.recompute_calls.any():
        return None
    return compose([remove_calls(p.recompute_calls), cut_entries(p.recompute_entry_us)])
