"""A suggestion of BEFORE checked against AFTER: was its change made, and did the step change as it predicted."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tracekit.analyzers import step_parts
from tracekit.analyzers.analysis import Analysis
from tracekit.analyzers.step_parts import Selection, StepPart
from tracekit.compare.applied import applied
from tracekit.suggestions.model import Suggestion
from tracekit.suggestions.rules import RULES_BY_ID

CAME_TRUE_TOLERANCE = 0.35  # realised within ±35 % of the predicted saving
UNTOUCHED = 0.10  # a step that moved by less than 10 % of the prediction: the change did not act on it
NOISE = 0.005  # a step change under 0.5 % of BEFORE's step has no direction
UNCONFIRMED = "unconfirmed"  # the outcome of a suggestion whose change AFTER does not show


@dataclass(frozen=True)
class Change:
    """One per-step metric, before → after."""

    name: str
    before: float | None
    after: float | None

    @property
    def delta(self) -> float | None:
        return None if self.before is None or self.after is None else self.after - self.before

    @property
    def pct(self) -> float | None:
        """Change in % of before (+: grew)."""
        d = self.delta
        return None if d is None or not self.before else 100.0 * d / self.before

    @property
    def ratio(self) -> float | None:
        """before / after: ×2 means halved (for times: a 2× speedup)."""
        return None if not self.after or self.before is None else self.before / self.after

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "before": self.before, "after": self.after, "delta": self.delta,
                "pct": self.pct, "ratio": self.ratio}


def direction(change: Change) -> str | None:
    """'faster', 'slower' or 'unchanged' (within NOISE of before) for a time; None when unknown."""
    d = change.delta
    if d is None:
        return None
    if abs(d) <= NOISE * abs(change.before or 0.0):
        return "unchanged"
    return "faster" if d < 0 else "slower"


@dataclass(frozen=True)
class SuggestionCheck:
    """A suggestion of BEFORE checked against AFTER.

    `applied` (compare/applied.py): whether AFTER shows its change was made (None: no check for this
    id, or the traces cannot tell), `applied_evidence` the numbers that say so. The prediction is a
    whole-step saving (the what-if replay on the projected unprofiled steps where the model projects);
    when the change was made, `realised_us_per_step` is the change of the diff's headline step
    (before − after, positive: saved; `realised_basis` says which step: TraceDiff.headline_kind).
    The part of the step the rule targets (`before_part_us` / `after_part_us`) is supporting evidence."""

    id: str
    title: str
    target: str  # the part it targets, in words
    predicted_us_per_step: float | None
    before_part_us: float | None  # that part per step in BEFORE / AFTER (as traced)
    after_part_us: float | None
    applied: bool | None = None
    applied_evidence: str = ""
    realised_us_per_step: float | None = None  # None unless applied
    realised_basis: str | None = None

    @property
    def part_saving_us(self) -> float | None:
        """before − after of the targeted part (positive: it shrank)."""
        if self.before_part_us is None or self.after_part_us is None:
            return None
        return self.before_part_us - self.after_part_us

    @property
    def came_true(self) -> bool | None:
        """Realised within ±CAME_TRUE_TOLERANCE of the prediction (None: not applied, or nothing to compare)."""
        p, r = self.predicted_us_per_step, self.realised_us_per_step
        if self.applied is not True or p is None or r is None or p <= 0:
            return None
        return abs(r - p) <= CAME_TRUE_TOLERANCE * p

    @property
    def outcome(self) -> str | None:
        """UNCONFIRMED when AFTER does not show the change (neither credited nor blamed); else 'came
        true'; 'untouched' (the step moved by under UNTOUCHED of the prediction); 'fell short',
        'exceeded' or 'worse' (the step grew); None: nothing to compare."""
        if self.applied is not True:
            return UNCONFIRMED
        p, r = self.predicted_us_per_step, self.realised_us_per_step
        if p is None or r is None or p <= 0:
            return None
        if self.came_true:
            return "came true"
        if abs(r) <= UNTOUCHED * p:
            return "untouched"
        return "worse" if r < 0 else ("fell short" if r < p else "exceeded")

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "target": self.target, "outcome": self.outcome,
                "applied": self.applied, "applied_evidence": self.applied_evidence,
                "predicted_us_per_step": self.predicted_us_per_step,
                "realised_us_per_step": self.realised_us_per_step, "realised_basis": self.realised_basis,
                "before_part_us_per_step": self.before_part_us, "after_part_us_per_step": self.after_part_us,
                "part_saving_us_per_step": self.part_saving_us, "came_true": self.came_true}


def target(suggestion_id: str) -> StepPart:
    """The part of the step a suggestion acts on: its rule row's target; the whole step for an id
    with no row (a cross-rank suggestion)."""
    rule = RULES_BY_ID.get(suggestion_id)
    return step_parts.WHOLE_STEP if rule is None else rule.target


def check(suggestion: Suggestion, before: Analysis, after: Analysis, sb: Selection, sa: Selection,
          head: Change, basis: str) -> SuggestionCheck:
    """`suggestion` (of BEFORE) checked against AFTER: was its change made, and if so the change of
    the headline step `head` (`basis`: which step it is) as its realised saving."""
    part = target(suggestion.id)
    predicted = suggestion.per_step_us
    made = applied(suggestion.id, before, after)
    known = made.applied is True and head.before is not None and head.after is not None
    realised = (head.before or 0.0) - (head.after or 0.0) if known else None
    return SuggestionCheck(
        id=suggestion.id, title=suggestion.title, target=part.label,
        predicted_us_per_step=None if predicted is None else float(predicted),
        before_part_us=part.measure(before, sb), after_part_us=part.measure(after, sa),
        applied=made.applied, applied_evidence=made.evidence, realised_us_per_step=realised,
        realised_basis=None if realised is None else basis,
    )


SETUP_VERSIONS = (("torch", "PyTorch"), ("cuda_runtime_version", "CUDA runtime"), ("hip_runtime_version", "HIP runtime"))


def setup_warnings(before: Analysis, after: Analysis) -> list[str]:
    """A line when the two traces ran on different GPUs or PyTorch / CUDA versions (as far as each
    trace says): their differences are then not only the code's."""
    def first(a: Analysis) -> tuple[str | None, dict[str, str]]:
        facts = next((r.facts for r in a.ranks if r.facts is not None and r.facts.has_gpu), None)
        facts = facts or next((r.facts for r in a.ranks if r.facts is not None), None)
        return (facts.device_name, dict(facts.versions)) if facts is not None else (None, {})

    (gpu_b, ver_b), (gpu_a, ver_a) = first(before), first(after)
    out = []
    if gpu_b and gpu_a and gpu_b != gpu_a:
        out.append(f"the traces ran on different GPUs ({gpu_b} -> {gpu_a}): the change is not only the code's")
    for key, label in SETUP_VERSIONS:
        if ver_b.get(key) and ver_a.get(key) and ver_b[key] != ver_a[key]:
            out.append(f"the traces come from different {label} versions ({ver_b[key]} -> {ver_a[key]})")
    return out
