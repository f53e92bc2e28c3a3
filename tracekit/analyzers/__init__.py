"""Analyzers: pure functions from a loaded trace to typed, frozen results with to_dict()."""

from __future__ import annotations

from tracekit.analyzers.analysis import Analysis, RankAnalysis, analyze
from tracekit.analyzers.kernels import KernelClassification, classify
from tracekit.analyzers.launch import LaunchOverhead, LaunchTotals, launch_overhead
from tracekit.analyzers.summary import SCHEMA

__all__ = [
    "SCHEMA",
    "Analysis",
    "KernelClassification",
    "LaunchOverhead",
    "LaunchTotals",
    "RankAnalysis",
    "analyze",
    "classify",
    "launch_overhead",
]
