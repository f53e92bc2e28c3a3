"""Run the analyzers per rank and the suggestion rules over a loaded trace: the inputs of one report."""

from __future__ import annotations

from tracekit.analyzers import Analysis, analyze
from tracekit.suggestions import Suggestion, suggest
from tracekit.trace.model import Trace


def analyse_trace(trace: Trace, *, rank: int | None = None, steps: str = "steady"
                  ) -> tuple[dict[int, Analysis], dict[int, list[Suggestion]]]:
    """({rank: Analysis}, {rank: suggestions}) for every rank of `trace`, or only `rank`; `steps`
    picks the headline steps (see tracekit.analyzers.analyze)."""
    ranks = [trace.rank(rank).rank] if rank is not None else sorted(trace.ranks)
    analyses = {r: analyze(trace, rank=r, steps=steps) for r in ranks}
    return analyses, {r: suggest(a) for r, a in analyses.items()}
