"""tracekit: why PyTorch and Triton code is slow on a GPU, and what to change."""

from __future__ import annotations

__version__ = "0.1.0"

from tracekit.errors import OutputError, ProfileError, TraceFormatError, TracekitError
from tracekit.trace.load import load_trace
from tracekit.trace.model import RankTrace, Trace

__all__ = [
    "OutputError",
    "ProfileError",
    "RankTrace",
    "Trace",
    "TraceFormatError",
    "TracekitError",
    "__version__",
    "load_trace",
]
