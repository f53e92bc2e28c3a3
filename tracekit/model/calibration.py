"""A ProfilerOverhead from a machine's own calibration (`tracekit calibrate`) instead of the fitted default."""

from __future__ import annotations

import math

from tracekit.model.projection import DEFAULT_OVERHEAD, ProfilerOverhead

MIN_LAUNCH_EXCESS_US = 0.25  # fast launch − launch_free_us below this: divide by this instead
SCALE_SPREAD = 0.2  # the scale's range: ±20 %
NO_LAUNCHES_NOTE = "no kernel launch calls measured: default per-event scale"


MIN_GAP_SCALE = 0.25  # a Python slowdown above 4x is not a reading of the profiler: clipped


def overhead_from_calibration(per_event_us: float, fast_launch_us: float | None, bare_launch_us: float | None,
                              source: str, python_slowdown: float | None = None) -> ProfilerOverhead:
    """The overhead a calibration measured: `per_event_us` the profiler's cost per recorded CPU event
    or runtime call, `fast_launch_us` the profiled kernel launch calls' 10th percentile, `bare_launch_us`
    the unprofiled cost per kernel launched (None where not measured).

    per_event_scale = per_event_us / max(fast_launch_us − DEFAULT_OVERHEAD.launch_free_us, 0.25), so
    that a trace recorded as slowly as the calibration run is corrected by per_event_us per event
    (without fast_launch_us: the default scale, said in the source); launch_free_us is the default's;
    launch_floor_us = bare_launch_us, else the default's; scale_range = the scale ± 20 %; gap_scale =
    1 / python_slowdown (plain Python's profiled / bare time, within [MIN_GAP_SCALE, 1]), else the
    default's."""
    if not math.isfinite(per_event_us) or per_event_us < 0:
        raise ValueError(f"per_event_us must be a finite number >= 0, not {per_event_us!r}")
    for name, value in (("fast_launch_us", fast_launch_us), ("bare_launch_us", bare_launch_us),
                        ("python_slowdown", python_slowdown)):
        if value is not None and (not math.isfinite(value) or value <= 0):
            raise ValueError(f"{name} must be a finite number > 0 or None, not {value!r}")
    default = DEFAULT_OVERHEAD
    if fast_launch_us is None:
        scale = default.per_event_scale
        source = f"{source} ({NO_LAUNCHES_NOTE})"
    else:
        scale = per_event_us / max(fast_launch_us - default.launch_free_us, MIN_LAUNCH_EXCESS_US)
    return ProfilerOverhead(
        per_event_scale=scale,
        launch_free_us=default.launch_free_us,
        launch_floor_us=bare_launch_us if bare_launch_us is not None else default.launch_floor_us,
        scale_range=((1 - SCALE_SPREAD) * scale, (1 + SCALE_SPREAD) * scale),
        source=source,
        gap_scale=(min(max(1.0 / python_slowdown, MIN_GAP_SCALE), 1.0) if python_slowdown is not None
                   else default.gap_scale),
    )
