"""A step's critical path as data: time segments (cpu, launch, sync, gpu) from its window start to its end."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tracekit.model.graph import StepGraph
from tracekit.model.path import PATH_KINDS, Segment, step_end, walk
from tracekit.model.replay import ReplayCosts, replay_points

KIND_CPU, KIND_LAUNCH, KIND_SYNC, KIND_GPU = PATH_KINDS


@dataclass(frozen=True)
class PathSegment:
    """One stretch of the critical path (µs on the rank's table clock, model/graph.py's times).

    kind: "cpu" host work between runtime calls; "launch" launch (and other runtime) calls and the
    latency from a launch to its GPU start; "sync" the own part of blocking calls; "gpu" GPU work the
    step waited for (earlier steps' work still running included)."""

    start_us: float
    end_us: float
    kind: str

    @property
    def length_us(self) -> float:
        return self.end_us - self.start_us


def critical_segments(graph: StepGraph, costs: ReplayCosts | None = None) -> tuple[PathSegment, ...]:
    """The critical path of `graph` replayed with `costs` (its recorded durations when None), in time
    order, adjacent segments of one kind merged. They tile [window start, window start + span]
    without overlap; their lengths summed by kind are replay()'s CriticalPath parts (cpu_gap_us,
    launch_us, sync_us, gpu_us). With costs None the times are the trace's own (the replay of the
    recorded durations), so the segments line up with the recorded events."""
    points = replay_points(graph, costs, critical_path=True)
    end = step_end(graph, points.call_end, points.gpu_end, points.tail_us, points.origin_pt)
    segments: list[Segment] = []
    walk(graph, points.times(graph), points.pred, points.label, points.blocked, end, points.origin_pt, segments)
    return tuple(PathSegment(lo, hi, PATH_KINDS[kind]) for lo, hi, kind in _runs(reversed(segments)))


def _runs(segments: Iterable[tuple[float, float, object]]) -> list[list]:
    """[start, end, kind] per run of segments of one kind that touch end to start, in time order."""
    runs: list[list] = []
    for lo, hi, kind in segments:
        if runs and runs[-1][2] == kind and runs[-1][1] == lo:
            runs[-1][1] = hi
        else:
            runs.append([lo, hi, kind])
    return runs


def merge_segments(segments: Iterable[PathSegment]) -> tuple[PathSegment, ...]:
    """Segments in time order with each run of one kind that touches end to start made one."""
    return tuple(PathSegment(lo, hi, kind) for lo, hi, kind in _runs((s.start_us, s.end_us, s.kind) for s in segments))


def path_parts(segments: Iterable[PathSegment]) -> dict[str, float]:
    """Total length per kind (every kind present, 0 when absent)."""
    out = dict.fromkeys(PATH_KINDS, 0.0)
    for s in segments:
        out[s.kind] += s.length_us
    return out
