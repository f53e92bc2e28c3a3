"""The step graph and its replay on tiny synthetic steps whose timelines are worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest
from tracebuilder import TraceBuilder

import tracekit
from tracekit.analyzers.step_plan import plan_steps
from tracekit.analyzers.step_selection import ALL_STEPS
from tracekit.model import (
    DEFAULT_OVERHEAD,
    LaunchProfile,
    ProfilerOverhead,
    ReplayCosts,
    fidelity,
    launch_profile,
    project,
    project_steps,
    replay,
    step_graph,
)
from tracekit.model.graph import ROLE_LAUNCH, ROLE_QUEUE, ROLE_SYNC, StepGraph
from tracekit.model.projection import FALLBACK_PER_EVENT_US


def graph_of(b: TraceBuilder, tmp_path, name: str) -> StepGraph:
    rank = tracekit.load_trace(b.write(tmp_path / f"{name}.json")).rank()
    return step_graph(rank, plan_steps(rank, ALL_STEPS), 0)


def with_gpu_durations(graph: StepGraph, durations: dict[str, float]) -> ReplayCosts:
    """Costs that change the named kernels' durations (by kernel start after the step mark at 0, which
    names them here; table times are µs after the trace's own origin)."""
    new = graph.gpu_dur_us.copy()
    starts = graph.gpu_ts_us - graph.window_start_us
    for ts, dur in durations.items():
        hit = np.flatnonzero(np.isclose(starts, float(ts)))
        assert len(hit) == 1
        new[hit] = dur
    return ReplayCosts(gpu_dur_us=new)


# 1 × (fast launch − 3 µs) per recorded event; launch calls lose median launch − 3 µs (floor 3 µs)
C2 = ProfilerOverhead(per_event_scale=1.0, launch_free_us=3.0, launch_floor_us=3.0, scale_range=(1.0, 1.0),
                      source="test")
# launch calls of 5 µs: with C2, 2 µs per recorded event and 2 µs off each launch call
FIVE_US = LaunchProfile(fast_us=5.0, median_us=5.0, count=3)


def launch_bound(tmp_path) -> StepGraph:
    """Step [0, 100], GPU idle between kernels: L1 10+5 -> K1 [17, 20]; op at 22 (in the gap);
    L2 30+5 -> K2 [37, 40]; L3 50+5 -> K3 [57, 60]; op at 70 (in the tail); the mark ends at 100."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 100)
    b.launch(10, 5, "k1", 17, 3)
    b.op("aten::view", 22, 3)
    b.launch(30, 5, "k2", 37, 3)
    b.launch(50, 5, "k3", 57, 3)
    b.op("aten::item_py", 70, 2)
    return graph_of(b, tmp_path, "launch_bound")


def test_launch_bound_chain(tmp_path):
    graph = launch_bound(tmp_path)
    assert graph.n_calls == 3 and graph.n_gpu == 3
    assert list(graph.call_role) == [ROLE_LAUNCH] * 3
    assert graph.call_gap_us.tolist() == pytest.approx([10.0, 15.0, 15.0])  # 0→10, 15→30, 35→50
    assert graph.call_gap_events.tolist() == [1, 1, 0]  # the step mark at 0; the op at 22
    assert (graph.tail_us, graph.tail_events) == (pytest.approx(45.0), 1)  # 55→100, the op at 70
    result = replay(graph)
    assert result.span_us == pytest.approx(100.0) and result.traced_span_us == pytest.approx(100.0)
    assert result.gpu_busy_us == pytest.approx(9.0)
    # critical path: CPU the whole way: gaps 10 + 15 + 15 + tail 45, three launches of 5
    path = result.path
    assert (path.cpu_gap_us, path.launch_us, path.sync_us, path.gpu_us) == pytest.approx((85.0, 15.0, 0.0, 0.0))


def test_launch_bound_projection_by_hand(tmp_path):
    graph = launch_bound(tmp_path)
    # its own launch calls (5, 5, 5 µs) scale it: 1 × (5 - 3) = 2 µs per event, 5 - 3 = 2 µs per launch
    assert launch_profile((graph,)) == FIVE_US
    result = project(graph, C2)
    # gaps lose 2 µs per event: 10-2, 15-2, 15; the tail 45-2; launches 5 -> max(5-2, 3) = 3:
    # CPU end = 8 + 3 + 13 + 3 + 15 + 3 + 43 = 88; K3: L3 starts at 42, latency 7 - 2 = 5 -> [47, 50]
    assert result.span_us == pytest.approx(88.0)
    assert result.cpu_end_us == pytest.approx(88.0)
    assert result.gpu_end_us == pytest.approx(50.0)
    assert result.gpu_busy_us == pytest.approx(9.0)


def gpu_bound(tmp_path) -> StepGraph:
    """Step mark [0, 50]; kernels of 30 µs back to back (1 µs apart) while the CPU runs ahead:
    L1 2+4 -> K1 [8, 38]; L2 8+4 -> K2 [39, 69]; L3 14+4 -> K3 [70, 100]."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 50)
    b.launch(2, 4, "k1", 8, 30)
    b.launch(8, 4, "k2", 39, 30)
    b.launch(14, 4, "k3", 70, 30)
    return graph_of(b, tmp_path, "gpu_bound")


def test_gpu_bound_chain(tmp_path):
    graph = gpu_bound(tmp_path)
    assert graph.gpu_stream_bound.tolist() == [False, True, True]  # K2, K3 waited for their stream
    assert graph.gpu_gap_us.tolist() == pytest.approx([0.0, 1.0, 1.0])
    result = replay(graph)
    assert result.span_us == pytest.approx(100.0)  # the step stretches to its last kernel's end
    assert result.gpu_busy_us == pytest.approx(90.0)
    path = result.path  # first gap 2, latency 6 to K1, then 30 + 1 + 30 + 1 + 30 on the GPU
    assert (path.cpu_gap_us, path.launch_us, path.gpu_us) == pytest.approx((2.0, 6.0, 92.0))
    # the projection cannot shrink a GPU-bound step beyond its CPU lead: the first gap loses the mark's
    # 2 µs (-> 0), L1 4 -> 3 µs so K1's latency 6 -> 5: K1 [5, 35], K2 [36, 66], K3 [67, 97]
    assert project(graph, C2, launches=FIVE_US).span_us == pytest.approx(97.0)
    # scaled by its own launches of 4 µs: 1 µs per event and per launch: the first gap 2 -> 1, L1 [1, 4],
    # K1's latency 6 -> 5: K1 [6, 36], K2 [37, 67], K3 [68, 98]
    assert project(graph, C2).span_us == pytest.approx(98.0)


def sync_step(tmp_path) -> StepGraph:
    """Step [0, 100]: L1 10+5 -> K1 [20, 60]; cudaStreamSynchronize 20+42 (returns 2 µs after K1);
    L2 70+5 -> K2 [80, 85]; the mark ends at 100."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 100)
    b.launch(10, 5, "k1", 20, 40)
    b.launch(20, 42, None, 0, 0, api="cudaStreamSynchronize")
    b.launch(70, 5, "k2", 80, 5)
    return graph_of(b, tmp_path, "sync")


def test_host_sync_waits_for_its_kernel(tmp_path):
    graph = sync_step(tmp_path)
    assert graph.call_role.tolist() == [ROLE_LAUNCH, ROLE_SYNC, ROLE_LAUNCH]
    assert graph.wait_nodes[graph.wait_ptr[1]:graph.wait_ptr[2]].tolist() == [0]  # K1
    assert (graph.call_own_us[1], graph.call_tail_us[1]) == pytest.approx((2.0, 2.0))
    result = replay(graph)
    assert result.span_us == pytest.approx(100.0)
    path = result.path  # tail 25, L2 5, gap 8, sync tail 2, K1 40, latency 10, first gap 10
    assert (path.cpu_gap_us, path.launch_us, path.sync_us, path.gpu_us) == pytest.approx((43.0, 15.0, 2.0, 40.0))
    assert path.sync_wait_us == pytest.approx(40.0)  # blocked from 20 until K1 ends at 60
    # K1 twice as fast: the sync returns at 40 + 2, L2 starts 8 later (50), the tail ends at 55 + 25 = 80
    faster = replay(graph, with_gpu_durations(graph, {"20": 20.0}))
    assert faster.span_us == pytest.approx(80.0)
    assert faster.gpu_end_us == pytest.approx(65.0)  # K2: L2 starts at 50, latency 10


def test_graph_launch_fans_out(tmp_path):
    """cudaGraphLaunch 10+10 -> g1 [25, 30], g2 [31, 36], g3 [37, 45] (one correlation); mark [0, 50]."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 50)
    corr = b.launch(10, 10, "g1", 25, 5, api="cudaGraphLaunch")
    b.gpu("g2", 31, 5, corr)
    b.gpu("g3", 37, 8, corr)
    graph = graph_of(b, tmp_path, "graph_launch")
    assert graph.n_calls == 1 and graph.gpu_launch.tolist() == [0, 0, 0]
    assert replay(graph).span_us == pytest.approx(50.0)
    # GPU twice as slow: g1 [25, 35], g2 [36, 46], g3 [47, 63]: the step ends with the GPU
    slower = replay(graph, with_gpu_durations(graph, {"25": 10.0, "31": 10.0, "37": 16.0}))
    assert slower.span_us == pytest.approx(63.0)
    assert slower.path.gpu_us == pytest.approx(63.0 - 10.0 - 15.0)  # after the 10 µs gap and 15 µs latency
    # projected: the gap 10 loses the mark's 2 µs, the launch 10 -> 8 and g1's latency 15 -> 13:
    # g1 [21, 26], g2 [27, 32], g3 [33, 41]; the CPU ends at 8 + 8 + tail 30 = 46
    assert project(graph, C2, launches=FIVE_US).span_us == pytest.approx(46.0)
    # a graph launch is no kernel launch call: nothing to scale by, the fallback 2.5 µs per event and per
    # call: gap 7.5, launch 7.5, latency 12.5: g1 [20, 25], g2 [26, 31], g3 [32, 40]; CPU 7.5 + 7.5 + 30
    assert launch_profile((graph,)) is None and FALLBACK_PER_EVENT_US == 2.5
    assert project(graph, C2).span_us == pytest.approx(45.0)


def test_two_streams_keep_their_own_order(tmp_path):
    """Stream 7: L1 10+5 -> A1 [20, 50], L2 20+5 -> A2 [51, 61]; stream 9: L3 30+5 -> B1 [40, 45],
    L4 40+5 -> B2 [50, 70]; the mark ends at 60, the step at 70 (B2)."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 60)
    b.launch(10, 5, "a1", 20, 30)
    b.launch(20, 5, "a2", 51, 10)
    b.launch(30, 5, "b1", 40, 5, stream=9)
    b.launch(40, 5, "b2", 50, 20, stream=9)
    graph = graph_of(b, tmp_path, "two_streams")
    assert replay(graph).span_us == pytest.approx(70.0)
    assert replay(graph).gpu_busy_us == pytest.approx(50.0)  # [20, 70] is covered
    # A1 twice as long: A2 follows it on stream 7 ([81, 91]); stream 9 does not move
    slower = replay(graph, with_gpu_durations(graph, {"20": 60.0}))
    assert slower.span_us == pytest.approx(91.0)
    assert slower.gpu_busy_us == pytest.approx(60.0 + 10.0)  # [20, 80] and [81, 91]


def test_queue_full_launch_waits_for_the_gpu(tmp_path):
    """Mark [0, 230]: L1 0+5 -> K1 [10, 200]; L2 20+5 -> K2 [201, 211]; L3 30+175 returns at 205,
    5 µs after K1 ends (the launch queue was full) -> K3 [211, 221]."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 230)
    b.launch(0, 5, "k1", 10, 190)
    b.launch(20, 5, "k2", 201, 10)
    b.launch(30, 175, "k3", 211, 10)
    graph = graph_of(b, tmp_path, "queue_full")
    assert graph.call_role.tolist() == [ROLE_LAUNCH, ROLE_LAUNCH, ROLE_QUEUE]
    assert graph.wait_nodes[graph.wait_ptr[2]:graph.wait_ptr[3]].tolist() == [0]  # released by K1's end
    assert (graph.call_own_us[2], graph.call_tail_us[2]) == pytest.approx((5.0, 5.0))
    assert replay(graph).span_us == pytest.approx(230.0)
    # K1 half as long (ends 105): L3 returns at 110, the tail of 25 ends the step at 135; K2 [106, 116],
    # K3 [116, 126]; a model that kept the 175 µs call would have ended at 230 again
    faster = replay(graph, with_gpu_durations(graph, {"10": 95.0}))
    assert faster.span_us == pytest.approx(135.0)
    assert faster.gpu_end_us == pytest.approx(126.0)
    # its launch calls 5, 5, 175 µs: fast (10th percentile) 5, median 5, so 2 µs per event and launch;
    # the projection keeps the wait instead of shrinking the call: launches 5 -> 3, so L1 [0, 3],
    # K1's latency 10 -> 8: K1 [8, 198]; L3 returns 5 µs after it (203) and the tail of 25 ends at 228
    projected = project(graph, C2)
    assert projected.span_us == pytest.approx(228.0)


def test_a_thread_that_waited_for_another_follows_it(tmp_path):
    """Main thread 100: op at 2, L1 10+5 -> K1 [20, 25], idle until L3 300+5 -> K3 [310, 315], mark [0, 400].
    Engine thread 200: L2 215+5 -> K2 [225, 230], idle before it (backward after the forward)."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 400)
    b.op("aten::ones_like", 2, 3)
    b.launch(10, 5, "k1", 20, 5)
    b.launch(215, 5, "k2", 225, 5, tid=200)
    b.launch(300, 5, "k3", 310, 5)
    graph = graph_of(b, tmp_path, "two_threads")
    by_start = np.argsort(graph.call_ts_us)  # L1, L2, L3
    anchors = graph.call_anchor[by_start]
    assert anchors[0] == -1 and anchors[1] == by_start[0] and anchors[2] == by_start[1]
    assert graph.call_anchor_gap_us[by_start].tolist() == pytest.approx([0.0, 200.0, 80.0])
    assert replay(graph).span_us == pytest.approx(400.0)
    # L2 takes 50 µs instead of 5: L3 starts 80 µs after it ends (265 + 80), the tail of 95 ends at 445
    dur = graph.call_dur_us.copy()
    dur[by_start[1]] = 50.0
    assert replay(graph, ReplayCosts(call_dur_us=dur)).span_us == pytest.approx(445.0)


def test_gate_abstains_when_a_kernel_waits_for_something_unnamed(tmp_path):
    """Three steps of 100 µs (marks end 60 µs in): k1..k3 start 7 µs after their launches on stream 7;
    k4 on idle stream 9 starts 70 µs after its launch (an event on another stream, say) and ends the
    step at +95. Capped at the typical 7 + 2 µs latency, k4 ends at +34: the CPU end (+60) closes the
    step, 35 µs short of the traced 95 (37 %)."""
    b = TraceBuilder()
    for t in (0, 100, 200):
        b.annotation(f"ProfilerStep#{t // 100 + 1}", t, 60)
        for k in range(3):
            b.launch(t + 2 + 5 * k, 4, f"k{k + 1}", t + 9 + 5 * k, 2)
        b.launch(t + 20, 5, "k4", t + 90, 5, stream=9)
    rank = tracekit.load_trace(b.write(tmp_path / "unnamed.json")).rank()
    gate = fidelity(rank, plan_steps(rank, ALL_STEPS))
    assert gate.exact_error == pytest.approx(0.0, abs=1e-9)
    assert [r.span_us for r in gate.replays] == pytest.approx([60.0, 65.0, 65.0])  # windows of 95, 100, 100
    assert gate.median_error == pytest.approx(35.0 / 100.0)
    assert not gate.trusted
    assert gate.reason.startswith("replay 35% off: 25% of the GPU activities start later than their launch explains")


def test_launch_profile_pools_the_kernel_launch_calls_of_the_steps(tmp_path):
    """Two steps of 100 µs. Step 1: kernel launches of 4 and 10 µs, a cudaMemcpyAsync of 30 µs; step 2:
    kernel launches of 6 and 8 µs, a cudaGraphLaunch of 50 µs. Pooled kernel launch calls: 4, 6, 8, 10."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 100)
    b.launch(10, 4, "k1", 20, 2)
    b.launch(30, 10, "k2", 45, 2)
    b.launch(50, 30, "copy", 85, 2, api="cudaMemcpyAsync", kind="memcpy")
    b.annotation("ProfilerStep#2", 100, 100)
    b.launch(110, 6, "k3", 120, 2)
    b.launch(130, 8, "k4", 140, 2)
    b.launch(150, 50, "g1", 205, 2, api="cudaGraphLaunch")
    rank = tracekit.load_trace(b.write(tmp_path / "pooled.json")).rank()
    plan = plan_steps(rank, ALL_STEPS)
    steps = project_steps(rank, plan)
    # numpy's 10th percentile of 4, 6, 8, 10: 4 + 0.3 × (6 - 4) = 4.6; the median (6 + 8) / 2 = 7
    expected = LaunchProfile(fast_us=pytest.approx(4.6), median_us=pytest.approx(7.0), count=4)
    assert [s.launches for s in steps] == [expected, expected]
    # the default: 3.75 × (4.6 - 3.85) = 2.8125 µs per recorded event, launch calls lose 7 - 3 = 4 µs
    assert DEFAULT_OVERHEAD.per_event_us(steps[0].launches) == pytest.approx(2.8125)
    assert [s.per_event_us for s in steps] == pytest.approx([2.8125, 2.8125])
    assert DEFAULT_OVERHEAD.launch_excess_us(steps[0].launches) == pytest.approx(4.0)
    # a profiler that recorded launches as fast as launch_free_us costs nothing per event
    assert DEFAULT_OVERHEAD.per_event_us(LaunchProfile(3.5, 4.0, 10)) == 0.0
    # the range: a larger scale removes more, so the low end comes from the high scale
    assert all(s.projected_low_us <= s.projected_span_us <= s.projected_high_us for s in steps)
