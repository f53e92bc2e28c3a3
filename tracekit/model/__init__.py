"""The execution model of a steady step: its dependency graph, an event-driven replay, the trust gate and the unprofiled projection."""

from __future__ import annotations

from tracekit.model.calibration import overhead_from_calibration
from tracekit.model.critical import PathSegment, critical_segments
from tracekit.model.fidelity import FIDELITY_LIMIT, Fidelity, fidelity
from tracekit.model.graph import StepGraph, step_graph, step_graphs
from tracekit.model.projection import (
    DEFAULT_OVERHEAD,
    LaunchProfile,
    ProfilerOverhead,
    StepProjection,
    launch_profile,
    project,
    project_steps,
)
from tracekit.model.replay import CriticalPath, ReplayCosts, ReplayResult, replay

__all__ = [
    "DEFAULT_OVERHEAD", "FIDELITY_LIMIT", "CriticalPath", "Fidelity", "LaunchProfile", "PathSegment", "ProfilerOverhead",
    "ReplayCosts", "ReplayResult", "StepGraph", "StepProjection", "critical_segments", "fidelity", "launch_profile",
    "overhead_from_calibration", "project", "project_steps", "replay", "step_graph", "step_graphs",
]
