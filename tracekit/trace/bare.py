"""The unprofiled step times `tracekit profile` stores in a trace ("tracekit"."bare"), parsed and checked."""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

BARE_KEY = "bare"  # key of the object inside the trace's top-level "tracekit" object
CLOCKS = ("gpu", "wall")  # CUDA events at the step boundaries, or time.perf_counter_ns()
SOURCE_PROFILE = "tracekit profile"
MAX_STEPS = 100_000  # more entries than this: the whole object is dropped
MAX_STEP_US = 1e9  # a step longer than about 17 minutes is not a reading
MAX_STEP_NUMBER = (1 << 31) - 1
_STEP_KEY = re.compile(r"[0-9]{1,10}")
_FIELD = f"tracekit.{BARE_KEY}"
_SHOWN = 3  # bad step entries named in the warning, the rest counted


@dataclass(frozen=True)
class BareSteps:
    """Per-step times of the same program run without the profiler: step k here is ProfilerStep#k.

    clock: 'gpu' (CUDA events at the step boundaries) or 'wall'; step_us: (step number, µs) pairs,
    sorted by step number; source: who measured them ("tracekit profile"); steps_marked and
    step_source: what that unprofiled run marked (None when the file did not say), to compare with
    the profiled run's own."""

    clock: str
    step_us: tuple[tuple[int, float], ...]
    source: str = SOURCE_PROFILE
    steps_marked: int | None = None
    step_source: str | None = None

    def median_us(self, steps: Iterable[int]) -> float | None:
        """The median time of those of `steps` that were timed (None when none of them was)."""
        wanted = set(steps)
        values = [us for step, us in self.step_us if step in wanted]
        return float(statistics.median(values)) if values else None

    def get(self, step: int) -> float | None:
        """The time of step `step`, if it was timed."""
        return dict(self.step_us).get(step)


def parse_bare(value: object, ignored: list[str]) -> BareSteps | None:
    """BareSteps from the raw `tracekit.bare` value of a trace (None when absent or unusable).

    Everything is untrusted: a value of the wrong type, a clock other than CLOCKS, a step_us that is
    not an object or holds more than MAX_STEPS entries drops the whole object; single entries with a
    step key that is not a non-negative integer, or a time that is not a finite number in
    [0, MAX_STEP_US], are dropped one by one. Each drop adds a line naming the field to `ignored`."""
    if value is None:
        return None
    if not isinstance(value, dict):
        ignored.append(f"{_FIELD} (a {_kind(value)}, not an object)")
        return None
    clock = value.get("clock")
    if clock not in CLOCKS:
        ignored.append(f"{_FIELD}.clock ({_shown(clock)}, not 'gpu' or 'wall')")
        return None
    raw = value.get("step_us")
    if not isinstance(raw, dict):
        ignored.append(f"{_FIELD}.step_us (a {_kind(raw)}, not an object)")
        return None
    if len(raw) > MAX_STEPS:
        ignored.append(f"{_FIELD}.step_us ({len(raw)} entries, more than {MAX_STEPS})")
        return None
    steps: dict[int, float] = {}
    bad: list[str] = []
    for key, us in raw.items():
        problem = _entry_problem(key, us)
        if problem is None:
            steps[int(key)] = float(us)
        else:
            bad.append(f"{_shown(key)}: {problem}")
    if bad:
        more = f" and {len(bad) - _SHOWN} more" if len(bad) > _SHOWN else ""
        ignored.append(f"{_FIELD}.step_us entries ({'; '.join(bad[:_SHOWN])}{more})")
    if not steps:
        if not raw:
            ignored.append(f"{_FIELD}.step_us (empty)")
        return None  # (entries all dropped: said above)
    return BareSteps(clock=str(clock), step_us=tuple(sorted(steps.items())), source=SOURCE_PROFILE,
                     steps_marked=_count(value, "steps_marked", ignored),
                     step_source=_text(value, "step_source", ignored))


def _entry_problem(key: object, us: object) -> str | None:
    if not isinstance(key, str) or not _STEP_KEY.fullmatch(key) or int(key) > MAX_STEP_NUMBER:
        return "not a step number"
    if isinstance(us, bool) or not isinstance(us, (int, float)):
        return f"a {_kind(us)}, not a number"
    if not math.isfinite(us):
        return "not finite"
    if us < 0:
        return "negative"
    if us > MAX_STEP_US:
        return f"over {MAX_STEP_US:.0e} µs"
    return None


def _count(value: dict[str, Any], key: str, ignored: list[str]) -> int | None:
    v = value.get(key)
    if v is None:
        return None
    if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_STEP_NUMBER:
        return v
    ignored.append(f"{_FIELD}.{key} ({_shown(v)}, not a step count)")
    return None


def _text(value: dict[str, Any], key: str, ignored: list[str]) -> str | None:
    v = value.get(key)
    if v is None:
        return None
    if isinstance(v, str) and len(v) <= 100:
        return v
    ignored.append(f"{_FIELD}.{key} (not a short string)")
    return None


def _kind(value: object) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), type(value).__name__)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
