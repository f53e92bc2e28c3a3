"""The analysis types and errors the commands and profile/ name, re-exported so they import the pipeline only."""

from __future__ import annotations

from tracekit.analyzers.analysis import Analysis
from tracekit.analyzers.step_selection import StepsError
from tracekit.model.projection import DEFAULT_OVERHEAD, ProfilerOverhead
from tracekit.suggestions import Suggestion
from tracekit.suggestions.rules import Rule, knob_rules

__all__ = ["DEFAULT_OVERHEAD", "Analysis", "ProfilerOverhead", "Rule", "StepsError", "Suggestion", "knob_rules"]
