"""What-if savings: each change replayed on the projected unprofiled steps, by hand and against H200 measurements."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest
from conftest import SAMPLE_TRACES
from shared_analysis import analysed_file
from tracebuilder import TraceBuilder

import tracekit
from tracekit.model.whatif import GRAPH_GAP_US, GRAPH_LAUNCH_US
from tracekit.pipeline.local import LocalResult

ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>"


@cache
def _sample(path: Path) -> LocalResult:
    """A sample trace analysed once for the whole module (several tests read the same ones; read only)."""
    return analysed_file(path)


@pytest.fixture(autouse=True, scope="module")
def _forget_samples():
    yield
    _sample.cache_clear()  # the analyses are not kept for the rest of the suite


def launch_loop(path, steps: int = 2, launches: int = 20):
    """Steps of 1000 µs: `launches` launch calls of 5 µs every 45 µs from step + 10 µs, each kernel
    10 µs long starting 10 µs after its call; nothing else recorded but the step marks."""
    b = TraceBuilder()
    for k in range(steps):
        t = 1000.0 * k
        b.annotation(f"ProfilerStep#{k + 1}", t, 1000.0)
        for i in range(launches):
            at = t + 10.0 + 45.0 * i
            b.launch(at, 5.0, ELEMENTWISE, at + 10.0, 10.0)
    return b.write(path)


def test_cuda_graph_what_if_by_hand(tmp_path):
    result = analysed_file(launch_loop(tmp_path / "loop.json"))
    (s,) = [x for x in result.suggestions if x.id == "cuda_graphs"]
    # Projected (DEFAULT_OVERHEAD): the fast launch is 5 µs, so a recorded CPU event costs
    # 3.75 × (5 − 3.85) = 4.3125 µs; the first gap (10 µs) holds the step mark: 5.6875 µs; launches
    # keep 3 µs (the 3 µs floor; median 5 − 3 = 2 µs lost, and the kernels' 10 µs latency loses the
    # same: 8 µs); the 40 µs gaps hold nothing. CPU: 5.6875 + 19 × 43 + 3 = 825.6875, + the 130 µs
    # tail to the mark's end = 955.6875 µs; the GPU ends at 5.6875 + 19 × 43 + 8 + 10 = 840.6875.
    u = result.analysis.unprofiled
    assert u.step_us == pytest.approx(955.6875)
    # A graph: every launch and the gaps between them gone but the first call's 5.6875 µs gap (the
    # Python before the graph launch stays), one graph launch of 10 µs, kernels GRAPH_GAP_US after
    # their (now instant) call, back to back: the GPU ends at 5.6875 + 0.5 + 20 × 10 = 206.1875 µs,
    # the CPU at 5.6875 + 10 + 130 = 145.6875 µs.
    assert (GRAPH_LAUNCH_US, GRAPH_GAP_US) == (10.0, 0.5)
    assert s.per_step_us == pytest.approx(955.6875 - 206.1875)
    assert s.saving_us == pytest.approx(2 * (955.6875 - 206.1875))
    traced = next(x for x in tracekit.suggest(tracekit.analyze(tracekit.load_trace(tmp_path / "loop.json")))
                  if x.id == "cuda_graphs")
    assert s.traced_saving_us == traced.saving_us  # the rule's own estimate on the traced timeline, kept
    assert s.combined_us == pytest.approx(s.saving_us)  # the first suggestion: combined with nothing above


def test_no_saving_exceeds_the_projected_step():
    """On every sample trace the model projects, a suggestion saves at most the projected step."""
    checked = 0
    for path in sorted(SAMPLE_TRACES.glob("*.trace.json.gz")):
        result = _sample(path)
        u = result.analysis.unprofiled
        if u is None or not u.trusted:
            continue
        for s in result.suggestions:
            assert s.per_step_us is not None and s.per_step_us <= u.step_us + 1e-6, (path.name, s.id)
            if s.combined_us is not None:
                assert s.combined_us <= u.projected.span_us + 1e-6
            checked += 1
    assert checked >= 15


# (before trace, rule, measured unprofiled step before and after, ms, and where they were measured):
# H200, the fix applied by hand, each timed without any profiler.
MEASURED_FIXES = (
    ("train_dataloader", "dataloader_workers", 41.39, 7.54, "docs/validation.md, steady-state table"),
    ("train_copies", "pinned_memory", 15.45, 6.97, "docs/validation.md, steady-state table"),
    ("train_sync", "avoid_sync", 12.13, 9.61, "docs/validation.md, steady-state table"),
    ("train_optimizer_loop", "fused_optimizer", 56.114, 25.5, "docs/measurements/optimizer_pairs.json, run 1"),
    ("gpt2_decode", "cuda_graphs", 6.603, 0.913, "docs/measurements/pairs.json, run 1"),
    ("small_matmul_loop", "cuda_graphs", 4.573, 0.822, "docs/measurements/pairs.json, run 1"),
    ("small_matmul_loop", "batch_bmm", 4.573, 0.020, "docs/measurements/pairs.json, run 1"),
)


@pytest.mark.parametrize("stem, rule, before_ms, after_ms, source", MEASURED_FIXES)
def test_what_if_saving_against_the_measured_fix(stem, rule, before_ms, after_ms, source):
    """The what-if saving of the rule the fix answers is within ±35 % of the measured unprofiled saving."""
    result = _sample(SAMPLE_TRACES / f"{stem}.trace.json.gz")
    (s,) = [x for x in result.suggestions if x.id == rule]
    measured = (before_ms - after_ms) * 1000.0
    assert s.per_step_us == pytest.approx(measured, rel=0.35), source
    assert s.whatif.startswith("what-if replay")


def test_the_first_suggestion_is_the_fix_that_was_measured():
    """Where one fix was measured, the model ranks it first."""
    # (not train_sync: its fp32 GEMMs with bf16 would save more than the sync, a change not measured there)
    for stem, rule in (("train_dataloader", "dataloader_workers"), ("train_copies", "pinned_memory"),
                       ("train_optimizer_loop", "fused_optimizer"), ("gpt2_decode", "cuda_graphs")):
        result = _sample(SAMPLE_TRACES / f"{stem}.trace.json.gz")
        assert result.suggestions[0].id == rule, stem


def test_abstaining_model_keeps_traced_savings(tmp_path):
    """No step marks: the model abstains, the verdict and savings are the traced ones."""
    b = TraceBuilder()
    for it in range(8):  # the same three ops each iteration: the steps are inferred from the sequence
        t = 1000.0 * it
        for j, op in enumerate(("aten::mul", "aten::add", "aten::relu")):
            at = t + 10.0 + 45.0 * j
            b.op(op, at, 20.0)
            b.launch(at + 5.0, 5.0, ELEMENTWISE, at + 15.0, 10.0)
    result = analysed_file(b.write(tmp_path / "nomarks.json"))
    u = result.analysis.unprofiled
    assert u is not None and not u.trusted and "no ProfilerStep marks" in u.abstained[0][1]
    assert result.analysis.verdict == result.analysis.totals.verdict
    assert all(s.traced_saving_us is None for s in result.suggestions)
    assert tracekit.analyse_trace is not None


def test_silent_below_two_percent_of_the_projected_step():
    """train_sync: pinned_memory's check fires on the traced timeline (its copies are pageable), but its
    what-if saves 0.76 % of the projected step: under SILENT_BELOW_PCT (2 %), so it is not shown."""
    from tracekit.suggestions import whatif
    from tracekit.suggestions.common import SILENT_BELOW_PCT
    from tracekit.suggestions.rules import RULES_BY_ID

    result = _sample(SAMPLE_TRACES / "train_sync.trace.json.gz")
    raw = RULES_BY_ID["pinned_memory"].run(result.analysis)
    assert raw is not None
    (priced,) = whatif.price(result.analysis, [raw], result.models) or [None]  # type: ignore[list-item]
    assert priced is None  # price() drops it
    assert SILENT_BELOW_PCT == 2.0 and "pinned_memory" not in {s.id for s in result.suggestions}
    assert all(s.saving_pct >= SILENT_BELOW_PCT for s in result.suggestions)


def test_a_sync_ends_the_graph(tmp_path):
    """The launch loop with a cudaStreamSynchronize after the 10th launch (until its kernel ends): a
    graph cannot hold the sync, so the what-if replays two graphs, each opened by one graph launch
    after the host gap before it (the stretch from the sync's return to the 11th launch stays), the
    other 18 launch calls free."""
    import numpy as np

    from tracekit.model.graph import ROLE_SYNC
    from tracekit.model.whatif import cuda_graph
    b = TraceBuilder()
    for k in range(2):
        t = 1000.0 * k
        b.annotation(f"ProfilerStep#{k + 1}", t, 1000.0)
        for i in range(20):
            at = t + 10.0 + 45.0 * i
            b.launch(at, 5.0, ELEMENTWISE, at + 10.0, 10.0)
            if i == 9:  # after the 10th launch (at t + 415, kernel t + 425 → t + 435): sync to t + 436
                b.raw({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": b.pid,
                       "tid": b.tid, "ts": at + 6.0, "dur": 15.0, "args": {"correlation": 70000 + k}})
    result = analysed_file(b.write(tmp_path / "synced.json"))
    model, rank = result.models[0], result.analysis.ranks[0]
    step = model.steps[0]
    g = step.graph
    costs = cuda_graph(np.zeros(len(rank.classification.table), dtype=bool))(step)
    heads = np.flatnonzero(costs.call_dur_us == GRAPH_LAUNCH_US)
    sync = int(np.flatnonzero(g.call_role == ROLE_SYNC)[0])
    # two graph launches: the step's first launch call and the first one after the sync
    assert len(heads) == 2 and heads[1] == sync + 1
    before_gap = step.costs.call_gap_us if step.costs.call_gap_us is not None else g.call_gap_us
    assert costs.call_gap_us[heads[1]] == before_gap[heads[1]]  # the Python before it stays
    launches = np.flatnonzero(np.isin(np.arange(g.n_calls), g.gpu_launch))
    others = np.setdiff1d(launches, heads)
    assert len(others) == 18 and (costs.call_dur_us[others] == 0.0).all()


def test_fuse_region_takes_one_factor_per_gpu_row(tmp_path):
    """fuse_region with a factor per rank.gpu row (cudnn_rnn, concat_embeddings): launch_loop's 20 launches
    of one step collapsed to one call of 3 µs after the first call's projected 5.6875 µs gap; the kernels
    follow it by the projected 8 µs latency (test_cuda_graph_what_if_by_hand), back to back. All × 0.9, or
    the even rows × 0.8 and the odd × 1.0, is 180 µs of GPU time either way: the GPU ends at
    5.6875 + 8 + 180 = 193.6875 µs, after the CPU (5.6875 + 3 + the 130 µs tail); all × 1.0: 213.6875."""
    import numpy as np

    from tracekit.model.whatif import fuse_region

    result = analysed_file(launch_loop(tmp_path / "loop.json", steps=1))
    (model,) = result.models
    n = len(result.analysis.ranks[0].classification.table)
    assert n == 20
    rows = np.ones(n, dtype=bool)
    after = {name: model.what_if(fuse_region(rows, f, 1, 3.0)).after_us  # type: ignore[union-attr]
             for name, f in (("scalar", 0.9), ("array", np.full(n, 0.9)),
                             ("mixed", np.where(np.arange(n) % 2 == 0, 0.8, 1.0)), ("whole", np.ones(n)))}
    assert after == pytest.approx({"scalar": 193.6875, "array": 193.6875, "mixed": 193.6875, "whole": 213.6875})


def test_fuse_region_whole_span_takes_the_calls_between_the_launches(tmp_path):
    """launch_loop (one step, 20 launches 45 µs apart) with a 2 µs cudaGetDevice 20 µs after each launch
    but the last (a library's query between a loop's launches): with whole_span, fuse_region removes the
    queries and the gaps before them too, so the replay is the loop's without queries
    (test_fuse_region_takes_one_factor_per_gpu_row: 193.6875 µs at factor 0.9); without it, each of the
    19 queries keeps its traced 20 µs gap less at most one recorded event's projected cost (4.3125 µs,
    test_cuda_graph_what_if_by_hand), and every later kernel waits behind them."""
    import numpy as np

    from tracekit.model.whatif import fuse_region

    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0.0, 1000.0)
    for i in range(20):
        at = 10.0 + 45.0 * i
        b.launch(at, 5.0, ELEMENTWISE, at + 10.0, 10.0)
        if i < 19:
            b.launch(at + 25.0, 2.0, None, 0.0, 0.0, api="cudaGetDevice")
    result = analysed_file(b.write(tmp_path / "queries.json"))
    (model,) = result.models
    rows = np.ones(len(result.analysis.ranks[0].classification.table), dtype=bool)
    spanned = model.what_if(fuse_region(rows, 0.9, 1, 3.0, whole_span=True))
    kept = model.what_if(fuse_region(rows, 0.9, 1, 3.0))
    assert spanned is not None and kept is not None
    assert spanned.after_us == pytest.approx(193.6875)
    assert kept.after_us > 193.6875 + 19 * (20.0 - 4.3125)


def test_pinned_copies_free_the_syncs_the_copy_issues(tmp_path):
    """copy_trace with the copy's op syncing for 150 µs after its memcpy call, and a later .item()
    sync: unblock_copies with Patterns.copy_syncs returns the copy's sync after its own part and lets
    it wait for nothing; the .item() sync keeps its duration and its wait. Without sync_rows the
    copy's sync still waits (the replay before this change)."""
    import numpy as np
    from test_suggestions_host import copy_trace

    from tracekit.analyzers.kernels import MEMCPY
    from tracekit.model.graph import ROLE_SYNC
    from tracekit.model.whatif import unblock_copies
    from tracekit.suggestions.whatif_evidence import class_rows

    result = analysed_file(copy_trace(tmp_path, copy_sync_us=150.0))
    model, rank = result.models[0], result.analysis.ranks[0]
    copies, mine = class_rows(rank, (MEMCPY,)), rank.patterns.copy_syncs
    step = model.steps[0]
    g = step.graph
    sync = np.flatnonzero(g.call_role == ROLE_SYNC)
    copy_sync = sync[mine[g.call_row[sync]]]
    other = sync[~mine[g.call_row[sync]]]
    assert len(copy_sync) == 1 and len(other) == 1
    freed = unblock_copies(copies, 0.2, 3.0, mine)(step)
    kept = unblock_copies(copies, 0.2, 3.0)(step)
    own = step.costs.call_own_us if step.costs.call_own_us is not None else g.call_own_us
    before = step.costs.call_dur_us if step.costs.call_dur_us is not None else g.call_dur_us
    assert freed.call_dur_us[copy_sync[0]] == own[copy_sync[0]] and freed.call_nowait[copy_sync[0]]
    assert freed.call_dur_us[other[0]] == before[other[0]] and not freed.call_nowait[other[0]]
    assert not kept.call_nowait[copy_sync[0]]


def test_reduce_overhead_graphs_only_the_compiled_calls(tmp_path):
    """A step of 20 launches, the 6th to 15th inside a compiled graph's call (a `Torch-Compiled Region`
    op and the `## Call CompiledFxGraph` annotation over them): the detector marks those 10 launch
    calls; the what-if with them as `only_calls` opens one graph at the 6th (GRAPH_LAUNCH_US), frees the
    other 9, and leaves the 10 eager launch calls at their durations."""
    import numpy as np

    from tracekit.model.whatif import cuda_graph
    b = TraceBuilder()
    for k in range(2):
        t = 1000.0 * k
        b.annotation(f"ProfilerStep#{k + 1}", t, 1000.0)
        b.op("Torch-Compiled Region: 0/0", t + 230.0, 450.0)
        b.annotation("## Call CompiledFxGraph abc ##", t + 235.0, 440.0)
        for i in range(20):
            at = t + 10.0 + 45.0 * i
            b.launch(at, 5.0, ELEMENTWISE, at + 10.0, 10.0)
    result = analysed_file(b.write(tmp_path / "compiled.json"))
    model, rank = result.models[0], result.analysis.ranks[0]
    inside = rank.patterns.in_compiled_graph
    # per step the launches at 10 + 45 i for i = 5..14 (235..640 after the step's start) are inside
    assert int(inside.sum()) == 20 and len(inside) == 40
    step = model.steps[0]
    g = step.graph
    costs = cuda_graph(np.zeros(len(rank.classification.table), dtype=bool), only_calls=inside)(step)
    launch_calls = np.flatnonzero(np.isin(np.arange(g.n_calls), g.gpu_launch))
    assert len(launch_calls) == 20
    dur = costs.call_dur_us[launch_calls]
    assert dur[5] == GRAPH_LAUNCH_US and (dur[6:15] == 0.0).all()
    before = step.costs.call_dur_us if step.costs.call_dur_us is not None else g.call_dur_us
    eager = np.r_[0:5, 15:20]
    assert (dur[eager] == before[launch_calls][eager]).all() and (dur[eager] > 0).all()
