"""Run the analyzers per rank and the suggestion rules over a loaded trace: the inputs of one report."""

from __future__ import annotations

import importlib
from typing import Any


def suggest(analysis: Any) -> list[Any] | None:
    """The suggestions for one analysis, or None while this install has no suggestions engine."""
    try:
        module = importlib.import_module("tracekit.suggestions")
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("tracekit.suggestions"):
            return None
        raise
    rules = getattr(module, "suggest", None)
    return None if rules is None else list(rules(analysis))


def analyse_trace(trace: Any, *, rank: int | None = None) -> tuple[dict[int, Any], dict[int, list[Any] | None]]:
    """({rank: Analysis}, {rank: suggestions}) for every rank of `trace`, or only `rank`."""
    from tracekit.analyzers import analyze

    ranks = [trace.rank(rank).rank] if rank is not None else sorted(trace.ranks)
    analyses = {r: analyze(trace, rank=r) for r in ranks}
    return analyses, {r: suggest(a) for r, a in analyses.items()}
