"""Device syncs list only the streams with work newer than the previous device sync of their thread
and inherit what that one awaited: n syncs over m streams list O(n + m) nodes (they listed the
latest node of every stream each, n·m: 449 MB for a 24 MB trace of 3,600 streams), with the same
replay, also when a what-if removes the earlier sync's wait."""

from __future__ import annotations

import numpy as np
from tracebuilder import TraceBuilder

import tracekit
from tracekit.analyzers.step_plan import plan_steps
from tracekit.analyzers.step_selection import ALL_STEPS
from tracekit.model import ReplayCosts, replay, step_graph
from tracekit.model.graph import StepGraph
from tracekit.model.replay import replay_points


def three_syncs(tmp_path) -> StepGraph:
    """Step [0, 200]: L1 10+5 -> K1 on stream 7 [20, 60]; L2 16+2 -> K2 on stream 8 [22, 50]; device
    sync A [20, 61] (waits for K1); device sync B [70, 72] (nothing new); L3 80+2 -> K3 on stream 7
    [85, 95]; device sync C [90, 96] (waits for K3)."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 200)
    b.launch(10, 5, "k1", 20, 40, stream=7)
    b.launch(16, 2, "k2", 22, 28, stream=8)
    b.launch(20, 41, None, 0, 0, api="cudaDeviceSynchronize")
    b.launch(70, 2, None, 0, 0, api="cudaDeviceSynchronize")
    b.launch(80, 2, "k3", 85, 10, stream=7)
    b.launch(90, 6, None, 0, 0, api="cudaDeviceSynchronize")
    rank = tracekit.load_trace(b.write(tmp_path / "syncs.json")).rank()
    return step_graph(rank, plan_steps(rank, ALL_STEPS), 0)


def test_each_sync_lists_only_newer_work_and_inherits_the_rest(tmp_path) -> None:
    g = three_syncs(tmp_path)
    # calls by time on the one thread: L1, L2, A, B, L3, C; GPU nodes by start: K1, K2, K3
    assert g.n_calls == 6 and g.n_gpu == 3
    start = g.gpu_ts_us - g.gpu_ts_us.min()
    k1, k2, k3 = (int(np.flatnonzero(np.isclose(start, t))[0]) for t in (0.0, 2.0, 65.0))
    lists = [g.wait_nodes[g.wait_ptr[i]:g.wait_ptr[i + 1]].tolist() for i in (2, 3, 5)]
    assert lists == [[k1, k2], [], [k3]]  # A: streams 7 and 8; B: nothing newer; C: stream 7's new kernel
    assert g.call_wait_inherit.tolist() == [-1, -1, -1, 2, -1, 3]  # B inherits A's wait, C B's


def test_replay_unchanged_and_a_removed_wait_passes_to_the_next_sync(tmp_path) -> None:
    g = three_syncs(tmp_path)
    traced = replay(g)
    assert abs(traced.error) < 1e-9  # the recorded costs give the traced step back
    a = 2
    a_start = float(g.call_ts_us[a])
    nowait = np.zeros(g.n_calls, dtype=bool)
    nowait[a] = True
    dur = g.call_dur_us.copy()
    dur[a] = 1.0
    points = replay_points(g, ReplayCosts(call_nowait=nowait, call_dur_us=dur))
    # A ends 1 µs after its start (20 -> 21); B starts its recorded 9 µs later (A ended at 61, B began
    # at 70): 30; B still waits for K1, which ends at 60 (and K2 at 50): B ends at 60, not at 30 + 2
    assert points.call_end[a] - a_start == 1.0
    assert points.call_start[3] - a_start == 10.0
    assert points.call_end[3] - a_start == 40.0
