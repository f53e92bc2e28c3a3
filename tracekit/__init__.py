"""tracekit: why PyTorch and Triton code is slow on a GPU, and what to change."""

from __future__ import annotations

__version__ = "0.1.0"

from tracekit.analyzers import analyze
from tracekit.errors import OutputError, ProfileError, TraceFormatError, TracekitError
from tracekit.profile import ProfileRun, profile, profile_callable, step, step_range
from tracekit.report import render_html, write_report
from tracekit.suggestions import Suggestion, suggest
from tracekit.trace.load import load_trace
from tracekit.trace.model import RankTrace, Trace, TraceMeta

__all__ = [
    "OutputError",
    "ProfileError",
    "ProfileRun",
    "RankTrace",
    "Suggestion",
    "Trace",
    "TraceFormatError",
    "TraceMeta",
    "TracekitError",
    "__version__",
    "analyze",
    "load_trace",
    "profile",
    "profile_callable",
    "render_html",
    "step",
    "step_range",
    "suggest",
    "write_report",
]
