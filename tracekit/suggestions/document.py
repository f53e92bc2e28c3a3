"""The `tracekit analyze --json` document (schema tracekit.analysis/1), written in one place from typed results."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from tracekit.analyzers.summary import AnalysisSummary, summarize_analysis
from tracekit.jsonsafe import plain
from tracekit.suggestions.model import Suggestion

if TYPE_CHECKING:
    from tracekit.analyzers.analysis import Analysis
    from tracekit.analyzers.ranks import CrossRank

# The document's keys come in AnalysisSummary.to_dict()'s order with "suggestions" right after this one.
SUGGESTIONS_AFTER = "warnings"
# A document of several ranks has listed its per-rank lists first since tracekit.analysis/1 began;
# kept so that documents written before and after compare equal byte for byte.
MULTI_RANK_FIRST = ("steady_steps", "excluded_steps", "graphs")


class RankedSuggestion(NamedTuple):
    """A suggestion and the rank whose analysis it came from (None: a cross-rank rule)."""

    rank: int | None
    suggestion: Suggestion


def ranked(rank: int | None, suggestions: Sequence[Suggestion]) -> tuple[RankedSuggestion, ...]:
    return tuple(RankedSuggestion(rank, s) for s in suggestions)


def by_saving(suggestions: Sequence[RankedSuggestion]) -> tuple[RankedSuggestion, ...]:
    """Largest estimated saving first; ties keep their order."""
    return tuple(sorted(suggestions, key=lambda r: -(plain(r.suggestion.saving_us) or 0.0)))


def document(summary: AnalysisSummary, suggestions: Sequence[RankedSuggestion] | None, *,
             cross: CrossRank | None = None, path: str | None = None,
             warnings: Sequence[str] = ()) -> dict[str, Any]:
    """The whole document: the summary's keys, its suggestions (None: the rules did not run -> null;
    each with its `rank` when the summary has several ranks), then the cross-rank view's keys.
    `path` names the input as the user gave it; `warnings` (the run's) come before the ranks' own."""
    body = summary.to_dict()
    if path is not None:
        body["trace"] = path
    body["warnings"] = list(dict.fromkeys([*warnings, *body["warnings"]]))
    multi = len(summary.ranks) > 1
    found = None if suggestions is None else [
        {**r.suggestion.to_dict(), "rank": r.rank} if multi and r.rank is not None else r.suggestion.to_dict()
        for r in suggestions]
    doc: dict[str, Any] = {k: body[k] for k in MULTI_RANK_FIRST} if multi else {}
    for key, value in body.items():
        doc.setdefault(key, value)
        if key == SUGGESTIONS_AFTER:
            doc["suggestions"] = found
    doc.setdefault("suggestions", found)
    if cross is not None:
        doc.update(cross.to_dict())
    return doc


def analysis_document(analysis: Analysis, suggestions: Sequence[Suggestion] | None) -> dict[str, Any]:
    """The document of an Analysis held in memory and its suggestions (None: the rules did not run)."""
    rank = analysis.ranks[0].rank if len(analysis.ranks) == 1 else None
    return document(summarize_analysis(analysis), None if suggestions is None else ranked(rank, suggestions))
