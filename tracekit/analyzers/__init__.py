"""Analyzers: pure functions from a loaded trace to typed, frozen results with to_dict()."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tracekit.analyzers.analysis import Analysis, RankAnalysis, analyze
    from tracekit.analyzers.kernels import KernelClassification, classify
    from tracekit.analyzers.launch import LaunchOverhead, LaunchTotals, launch_overhead
    from tracekit.analyzers.summary import SCHEMA

# public name -> module; imported on first use (PEP 562), so that importing one light analyzer
# module (step_selection) loads no pandas
_LAZY = {
    "SCHEMA": "tracekit.analyzers.summary",
    "Analysis": "tracekit.analyzers.analysis",
    "KernelClassification": "tracekit.analyzers.kernels",
    "LaunchOverhead": "tracekit.analyzers.launch",
    "LaunchTotals": "tracekit.analyzers.launch",
    "RankAnalysis": "tracekit.analyzers.analysis",
    "analyze": "tracekit.analyzers.analysis",
    "classify": "tracekit.analyzers.kernels",
    "launch_overhead": "tracekit.analyzers.launch",
}

__all__ = ["SCHEMA", "Analysis", "KernelClassification", "LaunchOverhead", "LaunchTotals", "RankAnalysis",
           "analyze", "classify", "launch_overhead"]


def __getattr__(name: str) -> Any:
    """Import a public name from its module the first time it is used."""
    try:
        module = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'tracekit.analyzers' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
