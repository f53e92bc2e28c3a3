"""launch_overhead on tiny synthetic traces with hand-computed answers."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
from tracebuilder import TraceBuilder

import tracekit
from tracekit.analyzers import launch as L
from tracekit.analyzers.gputime import temporal_breakdown
from tracekit.analyzers.launch import LaunchTotals, launch_overhead
from tracekit.trace.intervals import busy_in_windows, merge_intervals


def two_step_trace(tmp_path):
    """Two ProfilerSteps on stream 7 (plus stream 9 and an out-of-step kernel on stream 11).

    step 1 [0, 100]:  L1 10+5 -> K1 [20, 30]; L2 20+5 -> K2 [32, 35] (gap 2, launched early:
                      kernel wait); L3 50+5 -> K3 [60, 64] (gap 25, launched late: host wait);
                      memcpy call 70+4 -> M [75, 85] (gap 11, host wait)
    step 2 [100, 200], stretched to 235 by its last kernel:
                      L5 110+5 -> K5 [150, 190] (gap 65, host wait); L6 120+5 -> K6 [185, 215] on
                      stream 9 (first there: no gap); L7 126+2 -> K7 [230, 235] (gap 40, launched
                      early: other); cudaDeviceSynchronize 130+60
    outside steps:    L0 -50+5 -> K0 [-40, -35] on stream 11
    """
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 100)
    b.annotation("ProfilerStep#2", 100, 100)
    b.launch(-50, 5, "k0", -40, 5, stream=11)
    b.launch(10, 5, "k1", 20, 10)
    b.launch(20, 5, "k2", 32, 3)
    b.launch(50, 5, "k3", 60, 4)
    b.launch(70, 4, "Memcpy HtoD (Pinned -> Device)", 75, 10, api="cudaMemcpyAsync", kind="memcpy",
             bytes=1 << 20)
    b.launch(110, 5, "k5", 150, 40)
    b.launch(120, 5, "k6", 185, 30, stream=9)
    b.launch(126, 2, "k7", 230, 5)
    b.launch(130, 60, None, 0, 0, api="cudaDeviceSynchronize")
    return tracekit.load_trace(b.write(tmp_path / "two_steps.json")).rank()


def test_per_step_numbers(tmp_path):
    lo = launch_overhead(two_step_trace(tmp_path))
    assert lo.scope == "steps"
    s1, s2 = lo.step_totals
    assert (s1.kernels, s1.gpu_ops, s1.launches, s1.syncs) == (3, 4, 4, 0)
    assert s1.cpu_launch_us == pytest.approx(19.0)  # 5 + 5 + 5 + 4
    assert s1.span_us == pytest.approx(100.0)
    assert s1.gpu_busy_us == pytest.approx(27.0)  # 10 + 3 + 4 + 10
    assert s1.gpu_idle_us == pytest.approx(73.0)
    assert (s1.host_wait_us, s1.kernel_wait_us, s1.other_idle_us) == pytest.approx((36.0, 2.0, 0.0))
    assert s1.short_kernels == 2  # K2 (3 < 5) and K3 (4 < 5)
    # idle split by hand: [0, 20] late (L1 returns at 15) 20, [30, 32] K2 launched before: GPU gap 2,
    # [35, 60] 25, [64, 75] 11, [85, 100] 15 (K5 launched at 110): 71 µs of launch waits, all of the
    # 73 µs the GPU did not compute (27 busy + 2 GPU gap): launch-bound
    assert (s1.launch_gap_us, s1.gpu_gap_us) == pytest.approx((71.0, 2.0))
    assert (s1.verdict, s1.cause) == ("launch-bound", "launch")

    assert (s2.kernels, s2.gpu_ops, s2.launches, s2.syncs) == (3, 3, 3, 1)
    assert s2.cpu_launch_us == pytest.approx(12.0) and s2.sync_us == pytest.approx(60.0)
    assert s2.span_us == pytest.approx(135.0)  # stretched to K7's end at 235
    assert s2.gpu_busy_us == pytest.approx(70.0)  # [150, 215] + [230, 235]
    assert (s2.host_wait_us, s2.kernel_wait_us, s2.other_idle_us) == pytest.approx((65.0, 0.0, 40.0))
    assert s2.short_kernels == 0
    # [100, 150]: late until L5 returns at 115 + 20 µs latency = 135: 5 µs of it after the sync call
    # began at 130 (sync window 130 .. 230, the next GPU start after it returned), 30 launch; the
    # other 15 and [215, 230] (K7 launched at 126) are GPU gaps: compute 70 + 30 = 100 of 135 (74 %),
    # launch 30 of the remaining 35
    assert (s2.launch_gap_us, s2.sync_wait_us, s2.gpu_gap_us) == pytest.approx((30.0, 5.0, 30.0))
    assert (s2.verdict, s2.cause) == ("launch-bound", "launch")

    rows = lo.steps.set_index("step")
    assert rows.loc[1, "queue_p50_us"] == pytest.approx(5.0)  # queues 5, 7, 5, 1
    assert rows.loc[1, "queue_p90_us"] == pytest.approx(6.4)
    assert rows.loc[1, "queue_max_us"] == pytest.approx(7.0)
    assert rows.loc[2, "queue_max_us"] == pytest.approx(102.0)  # K7: 230 - 128
    assert rows.loc[2, "end"] - rows.loc[2, "ts"] == pytest.approx(135.0)


def test_totals_streams_and_apis(tmp_path):
    lo = launch_overhead(two_step_trace(tmp_path))
    t = lo.totals
    assert (t.steps, t.kernels, t.gpu_ops, t.launches, t.short_kernels) == (2, 6, 7, 7, 2)
    assert (t.span_us, t.gpu_busy_us) == pytest.approx((235.0, 97.0))
    assert t.kernels_per_step == 3.0
    # both steps steady (2 steps: neither is 1.5x the median); launch 101 of the 106 µs not computed
    assert t.verdict == "launch-bound"
    assert lo.queue.count == 7 and lo.queue.p50_us == pytest.approx(7.0)
    streams = lo.streams.set_index(L.S_STREAM)
    assert streams.loc[7, L.S_ACTIVITIES] == 6
    assert streams.loc[7, L.S_BUSY_US] == pytest.approx(72.0)
    assert streams.loc[7, L.S_IDLE_US] == pytest.approx(143.0)
    assert (streams.loc[7, L.S_HOST_WAIT_US], streams.loc[7, L.S_KERNEL_WAIT_US],
            streams.loc[7, L.S_OTHER_US]) == pytest.approx((101.0, 2.0, 40.0))
    assert streams.loc[9, L.S_IDLE_US] == 0.0 and streams.loc[11, L.S_ACTIVITIES] == 1
    apis = lo.apis.set_index(L.API_NAME)
    assert apis.loc["cudaLaunchKernel", L.API_COUNT] == 6  # L0 is outside the steps
    assert apis.loc["cudaMemcpyAsync", L.API_TIME_US] == pytest.approx(4.0)
    assert apis.loc["cudaDeviceSynchronize", L.API_KIND] == "sync"
    cats = lo.activities[L.A_IDLE].tolist()
    assert (cats.count(L.HOST_WAIT), cats.count(L.KERNEL_WAIT), cats.count(L.OTHER_WAIT)) == (3, 1, 1)
    json.dumps(lo.to_dict(), allow_nan=False)


def test_temporal_breakdown(tmp_path):
    tb = temporal_breakdown(two_step_trace(tmp_path))
    assert tb.kernel_time_us == pytest.approx(275.0)  # -40 .. 235
    assert tb.idle_us == pytest.approx(173.0)  # 275 - (5 + 27 + 70)
    assert tb.compute_us == pytest.approx(92.0)  # every kernel; the memcpy is not computation
    assert tb.non_compute_us == pytest.approx(10.0)


def test_trace_without_steps_is_one_pseudo_step(tmp_path):
    b = TraceBuilder()
    ext = b.op("aten::add", 0, 40)
    b.launch(5, 10, "k_a", 20, 2, ext=ext)
    b.launch(16, 10, "k_b", 30, 2, ext=ext)
    r = tracekit.load_trace(b.write(tmp_path / "nostep.json")).rank()
    lo = launch_overhead(r)
    assert lo.scope == "trace" and list(lo.steps["step"]) == [-1]
    t = lo.totals
    assert (t.steps, t.kernels, t.launches) == (1, 2, 2)
    assert t.span_us == pytest.approx(27.0)  # first launch at 5 .. k_b's end at 32 (the op starts at 0)
    assert t.gpu_busy_us == pytest.approx(4.0)
    assert t.short_kernels == 2 and t.cpu_launch_us == pytest.approx(20.0)
    # [5, 20]: late until k_a's call returns (15) + 20: 15; [22, 30]: k_b's call returns at 26: 8
    assert t.launch_gap_us == pytest.approx(23.0)
    assert t.verdict == "launch-bound"


def test_cpu_only_trace(tmp_path):
    b = TraceBuilder()
    b.annotation("ProfilerStep#0", 0, 10)
    b.op("aten::add", 1, 5)
    lo = launch_overhead(tracekit.load_trace(b.write(tmp_path / "cpu.json")).rank())
    assert lo.verdict == "cpu-only" and lo.totals.gpu_busy_us == 0.0
    assert lo.queue.p50_us is None and len(lo.streams) == 0


def test_graph_launch_counts_once_and_feeds_many_kernels(tmp_path):
    b = TraceBuilder()
    b.annotation("ProfilerStep#0", 0, 100)
    corr = b.launch(10, 8, "g_k1", 20, 30, api="cudaGraphLaunch")
    b.gpu("g_k2", 50, 30, corr)
    lo = launch_overhead(tracekit.load_trace(b.write(tmp_path / "graph.json")).rank())
    t = lo.totals
    assert (t.launches, t.kernels, t.short_kernels) == (1, 2, 0)
    assert t.gpu_busy_us == pytest.approx(60.0)
    assert lo.apis[L.API_KIND].tolist() == ["graph"]
    assert sorted(lo.activities[L.A_QUEUE_US]) == pytest.approx([2.0, 32.0])


def test_kernel_wait_threshold_is_a_parameter(tmp_path):
    r = two_step_trace(tmp_path)
    lo = launch_overhead(r, kernel_wait_us=50.0)  # K7's 40 µs gap becomes kernel wait
    assert lo.totals.kernel_wait_us == pytest.approx(42.0)
    assert lo.totals.other_idle_us == pytest.approx(0.0)


def test_totals_add_up():
    a = LaunchTotals(steps=1, kernels=3, gpu_ops=4, launches=4, span_us=100.0, gpu_busy_us=27.0)
    b = LaunchTotals(steps=2, kernels=5, gpu_ops=5, launches=6, span_us=50.0, gpu_busy_us=40.0)
    c = a + b
    assert (c.steps, c.kernels, c.launches) == (3, 8, 10)
    assert c.gpu_util == pytest.approx(67.0 / 150.0)


def test_totals_verdict_kept_through_pickle_and_out_of_equality():
    # by hand: a 100 µs span with 27 µs busy and the other 73 µs waiting for launches is launch-bound
    a = LaunchTotals(steps=1, kernels=3, gpu_ops=4, launches=4, span_us=100.0, gpu_busy_us=27.0, launch_gap_us=73.0)
    b = LaunchTotals(steps=1, kernels=3, gpu_ops=4, launches=4, span_us=100.0, gpu_busy_us=27.0, launch_gap_us=73.0)
    text = a.evidence  # asked first: the verdict is computed (and kept) before it
    assert (a.verdict, a.cause) == ("launch-bound", "launch") and text
    assert a == b and hash(a) == hash(b)  # the kept verdict is no field
    c = pickle.loads(pickle.dumps(a))  # a worker's totals travel to the merge with their verdict
    assert (c.verdict, c.evidence) == (a.verdict, text) and "_evidence_text" in vars(c)
    assert b.cause == "launch"  # b asked its cause first, a its evidence: their kept values in one order
    assert list(vars(b)) == list(vars(a))[:-1]


def test_merge_and_windows_helpers():
    s, e = merge_intervals(np.array([5.0, 0.0, 2.0, 20.0]), np.array([8.0, 3.0, 4.0, 21.0]))
    assert s.tolist() == [0.0, 5.0, 20.0] and e.tolist() == [4.0, 8.0, 21.0]
    s2, e2 = merge_intervals(np.array([-30.0, -25.0, -5.0]), np.array([-20.0, -22.0, 1.0]))  # before origin
    assert s2.tolist() == [-30.0, -5.0] and e2.tolist() == [-20.0, 1.0]
    got = busy_in_windows(s, e, np.array([0.0, 3.0, 7.0, 30.0]), np.array([3.0, 6.0, 25.0, 40.0]))
    assert got.tolist() == pytest.approx([3.0, 2.0, 2.0, 0.0])
