"""What the what-if transforms (whatif.py, whatif_loops.py) read from a rank and a suggestion: kernels by class, the suggestion's evidence rows for the rank and their numbers, the calls of per-tensor loops."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from tracekit.analyzers.analysis import RankAnalysis
from tracekit.analyzers.kernels import CLASS
from tracekit.model.outlook import Transform
from tracekit.suggestions.model import Suggestion

BARE_LAUNCH_US = 3.0  # an unprofiled launch call (docs/design.md, "Launch cost under the profiler")

# A rule's change on one rank: (the suggestion, the rank, its traced saving per step in µs) -> the
# model's transform, None where the change does not apply to the rank.
TransformFor = Callable[[Suggestion, RankAnalysis, float], Transform | None]


def class_rows(r: RankAnalysis, classes: tuple[str, ...]) -> np.ndarray:
    """Per kernel row of the rank (its classification table): its class is one of `classes`."""
    return np.isin(r.classification.table[CLASS].to_numpy(dtype=object), classes)


def rank_evidence(s: Suggestion, r: RankAnalysis) -> list[dict[str, object]]:
    """Copies of the suggestion's evidence rows about rank `r` (a row without a rank is every rank's)."""
    return [dict(e) for e in s.evidence if e.get("rank", r.rank) == r.rank]


def evidence_number(e: dict[str, object], key: str) -> float:
    """The evidence row's number under `key`; 0.0 when it is absent, not a number or NaN."""
    v = e.get(key)
    return float(v) if isinstance(v, (int, float)) and not math.isnan(float(v)) else 0.0


def loop_calls(r: RankAnalysis) -> np.ndarray | None:
    """Per rank.runtime row: issued by a per-tensor loop (foreach_loops' change removes its syncs);
    None when the rank has no such loop."""
    calls = r.patterns.foreach_calls if r.patterns is not None else None
    return calls >= 0 if calls is not None and len(calls) and (calls >= 0).any() else None
