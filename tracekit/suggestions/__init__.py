"""Suggestions: rules over analyzer results, each with evidence and an estimated saving."""

from __future__ import annotations

from tracekit.suggestions.document import analysis_document
from tracekit.suggestions.model import Suggestion
from tracekit.suggestions.rules import CROSS_RANK_RULES, RULES, CrossRankRule, Rule, suggest

__all__ = ["CROSS_RANK_RULES", "RULES", "CrossRankRule", "Rule", "Suggestion", "analysis_document", "suggest"]
