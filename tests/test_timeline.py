"""The timeline analyzer: busy share and top kernel per bin, by hand on a synthetic trace."""

from __future__ import annotations

import pytest
from tracebuilder import TraceBuilder

import tracekit
from tracekit.analyzers import analyze
from tracekit.analyzers.timeline import NO_KERNEL, launch_queue_depth, timeline


def _rank(tmp_path):
    """One 1000 µs step; A [100, 300] on stream 7, B [200, 250] on stream 8, C [900, 900.05] on 7."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#0", 0, 1000)
    b.launch(90, 5, "kernel_A", 100, 200, stream=7)
    b.launch(150, 5, "kernel_B", 200, 50, stream=8)
    b.launch(890, 5, "kernel_C", 900, 0.05, stream=7)
    trace = tracekit.load_trace(b.write(tmp_path / "t.json"))
    return trace.rank(), analyze(trace).ranks[0]


def test_bins_by_hand(tmp_path):
    rank, ra = _rank(tmp_path)
    tl = timeline(rank, ra.launch.plan, ra.classification.table["class"], bins=10)  # 100 µs bins from 0
    origin = rank.meta.origin_us  # table times count from here; the file's times from 0
    assert (tl.t0_us + origin, tl.span_us, tl.bin_us) == (0.0, 1000.0, 100.0)
    gpu, s7, s8, cpu = tl.rows
    assert [r.label for r in tl.rows] == ["GPU (all streams)", "stream 7", "stream 8", "CPU launch calls"]
    # union [100, 300] and [900, 900.05]: bins 1 and 2 full; bin 9 holds 0.05 µs, 0.0005, kept as 0.001
    assert gpu.busy == (0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.001)
    assert s8.busy == (0.0, 0.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    names = [tl.names[i] if i != NO_KERNEL else None for i in gpu.top]
    assert names == [None, "kernel_A", "kernel_A", None, None, None, None, None, None, "kernel_C"]  # A 100 µs > B 50 µs in bin 2
    assert gpu.busy_us == pytest.approx(200.05) and s7.busy_us == pytest.approx(200.05) and s8.busy_us == 50.0
    # launch calls [90, 95], [150, 155], [890, 895]: 5 µs in bins 0, 1 and 8
    assert cpu.busy == (0.05, 0.05, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.05, 0.0)
    assert [(m.step, m.start_us, m.end_us) for m in tl.steps] == [(0, 0.0, 1000.0)]


def test_queue_depth_by_hand(tmp_path):
    rank, _ = _rank(tmp_path)
    q = launch_queue_depth(rank)
    # +1 at each launch end (95, 155, 895), -1 at each kernel start (100, 200, 900)
    origin = rank.meta.origin_us
    assert [(t + origin, d) for t, d in zip(q.ts, q.depth, strict=True)] == [(95, 1), (100, 0), (155, 1), (200, 0), (895, 1), (900, 0)]
