"""The `tracekit analyze --json` document (schema tracekit.analysis/1): an Analysis and its suggestions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tracekit.analyzers.analysis import Analysis
from tracekit.suggestions.model import Suggestion

# The document's keys come in Analysis.to_dict()'s order with "suggestions" right after this one.
SUGGESTIONS_AFTER = "warnings"


def analysis_document(analysis: Analysis, suggestions: Sequence[Suggestion] | None) -> dict[str, Any]:
    """`analysis.to_dict()` with the suggestions' JSON (None: the rules did not run -> null)."""
    found = None if suggestions is None else [s.to_dict() for s in suggestions]
    doc: dict[str, Any] = {}
    for key, value in analysis.to_dict().items():
        doc[key] = value
        if key == SUGGESTIONS_AFTER:
            doc["suggestions"] = found
    doc.setdefault("suggestions", found)
    return doc
