"""Rule graph_breaks (torch.compile graph breaks) and its detector on synthetic traces."""

from __future__ import annotations

import numpy as np
import pytest
from shared_analysis import analysed_file
from tracebuilder import TraceBuilder

import tracekit
from tracekit.analyzers import analyze, step_parts
from tracekit.analyzers.detectors import compiled as cd
from tracekit.suggestions import rules_compile
from tracekit.suggestions.rules import RULES_BY_ID

STEP_US = 3000.0


ENGINE_TID = 200  # the autograd engine's thread in the traces with a backward


def break_trace(tmp_path, broken: bool = True, steps: int = 3, name: str = "breaks.json", backward: bool = False):
    """`steps` steps of STEP_US, each (t0 = the step's start): a cache lookup t0+10 (20 µs) and region
    "0/0" t0+30 → t0+1500 holding graph A (annotation t0+40 → t0+240, its launch at t0+50 of a 400 µs
    kernel t0+60 → t0+460). With `broken`: aten::item t0+250 (260 µs) holding _local_scalar_dense, whose
    cudaStreamSynchronize t0+260 → t0+470 waits for that kernel; then a second lookup t0+560 (30 µs) and
    region "1/0" t0+600 → t0+1400 (nested in 0/0) holding graph B (t0+620 → t0+920, its launch at t0+650
    of a 200 µs kernel t0+660 → t0+860). Without: graph B's launch and kernel at the same times, inside
    graph A's region and after its annotation, with no lookup, region or item between them. With
    `backward`: on thread ENGINE_TID two compiled backward graphs, t0+1600 → t0+1900 (launches at
    t0+1620 and t0+1700, 10 µs each) and t0+2100 → t0+2400 (launches at t0+2250 and t0+2300)."""
    b = TraceBuilder()
    for step in range(1, steps + 1):
        t0 = STEP_US * (step - 1)
        b.annotation(f"ProfilerStep#{step}", t0, STEP_US)
        b.op(cd.LOOKUP, t0 + 10, 20)
        b.op("Torch-Compiled Region: 0/0", t0 + 30, 1470)
        b.annotation("## Call CompiledFxGraph aaaa ##", t0 + 40, 200)
        b.launch(t0 + 50, 5, "triton_poi_fused_add_0", t0 + 60, 400)
        if broken:
            b.op("aten::item", t0 + 250, 260)
            b.op("aten::_local_scalar_dense", t0 + 255, 250)
            b.raw({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": b.pid, "tid": b.tid,
                   "ts": t0 + 260, "dur": 210, "args": {"correlation": 99000 + step}})
            b.op(cd.LOOKUP, t0 + 560, 30)
            b.op("Torch-Compiled Region: 1/0", t0 + 600, 800)
            b.annotation("## Call CompiledFxGraph bbbb ##", t0 + 620, 300)
        b.launch(t0 + 650, 5, "triton_poi_fused_mul_1", t0 + 660, 200)
        if backward:
            for start, launches in ((1600, (1620, 1700)), (2100, (2250, 2300))):
                b.op(cd.BACKWARD_GRAPH, t0 + start, 300, tid=ENGINE_TID)
                for at in launches:
                    b.launch(t0 + at, 10, "triton_poi_fused_bw", t0 + at + 20, 30, tid=ENGINE_TID)
    return b.write(tmp_path / name)


def test_detector_counts_regions_and_finds_the_break(tmp_path):
    a = analyze(tracekit.load_trace(break_trace(tmp_path)))
    p = a.ranks[0].patterns
    # two lookups and two regions (frames 0 and 1, first compile of each) in every step
    assert p.compiled[cd.CR_REGIONS].tolist() == [2, 2, 2]
    assert p.compiled[cd.CR_LOOKUPS].tolist() == [2, 2, 2]
    assert p.compiled[cd.CR_FRAMES].tolist() == [2, 2, 2]
    assert p.compiled[cd.CR_RECOMPILED].tolist() == ["", "", ""]
    row = p.graph_breaks.iloc[0]
    # graph A ends at t0+240, graph B starts at t0+620: 380 µs of host time, 210 of them in the sync;
    # GPU: kernel A busy t0+240 → t0+460, then idle until kernel B at t0+660: 200 µs idle
    ops = tracekit.load_trace(break_trace(tmp_path)).rank().ops
    t0 = float(ops.loc[ops["name"] == cd.LOOKUP, "ts"].min()) - 10  # table times are relative to the file's origin
    assert (row[cd.GB_START] - t0, row[cd.GB_END] - t0, row[cd.GB_HOST_US]) == (240.0, 620.0, 380.0)
    assert row[cd.GB_SYNC_US] == pytest.approx(210.0)
    assert row[cd.GB_GUARD_US] == pytest.approx(30.0)  # the second lookup, t0+560 → t0+590
    assert row[cd.GB_GPU_IDLE_US] == pytest.approx(200.0)
    assert row[cd.GB_OPS] == "aten::item, aten::_local_scalar_dense"
    # what merging removes: from graph A's last launch (ends t0+55) to graph B's first launch (t0+650)
    assert (row[cd.GB_CPU_START] - t0, row[cd.GB_CPU_END] - t0) == (55.0, 650.0)
    assert len(p.graph_breaks) == 3 and p.break_thread.all()


def test_rule_fires_with_the_op_at_the_break(tmp_path):
    a = analyze(tracekit.load_trace(break_trace(tmp_path)))
    s = rules_compile.graph_breaks(a)
    steps = a.totals.steps
    assert s.per_step_us == pytest.approx(200.0)  # the 200 µs GPU idle across each break
    assert s.saving_us == pytest.approx(200.0 * steps)
    assert "1 break per step between 2 compiled regions (2 cache lookups), at aten::item" in s.title
    row = s.evidence[0]
    assert (row["host_us_per_break"], row["sync_us_per_break"], row["guard_us_per_break"]) == \
        pytest.approx((380.0, 210.0, 30.0))
    # the diff target: the host time between the graphs, per step
    target = RULES_BY_ID["graph_breaks"].target
    assert target.measure(a, step_parts.steady(a)) == pytest.approx(380.0)


def test_recompiles_are_named(tmp_path):
    path = break_trace(tmp_path)
    text = path.read_text().replace("Torch-Compiled Region: 1/0", "Torch-Compiled Region: 1/2")
    path.write_text(text)
    s = rules_compile.graph_breaks(analyze(tracekit.load_trace(path)))
    assert s.title.endswith("; recompiled frames 1/2")


def test_silent_without_a_break(tmp_path):
    a = analyze(tracekit.load_trace(break_trace(tmp_path, broken=False)))
    assert a.ranks[0].patterns.compiled[cd.CR_REGIONS].tolist() == [1, 1, 1]
    assert not len(a.ranks[0].patterns.graph_breaks)
    assert rules_compile.graph_breaks(a) is None


def test_saving_is_a_whatif_replay_of_the_merged_regions(tmp_path):
    result = analysed_file(break_trace(tmp_path))
    s = {x.id: x for x in result.suggestions}["graph_breaks"]
    assert "what-if replay" in s.whatif
    # merge_breaks removes the traced stretch t0+55 → t0+650 from the main thread (graph A's last launch
    # to graph B's first): the sync's 205 µs gap, the 210 µs sync, launch B's 180 µs gap (595 µs traced).
    # The step is CPU-bound (its end is the step mark), so it shortens by what the projection left of
    # those 595 µs: less than 595, more than the 200 µs GPU idle the traced estimate counts
    assert 200.0 < s.per_step_us < 595.0
    fixed = analysed_file(break_trace(tmp_path, broken=False, name="fixed.json"))
    assert "graph_breaks" not in {x.id for x in fixed.suggestions}


def test_applied_when_the_breaks_go(tmp_path):
    from tracekit.compare.applied import applied
    before = analyze(tracekit.load_trace(break_trace(tmp_path)))
    after = analyze(tracekit.load_trace(break_trace(tmp_path, broken=False, name="fixed.json")))
    got = applied("graph_breaks", before, after)  # 1 break per step → 0
    assert got.applied is True and got.evidence == "graph breaks per step 1.0 → 0.0"
    assert applied("graph_breaks", before, before).applied is False


def test_a_cuda_graph_keeps_the_breaks(tmp_path):
    """mode="reduce-overhead" captures one graph per compiled region: the what-if of a CUDA graph leaves
    the stretch of each break alone (launch B's 180 µs gap lies inside it and stays), merging the
    regions removes it."""
    from tracekit.model.whatif import cuda_graph, merge_breaks
    from tracekit.suggestions.whatif import _breaks
    result = analysed_file(break_trace(tmp_path))
    model, rank = result.models[0], result.analysis.ranks[0]
    breaks = _breaks(rank)
    assert breaks is not None and len(breaks.starts) == 3
    none = np.zeros(len(rank.classification.table), dtype=bool)
    spanning = model.what_if(cuda_graph(none)).saving_us
    per_region = model.what_if(cuda_graph(none, breaks)).saving_us
    merged = model.what_if(merge_breaks(breaks)).saving_us
    # each break holds the `.item()` sync, and a graph cannot hold a sync: even the graph told nothing
    # of the breaks ends at the sync and opens again at launch B after its 180 µs gap, so the two
    # come out equal; merging the regions removes that stretch, a graph cannot
    assert 0.0 <= per_region == pytest.approx(spanning)
    assert merged > per_region


def test_backward_graphs_of_a_broken_step_merge_too(tmp_path):
    """Merging two forward graphs merges their backward graphs: the stretch from the first backward
    graph's last launch (t0+1700 → t0+1710) to the second's first launch (t0+2250) is removed too."""
    trace = tracekit.load_trace(break_trace(tmp_path, backward=True))
    p = analyze(trace).ranks[0].patterns
    ops = trace.rank().ops
    t0s = ops.loc[ops["name"] == cd.LOOKUP, "ts"].to_numpy()[::2] - 10  # each step's first lookup at t0+10
    back = p.backward_breaks
    assert back[cd.BB_TID].tolist() == [ENGINE_TID] * 3 and back[cd.BB_STEP].tolist() == [1, 2, 3]
    assert (back[cd.BB_CPU_START].to_numpy() - t0s).tolist() == [1710.0] * 3
    assert (back[cd.BB_CPU_END].to_numpy() - t0s).tolist() == [2250.0] * 3
    rt = trace.rank().runtime
    assert p.break_thread.tolist() == [True] * len(rt)  # both threads' calls can lie in a break
    # the what-if's stretches: the three forward breaks' (t0+55 → t0+650) and the three backward ones
    from tracekit.suggestions.whatif import _breaks
    stretches = _breaks(analyze(trace).ranks[0])
    assert stretches is not None
    assert sorted((stretches.ends - stretches.starts).tolist()) == [540.0] * 3 + [595.0] * 3


def test_no_backward_stretch_without_a_forward_break(tmp_path):
    p = analyze(tracekit.load_trace(break_trace(tmp_path, broken=False, backward=True))).ranks[0].patterns
    assert not len(p.graph_breaks) and not len(p.backward_breaks)
