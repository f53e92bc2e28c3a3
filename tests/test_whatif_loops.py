"""What-if transforms of foreach_loops (foreach_runs) and batch_requests (batch_forwards), by hand on the launch loop of test_whatif.py."""

from __future__ import annotations

import numpy as np
import pytest
from shared_analysis import analysed_file
from test_whatif import launch_loop

from tracekit.model.whatif import batch_forwards, foreach_runs


def _model(tmp_path):
    result = analysed_file(launch_loop(tmp_path / "loop.json"))
    (model,) = result.models
    rank = result.analysis.ranks[0]
    return result, model, len(rank.classification.table)


def test_foreach_runs_by_hand(tmp_path):
    """All 20 launch calls of each step as one per-tensor loop done by 2 multi-tensor launches over 20
    calls. Projected step (test_whatif.py, by hand): 955.6875 µs, the first call after a 5.6875 µs gap,
    kernels 8 µs after their call, a 130 µs tail. Replayed: the first call costs 2 × 3 + 20 × 0.5 = 16 µs,
    the other 19 nothing, with no gap: kernel 0 at 5.6875 + 8 = 13.6875 (ends 23.6875), the others
    launched at 21.6875 start at 29.6875 and run back to back: the GPU ends at 29.6875 + 19 × 10 =
    219.6875 µs, after the CPU (5.6875 + 16 + 130 = 151.6875 µs)."""
    result, model, n_gpu = _model(tmp_path)
    assert result.analysis.unprofiled.step_us == pytest.approx(955.6875)
    n_calls = len(result.analysis.ranks[0].patterns.foreach_calls)
    assert n_calls == 40  # two steps of 20 launch calls
    runs = np.concatenate([np.zeros(20, dtype=np.int64), np.ones(20, dtype=np.int64)])
    t = foreach_runs(runs, np.array([2.0, 2.0]), np.array([20.0, 20.0]), 3.0, 0.5, np.zeros(n_gpu, dtype=bool))
    out = model.what_if(t)
    assert out.saving_us / out.steps == pytest.approx(955.6875 - 219.6875)


def test_batch_forwards_by_hand(tmp_path):
    """k = 2 and kernels of unknown cost (no roof: each keeps its time): the host side halves (first gap
    2.84375, calls 1.5 µs, gaps 20 µs, tail 65 µs), the latencies stay: the CPU ends at 2.84375 +
    19 × 21.5 + 1.5 + 65 = 477.84375 µs, after the GPU (2.84375 + 19 × 21.5 + 8 + 10 = 429.34375)."""
    _, model, n_gpu = _model(tmp_path)
    t = batch_forwards(2.0, np.ones(n_gpu, dtype=bool), np.full(n_gpu, np.nan))
    out = model.what_if(t)
    assert out.saving_us / out.steps == pytest.approx(955.6875 - 477.84375)
    # a roof of 60 µs per kernel at 2× the work: each node takes its half, 30 µs, more than the 21.5 µs
    # between launches: back to back from the first (2.84375 + 8), the GPU ends at 10.84375 + 20 × 30 =
    # 610.84375 µs, after the CPU
    slow = model.what_if(batch_forwards(2.0, np.ones(n_gpu, dtype=bool), np.full(n_gpu, 60.0)))
    assert slow.saving_us / slow.steps == pytest.approx(955.6875 - 610.84375)


def test_composed_changes_keep_each_others_freed_calls(tmp_path):
    """The launch loop with a cudaStreamSynchronize after the 10th launch: no_syncs frees the sync, then
    foreach_runs over the 10 launches after it frees nothing of its own (launch calls do not wait);
    composed in either order the sync stays free (a later transform used to replace the mask)."""
    from test_whatif import ELEMENTWISE
    from tracebuilder import TraceBuilder

    from tracekit.model.graph import ROLE_SYNC
    from tracekit.model.whatif import compose, no_syncs

    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0.0, 1000.0)
    for i in range(20):
        b.launch(10.0 + 45.0 * i, 5.0, ELEMENTWISE, 20.0 + 45.0 * i, 10.0)
        if i == 9:
            b.raw({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": b.pid,
                   "tid": b.tid, "ts": 10.0 + 45.0 * i + 6.0, "dur": 15.0, "args": {"correlation": 70000}})
    result = analysed_file(b.write(tmp_path / "synced.json"))
    model, rank = result.models[0], result.analysis.ranks[0]
    step = model.steps[0]
    sync = int(np.flatnonzero(step.graph.call_role == ROLE_SYNC)[0])
    n_rt = len(rank.patterns.foreach_calls)
    runs = np.full(n_rt, -1, dtype=np.int64)
    runs[step.graph.call_row[sync + 1:]] = 0  # the calls after the sync: one loop
    loop = foreach_runs(runs, np.array([1.0]), np.array([10.0]), 3.0, 0.5, np.zeros(len(rank.classification.table), dtype=bool))
    for order in ([no_syncs(), loop], [loop, no_syncs()]):
        costs = compose(order)(step)
        assert costs.call_nowait is not None and bool(costs.call_nowait[sync])
