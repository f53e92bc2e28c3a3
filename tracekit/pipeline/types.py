"""The analysis types and errors the commands and profile/ name, re-exported so they import the pipeline only."""

from __future__ import annotations

from tracekit.analyzers.analysis import Analysis
from tracekit.analyzers.steady import StepsError
from tracekit.suggestions import Suggestion

__all__ = ["Analysis", "StepsError", "Suggestion"]
