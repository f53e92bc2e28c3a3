"""Which steps the headline numbers cover (--steps): the steady ones, all of them, or a range of numbers."""

from __future__ import annotations

import re
from dataclasses import dataclass

BY_PHASE = "steady"  # the steady steps (tracekit.analyzers.steady: set-up, warm-up, partial, outliers left out)
EVERY = "all"  # every step
RANGE = "range"  # the steps numbered first..last (inclusive)
_STEPS_TEXT = re.compile(r"(\d{1,9})(?:-(\d{1,9}))?")


class StepsError(ValueError):
    """A --steps value that is malformed or selects no step."""


@dataclass(frozen=True)
class StepSelection:
    """A parsed --steps value. `str(selection)` (= `mode`) is its text in the JSON `steps_mode`:
    'steady', 'all' or 'N-M' (a single step N is 'N-N')."""

    kind: str  # BY_PHASE, EVERY or RANGE
    span: tuple[int, int] | None = None  # inclusive step numbers, for RANGE only

    def __post_init__(self) -> None:
        if self.kind not in (BY_PHASE, EVERY, RANGE) or (self.kind == RANGE) != (self.span is not None):
            raise ValueError(f"not a step selection: {self.kind!r} {self.span!r}")

    @classmethod
    def parse(cls, text: str) -> StepSelection:
        """'steady' | 'all' | 'N-M' | 'N' (case and surrounding blanks ignored); StepsError if bad."""
        cleaned = text.strip().lower()
        if cleaned in (BY_PHASE, EVERY):
            return cls(cleaned)
        match = _STEPS_TEXT.fullmatch(cleaned)
        if not match:
            raise StepsError(f"--steps takes steady, all, N or N-M, not {text!r}")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) else first
        if last < first:
            raise StepsError(f"--steps {text}: the range ends before it starts")
        return cls(RANGE, (first, last))

    @classmethod
    def of(cls, value: StepSelection | str) -> StepSelection:
        """`value` itself, or the selection its text names (the Python API takes either)."""
        return value if isinstance(value, StepSelection) else cls.parse(value)

    @property
    def mode(self) -> str:
        if self.span is None:
            return self.kind
        return f"{self.span[0]}-{self.span[1]}"

    def __str__(self) -> str:
        return self.mode


STEADY_STEPS = StepSelection(BY_PHASE)  # the default everywhere: the steady steps
ALL_STEPS = StepSelection(EVERY)
