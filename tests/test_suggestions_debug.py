"""Rules anomaly_mode, empty_cache and gc_collect on synthetic traces with hand-derived numbers."""

from __future__ import annotations

import json

import pytest
from shared_analysis import analysed_file
from tracebuilder import TraceBuilder

import tracekit
from tracekit.analyzers import analyze, step_parts
from tracekit.suggestions.rules import RULES_BY_ID

GEMM = "nvjet_sm90_tst_256x128_64x4_2x1_v_bz_coopA_NNN"
BWD = 200  # the autograd engine's thread


def _rt(b: TraceBuilder, name: str, ts: float, dur: float, tid: int = 100) -> None:
    b.raw({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": b.pid, "tid": tid, "ts": ts, "dur": dur,
           "args": {"correlation": 50000 + len(b.events)}})


def cleanup_trace(tmp_path, gc: bool = False):
    """Two steps of 10,000 µs, each (t0 = its start): a launch at t0 (5 µs) of a kernel t0+10 → t0+1010;
    aten::empty t0+20 → t0+220 holding a cudaMalloc t0+30 → t0+180; aten::add t0+300 → t0+350 (the last
    recorded event before the silence); nothing until two cudaFree outside any op, t0+8350 (100 µs) and
    t0+8460 (100 µs): empty_cache(); a launch at t0+9000 of a kernel t0+9010 → t0+9990. With `gc`: the
    trace says it records collections, and one `gc.collect()` annotation runs t0+400 → t0+7400."""
    b = TraceBuilder()
    if gc:
        b.top["tracekit"] = {"gc_pauses": "annotations"}
    for step in (1, 2):
        t0 = 10000 * (step - 1)
        b.annotation(f"ProfilerStep#{step}", t0, 10000)
        b.launch(t0, 5, GEMM, t0 + 10, 1000)
        b.op("aten::empty", t0 + 20, 200)
        _rt(b, "cudaMalloc", t0 + 30, 150)
        b.op("aten::add", t0 + 300, 50)
        if gc:
            b.annotation("tracekit::gc.collect() gen 2", t0 + 400, 7000)
        _rt(b, "cudaFree", t0 + 8350, 100)
        _rt(b, "cudaFree", t0 + 8460, 100)
        b.launch(t0 + 9000, 5, GEMM, t0 + 9010, 980)
    return b.write(tmp_path / "cleanup.json")


def test_empty_cache_counts_the_release_and_the_silence_before_it(tmp_path):
    a = analyze(tracekit.load_trace(cleanup_trace(tmp_path)))
    s = RULES_BY_ID["empty_cache"].run(a)
    # per step: cudaFree 100 + 100 µs, cudaMalloc 150 µs, and the silence from aten::add's end (t0+350) to
    # the first cudaFree (t0+8350): 8000 µs (the trace records no collections) = 8350 µs; 2 steps of 20,000 µs
    assert s.per_step_us == pytest.approx(8350.0)
    assert s.saving_us == pytest.approx(16700.0)
    assert s.saving_pct == pytest.approx(83.5)
    assert [(e["step"], e["releases"], e["cudaFree"], e["cudaMalloc"], e["untraced_before_us"]) for e in s.evidence] == [
        (1, 1, 2, 1, 8000.0), (2, 1, 2, 1, 8000.0)]
    assert "2 cudaFree and 1 cudaMalloc per step" in s.title and "8.00 ms with nothing recorded" in s.title
    assert "empty_cache()" in s.snippet
    # the diff target: cudaFree + cudaMalloc time, 350 µs per step
    assert RULES_BY_ID["empty_cache"].target.measure(a, step_parts.steady(a)) == pytest.approx(350.0)
    # that silence is the cleanup's: preprocess_off_thread no longer claims it (host gap t0+5 → t0+9000, 8000
    # of its 8995 µs inside the silence)
    assert RULES_BY_ID["preprocess_off_thread"].run(a) is None
    # a trace recorded by another tool says nothing of collections: gc_collect stays silent
    assert RULES_BY_ID["gc_collect"].run(a) is None


def test_recorded_collections_go_to_gc_collect(tmp_path):
    a = analyze(tracekit.load_trace(cleanup_trace(tmp_path, gc=True)))
    gc = RULES_BY_ID["gc_collect"].run(a)
    # one gc.collect() annotation of 7000 µs per step
    assert gc.per_step_us == pytest.approx(7000.0)
    assert gc.saving_us == pytest.approx(14000.0)
    assert [(e["step"], e["collections"], e["gc_collect_calls"], e["generation_2"]) for e in gc.evidence] == [
        (1, 1, 1, 1), (2, 1, 1, 1)]
    assert gc.title.startswith("Remove the per-step gc.collect(): 1 call per step pause Python for 7.00 ms")
    assert RULES_BY_ID["gc_collect"].target.measure(a, step_parts.steady(a)) == pytest.approx(7000.0)
    # empty_cache keeps only the allocator: 100 + 100 + 150 µs per step (the silence is a recorded collection,
    # and what is left of it is not empty_cache's)
    s = RULES_BY_ID["empty_cache"].run(a)
    assert s.per_step_us == pytest.approx(350.0)
    assert "nothing recorded" not in s.title


def test_one_release_is_no_per_step_habit(tmp_path):
    b = TraceBuilder()
    for step in (1, 2, 3):
        t0 = 10000 * (step - 1)
        b.annotation(f"ProfilerStep#{step}", t0, 10000)
        b.launch(t0, 5, GEMM, t0 + 10, 9000)
        if step == 2:
            _rt(b, "cudaFree", t0 + 100, 3000)
    a = analyze(tracekit.load_trace(b.write(tmp_path / "once.json")))
    # 1 of 3 steady steps releases: under half of them
    assert RULES_BY_ID["empty_cache"].run(a) is None


def anomaly_trace(tmp_path, check: bool = True):
    """Two steps of 10,000 µs, each (t0 = its start). Forward on the main thread: three aten::view of
    100 µs at t0+100, t0+300, t0+500, each holding an aten::as_strided of 2 µs (self time 98 µs), and a
    launch at t0+700 of a kernel t0+710 → t0+1710. Backward on thread 200: one node,
    `autograd::engine::evaluate_function: MmBackward0` t0+2000 → t0+4000, holding MmBackward0
    t0+2000 → t0+2300 with three aten::transpose of 4 µs (an as_strided of 1 µs each: self 3 µs) and,
    with `check`, the NaN check: aten::isnan t0+2400 (50 µs), aten::_is_any_true t0+2460 (50 µs),
    aten::item t0+2520 (300 µs) holding a cudaStreamSynchronize t0+2550 → t0+2750. A last launch at
    t0+9000 of a kernel t0+9010 → t0+9990."""
    b = TraceBuilder()
    for step in (1, 2):
        t0 = 10000 * (step - 1)
        b.annotation(f"ProfilerStep#{step}", t0, 10000)
        for at in (100, 300, 500):
            b.op("aten::view", t0 + at, 100)
            b.op("aten::as_strided", t0 + at + 10, 2)
        b.launch(t0 + 700, 5, GEMM, t0 + 710, 1000)
        b.op("autograd::engine::evaluate_function: MmBackward0", t0 + 2000, 2000, tid=BWD)
        b.op("MmBackward0", t0 + 2000, 300, tid=BWD)
        for at in (2010, 2100, 2200):
            b.op("aten::transpose", t0 + at, 4, tid=BWD)
            b.op("aten::as_strided", t0 + at + 1, 1, tid=BWD)
        if check:
            b.op("aten::isnan", t0 + 2400, 50, tid=BWD)
            b.op("aten::_is_any_true", t0 + 2460, 50, tid=BWD)
        b.op("aten::item", t0 + 2520, 300, tid=BWD)
        _rt(b, "cudaStreamSynchronize", t0 + 2550, 200, tid=BWD)
        b.launch(t0 + 9000, 5, GEMM, t0 + 9010, 980)
    return b.write(tmp_path / "anomaly.json")


def test_anomaly_mode_prices_the_checks_and_the_stack_capture(tmp_path):
    a = analyze(tracekit.load_trace(anomaly_trace(tmp_path)))
    s = RULES_BY_ID["anomaly_mode"].run(a)
    # per step: the check from the isnan's start (t0+2400) to the item's end (t0+2820) = 420 µs, + 1 backward
    # node × (forward view self time 98 − backward view self time 3 = 95 µs) = 515 µs; 2 steps of 20,000 µs
    assert s.per_step_us == pytest.approx(515.0)
    assert s.saving_pct == pytest.approx(5.15)
    row = s.evidence[0]
    assert (row["nan_checks"], row["check_us"], row["backward_nodes"], row["capture_per_node_us"]) == (
        1, pytest.approx(420.0), 1, pytest.approx(95.0))
    # forward self time: three views × 98 µs + three as_strided × 2 µs = 300 µs
    assert row["forward_host_us"] == pytest.approx(300.0)
    assert "1 NaN check per step" in s.title and "set_detect_anomaly(False)" in s.snippet
    assert RULES_BY_ID["anomaly_mode"].target.measure(a, step_parts.steady(a)) == pytest.approx(515.0)
    # the check's sync is anomaly_mode's: avoid_sync leaves it
    assert RULES_BY_ID["avoid_sync"].run(a) is None


def test_an_item_without_a_nan_check_is_an_ordinary_sync(tmp_path):
    a = analyze(tracekit.load_trace(anomaly_trace(tmp_path, check=False)))
    assert RULES_BY_ID["anomaly_mode"].run(a) is None
    s = RULES_BY_ID["avoid_sync"].run(a)
    # the same .item() sync without the isnan before it: CPU wait 200 µs, GPU idle after it until t0+9010
    # (longer): min = 200 µs per step
    assert s is not None and s.per_step_us == pytest.approx(200.0)


def test_recorded_debug_settings_are_named(tmp_path):
    path = anomaly_trace(tmp_path)
    doc = json.loads(path.read_text())
    # untrusted values: only booleans of known keys count
    doc["tracekit"] = {"debug_modes": {"anomaly": True, "cudnn_deterministic": "yes", "other": True}}
    path.write_text(json.dumps(doc))
    s = RULES_BY_ID["anomaly_mode"].run(analyze(tracekit.load_trace(path)))
    assert s.formula.endswith("as tracekit profile recorded: torch.autograd.set_detect_anomaly(True)")
    assert all("recorded" not in e for e in s.evidence)


def test_silent_below_two_percent_of_the_step(tmp_path):

    b = TraceBuilder()
    for step in (1, 2):
        t0 = 10000 * (step - 1)
        b.annotation(f"ProfilerStep#{step}", t0, 10000)
        b.launch(t0, 5, GEMM, t0 + 10, 9000)
        b.op("aten::add", t0 + 100, 8000)  # recorded work up to 5 µs before the release
        _rt(b, "cudaFree", t0 + 8105, 75)
        _rt(b, "cudaFree", t0 + 8185, 75)
        b.launch(t0 + 9100, 5, GEMM, t0 + 9110, 880)
    path = b.write(tmp_path / "small.json")
    a = analyze(tracekit.load_trace(path))
    # the check sees 2 × 75 µs of cudaFree + 5 µs of silence (t0+8100 → t0+8105) per step: 1.55 % of the
    # 10,000 µs step, above its 0.5 % floor
    assert RULES_BY_ID["empty_cache"].run(a).per_step_us == pytest.approx(155.0)
    # what the user sees stays silent below 2 % of the step
    assert "empty_cache" not in {s.id for s in analysed_file(path).suggestions}


def test_anomaly_mode_without_nan_checks_when_the_recorder_says_it_was_on(tmp_path):
    path = anomaly_trace(tmp_path, check=False)
    a = analyze(tracekit.load_trace(path))
    assert RULES_BY_ID["anomaly_mode"].run(a) is None  # nothing in the events says anomaly mode
    doc = json.loads(path.read_text())
    doc["tracekit"] = {"debug_modes": {"anomaly": True, "anomaly_check_nan": False}}
    path.write_text(json.dumps(doc))
    s = RULES_BY_ID["anomaly_mode"].run(analyze(tracekit.load_trace(path)))
    # set_detect_anomaly(True, check_nan=False): no check, the stack capture alone: 1 node × (98 − 3) µs per step
    assert s.per_step_us == pytest.approx(95.0)
    assert s.evidence[0]["nan_checks"] == 0
    assert "a Python stack stored for each of 1 forward autograd nodes per step" in s.title


def test_a_collection_after_the_last_launch_is_priced_from_the_tail(tmp_path):
    """gc.collect() at the end of the step, after its last launch: the what-if takes it from the main
    thread's tail (the step mark's end after the last call), not only from the host gaps before calls."""

    b = TraceBuilder()
    b.top["tracekit"] = {"gc_pauses": "annotations"}
    for step in (1, 2, 3):
        t0 = 10000 * (step - 1)
        b.annotation(f"ProfilerStep#{step}", t0, 10000)
        for k in range(10):  # launches at t0 + 100 k (5 µs) of 80 µs kernels
            b.launch(t0 + 100 * k, 5, GEMM, t0 + 10 + 100 * k, 80)
        b.annotation("tracekit::gc.collect() gen 2", t0 + 2000, 7000)
    s = {x.id: x for x in analysed_file(b.write(tmp_path / "tail.json")).suggestions}["gc_collect"]
    # per step: the tail runs from the last launch's end (t0+905) to the mark's end (t0+10000), 9095 µs,
    # 7000 of them the collection; the projection takes the profiler's cost of its one recorded event
    # (a few µs) off the tail, so the replay saves 7000 µs × (projected tail / 9095) ≈ 7000 µs (within 0.1 %)
    assert s.traced_saving_us == pytest.approx(21000.0)
    assert s.per_step_us == pytest.approx(7000.0, rel=1e-3)
    assert s.per_step_us < 7000.0
