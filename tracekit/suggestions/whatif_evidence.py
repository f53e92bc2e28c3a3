"""What the what-if transforms (whatif.py, whatif_loops.py) read from a rank and a suggestion: kernels by class (and the operand casts torch.compile leaves alone), the suggestion's evidence rows for the rank and their numbers, the calls of per-tensor loops."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from tracekit.analyzers.analysis import RankAnalysis
from tracekit.analyzers.kernels import CLASS, COPY
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


def operand_casts(r: RankAnalysis, keep: np.ndarray) -> np.ndarray:
    """Cast (class copy) rows of `keep` not between two kept non-cast kernels in the trace's kernel
    order (rank.gpu rows, as CUPTI wrote them): autocast's casts of a GEMM's weights and inputs, which
    stay their own kernels under torch.compile (a weight has no producer kernel to fuse into), unlike
    a cast inside a pointwise chain."""
    cast = keep & class_rows(r, (COPY,))
    if not cast.any():
        return cast
    fused = keep & ~cast
    before = np.concatenate(([False], fused[:-1]))
    after = np.concatenate((fused[1:], [False]))
    return cast & ~(before & after)
