"""Record PyTorch/Triton code under torch.profiler: scripts, modules, code blocks and single kernels."""

from __future__ import annotations

from tracekit.profile.api import Profiling, profile, profile_callable
from tracekit.profile.record import ProfileRun
from tracekit.profile.session import ProfileOptions
from tracekit.profile.steps import step, step_range

__all__ = [
    "ProfileOptions",
    "ProfileRun",
    "Profiling",
    "profile",
    "profile_callable",
    "step",
    "step_range",
]
