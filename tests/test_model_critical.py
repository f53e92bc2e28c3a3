"""The critical path as time segments (model/critical.py): by hand on tiny steps, and tiling the steady steps of a sample."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from conftest import SAMPLE_TRACES
from test_model_replay import gpu_bound, launch_bound, sync_step, with_gpu_durations

import tracekit
from tracekit.analyzers.step_plan import plan_steps
from tracekit.model import PathSegment, critical_segments, replay, step_graphs
from tracekit.model.critical import merge_segments, path_parts
from tracekit.model.graph import StepGraph
from tracekit.model.replay import ReplayCosts


def relative(graph: StepGraph, segments: tuple[PathSegment, ...]) -> list[tuple[float, float, str]]:
    w0 = graph.window_start_us
    return [(round(s.start_us - w0, 6), round(s.end_us - w0, 6), s.kind) for s in segments]


def test_launch_bound_step_by_hand(tmp_path):
    # gaps 0→10, 15→30, 35→50, the tail 55→100 on the CPU; the three 5 µs launch calls between them
    graph = launch_bound(tmp_path)
    assert relative(graph, critical_segments(graph)) == [
        (0.0, 10.0, "cpu"), (10.0, 15.0, "launch"), (15.0, 30.0, "cpu"), (30.0, 35.0, "launch"),
        (35.0, 50.0, "cpu"), (50.0, 55.0, "launch"), (55.0, 100.0, "cpu")]


def test_gpu_bound_step_by_hand(tmp_path):
    # first gap 2, L1's start to K1's start 6, then K1, the 1 µs stream gaps and K2, K3 as one GPU stretch
    graph = gpu_bound(tmp_path)
    assert relative(graph, critical_segments(graph)) == [(0.0, 2.0, "cpu"), (2.0, 8.0, "launch"), (8.0, 100.0, "gpu")]


def test_sync_step_by_hand_and_with_costs(tmp_path):
    # L1 at 10 → K1 [20, 60]; the sync returns 2 µs after K1; gap to L2 at 70, L2 5 µs, the tail to 100
    graph = sync_step(tmp_path)
    assert relative(graph, critical_segments(graph)) == [
        (0.0, 10.0, "cpu"), (10.0, 20.0, "launch"), (20.0, 60.0, "gpu"), (60.0, 62.0, "sync"),
        (62.0, 70.0, "cpu"), (70.0, 75.0, "launch"), (75.0, 100.0, "cpu")]
    # K1 twice as fast: it ends at 40, the sync at 42, L2 starts 8 µs later (50), the tail ends at 80
    costs = with_gpu_durations(graph, {"20": 20.0})
    assert relative(graph, critical_segments(graph, costs)) == [
        (0.0, 10.0, "cpu"), (10.0, 20.0, "launch"), (20.0, 40.0, "gpu"), (40.0, 42.0, "sync"),
        (42.0, 50.0, "cpu"), (50.0, 55.0, "launch"), (55.0, 80.0, "cpu")]
    # the sync no longer waits: it ends at its start + its 42 µs call, off the GPU, after L1 and its gap
    nowait = ReplayCosts(call_nowait=np.array([False, True, False]))
    assert relative(graph, critical_segments(graph, nowait)) == [
        (0.0, 10.0, "cpu"), (10.0, 15.0, "launch"), (15.0, 20.0, "cpu"), (20.0, 62.0, "sync"), (62.0, 70.0, "cpu"),
        (70.0, 75.0, "launch"), (75.0, 100.0, "cpu")]


def test_merge_and_parts():
    parts = (PathSegment(0.0, 1.0, "cpu"), PathSegment(1.0, 3.0, "cpu"), PathSegment(3.0, 4.0, "gpu"),
             PathSegment(5.0, 6.0, "gpu"))
    assert merge_segments(parts) == (PathSegment(0.0, 3.0, "cpu"), PathSegment(3.0, 4.0, "gpu"),
                                     PathSegment(5.0, 6.0, "gpu"))  # the last two do not touch
    assert path_parts(parts) == {"cpu": 3.0, "launch": 0.0, "sync": 0.0, "gpu": 2.0}


def test_gpt2_decode_steady_steps_are_tiled():
    path = SAMPLE_TRACES / "gpt2_decode.trace.json.gz"
    if not path.exists():
        pytest.skip("sample trace absent")
    rank = tracekit.load_trace(path).rank()
    graphs = step_graphs(rank, plan_steps(rank))
    assert len(graphs) == 20
    for graph in graphs:
        segments = critical_segments(graph)
        result = replay(graph)
        # the replay of the recorded durations reproduces the traced step on this trace: the segments
        # run from the window start to its end, each one where the previous ends, never empty
        assert result.span_us == pytest.approx(graph.traced_span_us, abs=1e-6)
        assert segments[0].start_us == graph.window_start_us
        assert segments[-1].end_us == pytest.approx(graph.window_end_us, abs=1e-6)
        assert all(a.end_us == b.start_us and a.kind != b.kind for a, b in itertools.pairwise(segments))
        assert all(s.end_us > s.start_us for s in segments)
        parts = path_parts(segments)
        assert result.path is not None
        assert (parts["cpu"], parts["launch"], parts["sync"], parts["gpu"]) == pytest.approx(
            (result.path.cpu_gap_us, result.path.launch_us, result.path.sync_us, result.path.gpu_us), abs=1e-6)
    # launch-bound: the host's work and its launch calls hold most of every step
    first = path_parts(critical_segments(graphs[0]))
    assert first["cpu"] + first["launch"] > 0.9 * graphs[0].traced_span_us


def test_segments_follow_the_projected_costs():
    """With a StepModel's projected costs the segments tile the projected span and add up to its path."""
    from tracekit.pipeline.local import analyse_file

    path = SAMPLE_TRACES / "train_optimizer_loop.trace.json.gz"
    if not path.exists():
        pytest.skip("sample trace absent")
    model = analyse_file(path, with_suggestions=False).models[0]
    assert model.steps
    for step in model.steps:
        segments = critical_segments(step.graph, step.costs)
        w0 = step.graph.window_start_us
        assert segments[0].start_us == w0
        assert segments[-1].end_us == pytest.approx(w0 + step.projected.span_us, abs=1e-6)
        assert step.projected.span_us < step.graph.traced_span_us  # the profiler's cost is gone
        parts = path_parts(segments)
        p = step.projected.path
        assert p is not None
        assert (parts["cpu"], parts["launch"], parts["sync"], parts["gpu"]) == pytest.approx(
            (p.cpu_gap_us, p.launch_us, p.sync_us, p.gpu_us), abs=1e-6)
