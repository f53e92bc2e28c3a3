"""Rule preprocess_off_thread and the sync / cpu_work split of GPU idle on synthetic traces."""

from __future__ import annotations

import pytest
from shared_analysis import analysed_file
from tracebuilder import TraceBuilder

import tracekit
from tracekit.analyzers import analyze, step_parts
from tracekit.analyzers.detectors import hostside as H
from tracekit.suggestions import rules_python
from tracekit.suggestions.rules import RULES_BY_ID

GEMM = "nvjet_sm90_tst_256x128_64x4_2x1_v_bz_coopA_NNN"
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def tokenize_trace(tmp_path, gap_us: float = 5000, step_us: float = 10000, loader: bool = False, ops: bool = True,
                   engine: str = "", engine_at: float = 100, engine_us: float = 4000):
    """Two steps of `step_us`, each (t0 = the step's start): a launch at t0 (5 µs) of a 1000 µs kernel
    (t0+10 → t0+1010), cudaDeviceSynchronize t0+20 → t0+1010 (the CPU waits 990 µs), then `gap_us` of host
    work with no runtime call (g0 = t0+1010 → g1 = g0+gap_us; with `ops`: aten::tensor g0+990 for 500 µs
    holding aten::empty, and a user annotation "tokenize" g0+1990 for 2000 µs; with `loader`: a DataLoader
    annotation covering the gap; with `engine`: that range from g0 + engine_at for engine_us), then a launch at g1 (5 µs) of a kernel from g1+20 to 10 µs before the
    step ends."""
    b = TraceBuilder()
    for step in (1, 2):
        t0 = step_us * (step - 1)
        b.annotation(f"ProfilerStep#{step}", t0, step_us)
        b.launch(t0, 5, GEMM, t0 + 10, 1000)
        b.raw({"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": b.pid, "tid": b.tid,
               "ts": t0 + 20, "dur": 990, "args": {"correlation": 99000 + step}})
        g0, g1 = t0 + 1010, t0 + 1010 + gap_us
        if ops:
            b.op("aten::tensor", g0 + 990, 500)
            b.op("aten::empty", g0 + 1090, 100)
            b.annotation("tokenize", g0 + 1990, 2000)
        if loader:
            b.annotation(LOADER, g0, gap_us)
        if engine:  # a framework range in the gap (autograd's backward node, optimizer.step)
            b.annotation(engine, g0 + engine_at, engine_us)
        b.launch(g1, 5, GEMM, g1 + 20, t0 + step_us - 10 - (g1 + 20))
    return b.write(tmp_path / "tokenize.json")


def test_fires_on_python_work_after_a_sync(tmp_path):
    a = analyze(tracekit.load_trace(tokenize_trace(tmp_path)))
    s = RULES_BY_ID["preprocess_off_thread"].run(a)  # the check, with its row's snippet
    # per step the host gap runs from the sync's end (t0+1010) to the next launch (t0+6010): 5000 µs, and the
    # GPU is idle through all of it (the first kernel ended at t0+1010, the next starts at t0+6030). The host
    # gap from that launch's end (t0+6015) to the next step's launch (t0+10000) holds the GPU busy
    # t0+6030 → t0+9990: idle 15 + 10 of 3985 µs, under half: not counted. 2 steps × 5000 µs, of 20000 µs.
    assert s.saving_us == pytest.approx(10000.0)
    assert s.saving_pct == pytest.approx(50.0)
    assert s.per_step_us == pytest.approx(5000.0)
    assert [(e["step"], e["gaps"], e["gap_us"], e["gpu_idle_us"]) for e in s.evidence] == [
        (1, 1, 5000.0, 5000.0), (2, 1, 5000.0, 5000.0)]
    row = s.evidence[0]
    # top-level: the annotation (2000 µs) before aten::tensor (500 µs); aten::empty is inside aten::tensor
    assert row["ran"] == "tokenize ×1 (2.00 ms), aten::tensor ×1 (0.50 ms)"
    assert row["recorded_op_us"] == pytest.approx(2500.0)
    assert row["after_sync"] == "cudaDeviceSynchronize (explicit)"
    assert "5.00 ms per step" in s.title and "tokenize" in s.title
    assert "num_workers=4" in s.snippet and "tokenizers" in s.snippet


def test_the_idle_after_the_sync_is_cpu_work_not_sync(tmp_path):
    a = analyze(tracekit.load_trace(tokenize_trace(tmp_path)))
    parts = step_parts.idle_parts(a, step_parts.steady(a))
    # GPU idle per step: t0 → t0+10 (the first launch returns at t0+5: late by 10, a launch gap), t0+1010 →
    # t0+6030 (5020 µs), t0+9990 → the step's end (10 µs, a launch gap: the next launch is no sync's). Of the
    # 5020 µs the sync's window (t0+20 → t0+6030) less the host gap (t0+1010 → t0+6010) leaves the launch
    # path t0+6010 → t0+6030: 20 µs of sync; the 5000 µs host gap is CPU work (was all sync before the split).
    assert parts["gpu_idle"] == pytest.approx(5040.0)
    assert parts["sync"] == pytest.approx(20.0)
    assert parts["cpu_work"] == pytest.approx(5000.0)
    assert parts["launch_gaps"] == pytest.approx(20.0)
    assert RULES_BY_ID["preprocess_off_thread"].target.measure(a, step_parts.steady(a)) == pytest.approx(5000.0)


def test_python_with_no_recorded_op(tmp_path):
    a = analyze(tracekit.load_trace(tokenize_trace(tmp_path, ops=False)))
    s = rules_python.preprocess_off_thread(a)
    assert s.evidence[0]["ran"] == rules_python.NO_OP and s.evidence[0]["recorded_op_us"] == 0.0
    assert "runs Python" in s.title


def test_silent_inside_a_dataloader_window(tmp_path):
    a = analyze(tracekit.load_trace(tokenize_trace(tmp_path, loader=True)))
    # the DataLoader annotation covers the whole 5000 µs gap: what is left of it is no host gap
    gaps = a.ranks[0].patterns.host_gaps
    assert gaps[H.HG_GPU_IDLE_US].astype(float).tolist() == pytest.approx([25.0])  # 6015 → 10000, GPU busy
    assert rules_python.preprocess_off_thread(a) is None
    assert RULES_BY_ID["dataloader_workers"].run(a).saving_us == pytest.approx(10000.0)  # its case
    parts = step_parts.idle_parts(a, step_parts.steady(a))
    assert (parts["data_loading"], parts["sync"], parts["cpu_work"]) == pytest.approx((5000.0, 20.0, 0.0))


@pytest.mark.parametrize("engine", ["autograd::engine::evaluate_function: torch::autograd::AccumulateGrad",
                                    "Optimizer.step#AdamW.step"])
def test_silent_where_the_gap_is_backward_or_the_optimizer(tmp_path, engine):
    # the same 5000 µs gap (the GPU idles through it: test_fires_on_python_work_after_a_sync) with a
    # 4000 µs autograd node or optimizer range inside (80 % ≥ ENGINE_COVER): that host work is the
    # framework's (per-parameter backward or optimizer loops: fused_optimizer, cuda_graphs), not
    # preprocessing a worker could take
    a = analyze(tracekit.load_trace(tokenize_trace(tmp_path, engine=engine)))
    # host gaps: each step's 5000 µs gap, and between them the 3985 µs of step 1's last kernel
    # (6005 → 9990: the GPU busy) that hold no framework range
    gaps = a.ranks[0].patterns.host_gaps
    assert gaps[H.HG_GAP_US].astype(float).tolist() == pytest.approx([5000.0, 3985.0, 5000.0])
    assert gaps[H.HG_IN_ENGINE].astype(bool).tolist() == [True, False, True]
    assert rules_python.preprocess_off_thread(a) is None
    plain = analyze(tracekit.load_trace(tokenize_trace(tmp_path)))
    assert plain.ranks[0].patterns.host_gaps[H.HG_IN_ENGINE].astype(bool).tolist() == [False, False, False]


def test_a_framework_range_at_the_edge_does_not_claim_the_gap(tmp_path):
    """optimizer.step's range ending 46 µs into the 5000 µs gap (its last launch opens the gap; the next
    batch's preprocessing fills the rest, as on the H200 numpy-augmentation workload) covers 0.9 % of it:
    the gap is the loop's, and the rule fires as on the plain trace (5000 µs per step)."""
    a = analyze(tracekit.load_trace(tokenize_trace(tmp_path, engine="Optimizer.step#SGD.step", engine_at=-200,
                                                   engine_us=246)))
    gaps = a.ranks[0].patterns.host_gaps
    assert gaps[H.HG_IN_ENGINE].astype(bool).tolist() == [False, False, False]
    s = rules_python.preprocess_off_thread(a)
    assert s is not None and s.saving_us == pytest.approx(10000.0)  # 2 steps × the 5000 µs the GPU idles


def test_silent_on_a_short_gap(tmp_path):
    """An 800 µs gap is no host gap (≤ 1 ms): the launch path, not preprocessing."""
    a = analyze(tracekit.load_trace(tokenize_trace(tmp_path, gap_us=800, step_us=6000, ops=False)))
    assert rules_python.preprocess_off_thread(a) is None


def test_silent_below_two_percent(tmp_path):
    """A 1100 µs gap in a 60 ms step: 1.83 % of the span, under PREPROCESS_MIN_PCT (2 %); 1300 µs: 2.17 %."""
    a = analyze(tracekit.load_trace(tokenize_trace(tmp_path, gap_us=1100, step_us=60000, ops=False)))
    assert len(a.ranks[0].patterns.host_gaps) >= 2
    assert rules_python.preprocess_off_thread(a) is None
    a = analyze(tracekit.load_trace(tokenize_trace(tmp_path, gap_us=1300, step_us=60000, ops=False)))
    assert rules_python.preprocess_off_thread(a).saving_us == pytest.approx(2600.0)


def test_saving_is_a_whatif_replay(tmp_path):
    s = {x.id: x for x in analysed_file(tokenize_trace(tmp_path)).suggestions}["preprocess_off_thread"]
    # The traced estimate: 5000 µs of GPU idle per step. The what-if replay (suggestions/whatif.py,
    # shorter_longest_gap) on the projected steps, by hand: the launch calls take 5 µs, the fast launch,
    # so each recorded CPU event costs 3.75 × (5 − 3.85) = 4.3125 µs (DEFAULT_OVERHEAD); the 5000 µs gap
    # from the sync's return to the next launch (the main thread's longest) holds 3 (aten::tensor,
    # aten::empty, the tokenize annotation): 5000 − 3 × 4.3125 = 4987.0625 µs projected. The change
    # shortens it by the 5000 µs traced, shrunk as the projection shrank it (× 4987.0625 / 5000): to 0,
    # and the GPU, idle through all of it, starts the next kernel that much earlier: 4987.0625 µs per step.
    assert s.traced_saving_us == pytest.approx(10000.0)
    assert s.per_step_us == pytest.approx(5000 - 3 * 4.3125)
    assert s.saving_us == pytest.approx(2 * (5000 - 3 * 4.3125))
    assert "what-if replay" in s.whatif


def test_applied_when_the_idle_while_the_cpu_works_halves(tmp_path):
    from tracekit.compare.applied import applied
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    before = analyze(tracekit.load_trace(tokenize_trace(tmp_path / "a")))
    after = analyze(tracekit.load_trace(tokenize_trace(tmp_path / "b", loader=True)))
    # before: 5000 µs per step of cpu_work (test_the_idle_after_the_sync_is_cpu_work_not_sync); after, the
    # same work inside a DataLoader window is data loading: 0 µs of cpu_work, a fall of more than half
    got = applied("preprocess_off_thread", before, after)
    assert got.applied is True and got.evidence == "GPU idle while the CPU works per step 5.00 ms → 0 µs"
    assert applied("preprocess_off_thread", before, before).applied is False


def two_gap_trace(tmp_path):
    """Two steps of 10000 µs, each (t0 = its start) preparing two batches on the training thread: a
    launch at t0 (5 µs) of a 1000 µs kernel (t0+10 → t0+1010) and cudaDeviceSynchronize until t0+1010;
    3000 µs of host work with no call (→ t0+4010); the same again from t0+4010 (kernel t0+4030 → t0+5030,
    synchronised), 3000 µs of host work (→ t0+8030), then a launch of a kernel until 10 µs before the end."""
    b = TraceBuilder()
    for step in (1, 2):
        t0 = 10000.0 * (step - 1)
        b.annotation(f"ProfilerStep#{step}", t0, 10000.0)
        for k, at in enumerate((t0, t0 + 4010)):
            b.launch(at, 5, GEMM, at + (10 if k == 0 else 20), 1000)
            end = at + (1010 if k == 0 else 1020)
            b.raw({"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": b.pid, "tid": b.tid,
                   "ts": at + 20, "dur": end - at - 20, "args": {"correlation": 99000 + 10 * step + k}})
        b.launch(t0 + 8030, 5, GEMM, t0 + 8050, 10000.0 - 10 - 8050)
    return b.write(tmp_path / "two_gaps.json")


def test_whatif_shortens_every_gap_the_gpu_waits_in(tmp_path):
    """Two 3000 µs host gaps per step, the GPU idle through both: the traced saving is 6000 µs per step;
    the what-if shortens the longest gap by what it holds (3000 µs, nothing recorded in it: the projection
    leaves it whole) and the next by the rest (3000 µs): 6000 µs per step (it stopped at the longest
    gap's 3000 µs before)."""
    s = {x.id: x for x in analysed_file(two_gap_trace(tmp_path)).suggestions}["preprocess_off_thread"]
    assert s.traced_saving_us == pytest.approx(2 * 6000.0)
    assert [(e["gaps"], e["gap_us"]) for e in s.evidence] == [(2, 6000.0), (2, 6000.0)]
    assert s.per_step_us == pytest.approx(6000.0, abs=1.0)
