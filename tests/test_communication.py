"""Waiting on other ranks: point-to-point transfers and collectives are communication, not GPU time or launch gaps."""

from __future__ import annotations

import pytest
from tracebuilder import TraceBuilder

from tracekit.analyzers.analysis import analyze
from tracekit.analyzers.totals import COMM_BOUND, LAUNCH_BOUND
from tracekit.trace.load import load_trace

SENDRECV = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"


def test_sendrecv_wait_is_a_pipeline_bubble(tmp_path):
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0.0, 1_100.0)
    b.launch(0.0, 5.0, "gemm_kernel_a", 10.0, 100.0)
    b.launch(20.0, 5.0, SENDRECV, 110.0, 800.0, stream=20)  # waits 800 µs for the next stage's data
    b.launch(30.0, 5.0, "gemm_kernel_b", 910.0, 100.0)  # queued behind the transfer (stream order)
    a = analyze(load_trace(b.write(tmp_path / "pp.json")))
    t = a.totals
    assert t.gpu_busy_us == pytest.approx(1_000.0)  # 10 .. 1,010
    assert t.comm_exposed_us == pytest.approx(800.0) and t.p2p_exposed_us == pytest.approx(800.0)
    assert t.compute_us == pytest.approx(200.0)  # the two GEMMs only
    # the CPU launched everything in the first 35 µs: only the step's edges count as waiting for it,
    # 0 .. 10 before the first kernel and the tail 1,010 .. 1,100 after the last
    assert t.launch_gap_us == pytest.approx(10.0 + 90.0)
    assert a.verdict == COMM_BOUND
    assert "pipeline bubbles" in a.evidence


def test_ddp_step_with_gpu_backlog_is_not_launch_bound(tmp_path):
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0.0, 2_300.0)
    ts = 10.0
    for i in range(20):  # 20 backward kernels launched in 200 µs, 100 µs each: a 2 ms backlog
        b.launch(i * 10.0, 5.0, f"gemm_bwd_{i}", ts, 100.0)
        ts += 100.0
    b.launch(210.0, 5.0, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
             1_000.0, 1_200.0, stream=20)  # overlaps the backlog, then runs 200 µs alone
    a = analyze(load_trace(b.write(tmp_path / "ddp.json")))
    t = a.totals
    assert t.comm_exposed_us == pytest.approx(190.0)  # 2,010 .. 2,200 has only the all-reduce
    assert a.verdict != LAUNCH_BOUND
    assert t.launch_gap_us == pytest.approx(10.0 + 100.0)  # the step's edges: 0 .. 10 and 2,200 .. 2,300
