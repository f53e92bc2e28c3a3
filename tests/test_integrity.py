"""The integrity audit (tracekit.analyzers.integrity) on deliberately broken copies of a sample trace."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from shared_analysis import analysed_file
from tracebuilder import TraceBuilder

from tracekit.analyzers import integrity as it
from tracekit.analyzers.analysis import analyze
from tracekit.analyzers.totals import UNDETERMINED
from tracekit.trace.load import load_trace

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "small_matmul_loop.trace.json.gz"
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")


def _events() -> dict[str, Any]:
    with gzip.open(SAMPLE, "rt") as f:
        return json.load(f)


def _write(doc: dict[str, Any], path: Path) -> Path:
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    return path


def _codes(analysis: Any) -> dict[str, str]:
    return {f.code: f.severity for f in analysis.integrity.findings}


def test_sample_trace_is_clean_and_keeps_its_verdict():
    a = analyze(load_trace(SAMPLE))
    # the sample's only finding: its last ProfilerStep is the partial tail the profiler closes
    assert {f.code for f in a.integrity.findings} <= {it.CUT_STEP}
    assert a.integrity.undetermined == ""
    assert a.verdict != UNDETERMINED


def test_kernels_removed_is_gpu_activity_missing(tmp_path):
    doc = _events()
    launches = sum(1 for e in doc["traceEvents"] if e.get("name") in ("cudaLaunchKernel", "cudaLaunchKernelExC"))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in GPU_CATS]
    a = analyze(load_trace(_write(doc, tmp_path / "nokernels.json.gz")))
    assert _codes(a)[it.GPU_MISSING] == it.ERROR
    assert a.verdict == UNDETERMINED
    finding = next(f for f in a.integrity.findings if f.code == it.GPU_MISSING)
    assert f"{launches:,} kernel launch calls" in finding.message  # counted from the raw events above
    assert a.evidence.startswith("The trace cannot support a verdict: GPU activity was not recorded")


def test_half_the_kernels_dropped_is_dropped_events(tmp_path):
    doc = _events()
    seen = 0
    kept = []
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            seen += 1
            if seen % 4 == 0:  # every fourth kernel dropped: 25 % of the launches lose their kernel
                continue
        kept.append(e)
    doc["traceEvents"] = kept
    a = analyze(load_trace(_write(doc, tmp_path / "dropped.json.gz")))
    assert _codes(a)[it.DROPPED] == it.WARNING
    assert a.verdict != UNDETERMINED


@pytest.mark.parametrize("shift_us", [400_000.0, -400_000.0])
def test_clocks_shifted_by_400_ms_is_a_clock_offset(tmp_path, shift_us):
    doc = _events()
    for e in doc["traceEvents"]:
        if e.get("cat") in GPU_CATS and "ts" in e:
            e["ts"] = e["ts"] + shift_us
    a = analyze(load_trace(_write(doc, tmp_path / "shifted.json.gz")))
    assert _codes(a)[it.CLOCK_OFFSET] == it.ERROR
    assert a.verdict == UNDETERMINED
    offset = a.integrity.clock_offset_us
    assert offset is not None
    # the shift plus the few µs a kernel takes to start on an idle GPU (+) or the launch call's own
    # length (-: the estimate is the most a kernel starts before its launch call began)
    assert abs(offset - shift_us) < 1000.0


def _with_idle_wait(wait_us: float, *, keep_steps: bool) -> dict[str, Any]:
    """The sample with a `wait_us` host wait (a cudaStreamSynchronize with nothing queued) before
    all its work: every event from the first one on moves `wait_us` later."""
    doc = _events()
    xs = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    t0 = min(e["ts"] for e in xs)
    for e in doc["traceEvents"]:
        if "ts" in e and e.get("ph") != "M":
            e["ts"] = e["ts"] + wait_us
    pid, tid = next((e["pid"], e["tid"]) for e in xs if e.get("cat") == "cuda_runtime")
    doc["traceEvents"].append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": pid,
                               "tid": tid, "ts": t0, "dur": wait_us - 10.0, "args": {"correlation": 999999999}})
    if not keep_steps:
        doc["traceEvents"] = [e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")]
    return doc


def test_450_ms_wait_before_the_work_is_left_out_of_the_steps(tmp_path):
    base = analyze(load_trace(SAMPLE))
    a = analyze(load_trace(_write(_with_idle_wait(450_000.0, keep_steps=True), tmp_path / "wait.json.gz")))
    finding = next(f for f in a.integrity.findings if f.code == it.IDLE_RECORDING)
    assert finding.severity == it.INFO  # the ProfilerStep windows hold none of it
    assert finding.value_us >= 450_000.0 - 10.0  # the wait we inserted, plus the sample's own lead-in
    assert "leaves out" in finding.message
    assert a.verdict == base.verdict


def test_450_ms_wait_before_unmarked_work_is_left_out_too(tmp_path):
    # without ProfilerStep marks the windows start at the first launch: the wait is still outside
    a = analyze(load_trace(_write(_with_idle_wait(450_000.0, keep_steps=False), tmp_path / "wait.json.gz")))
    assert _codes(a)[it.IDLE_RECORDING] == it.INFO
    assert a.verdict != UNDETERMINED


def test_450_ms_wait_inside_the_only_window_is_undetermined(tmp_path):
    b = TraceBuilder()
    b.launch(0.0, 5.0, "kernel_a", 10.0, 100.0)
    b.launch(150.0, 450_000.0, None, 0.0, 0.0, api="cudaStreamSynchronize")  # the host waits 450 ms
    b.launch(450_200.0, 5.0, "kernel_b", 450_210.0, 100.0)
    b.launch(450_300.0, 5.0, "kernel_c", 450_310.0, 100.0)
    a = analyze(load_trace(b.write(tmp_path / "wait.json")))
    assert a.ranks[0].launch.scope == "trace"  # one window, first launch to the last kernel's end
    finding = next(f for f in a.integrity.findings if f.code == it.IDLE_RECORDING)
    assert finding.severity == it.ERROR
    assert finding.value_us == pytest.approx(450_210.0 - 110.0)  # kernel_a ends at 110, kernel_b starts at 450,210
    # the work around it: 0 .. 110 (first launch to kernel_a's end) and 450,210 .. 450,410
    assert "the GPU work sits in 2 active windows (310 µs)" in finding.message
    assert a.verdict == UNDETERMINED
    assert "idle wait" in a.evidence


def test_150_ms_wait_before_three_steps_of_900_is_named_as_left_out(tmp_path):
    # a recording that is mostly work (the wait is 150 of 1,050 ms): no warning, but the note says
    # the steps leave the wait out (the SGLang prefill+decode trace with a 450 ms wait before it: 31 %)
    b = TraceBuilder()
    b.launch(0.0, 5.0, "kernel_a", 10.0, 100.0)
    b.launch(20.0, 150_000.0, None, 0.0, 0.0, api="cudaStreamSynchronize")  # returns at 150,020
    for i in range(3):
        t = 150_200.0 + 300_000.0 * i
        b.annotation(f"ProfilerStep#{i + 1}", t, 300_000.0)
        b.launch(t, 5.0, f"kernel_{i}", t + 10.0, 299_980.0)
    a = analyze(load_trace(b.write(tmp_path / "wait.json")))
    finding = next(f for f in a.integrity.findings if f.code == it.IDLE_RECORDING)
    assert finding.severity == it.INFO
    # the GPU idles from kernel_a's end (110) to the first step's kernel (150,210); the first step's
    # window [150,200, ...] covers its last 10 µs when that step is analysed, none of it otherwise
    assert finding.value_us in (pytest.approx(150_090.0), pytest.approx(150_100.0))
    assert "outside the analysed steps" in finding.message
    assert a.verdict != UNDETERMINED


def test_queued_kernel_with_nothing_running_is_unexplained_not_gpu_time(tmp_path):
    b = TraceBuilder()
    b.launch(0.0, 5.0, "kernel_a", 10.0, 100.0)
    b.launch(300.0, 5.0, "kernel_b", 100_305.0, 100.0)  # launched at 300, runs 100 ms later on an idle GPU
    a = analyze(load_trace(b.write(tmp_path / "queued.json")))
    t = a.totals
    # window 0 .. 100,405; busy 200; the gap 110 .. 100,305 is CPU-late until the launch returned
    # (305) plus the 20 µs launch latency, then GPU-side: 100,305 - 325 = 99,980 µs unexplained
    assert t.gpu_busy_us == pytest.approx(200.0)
    assert t.unexplained_us == pytest.approx(99_980.0)
    # plus the window's first 10 µs before kernel_a (its launch returned at 5, + 20 µs latency > 10)
    assert t.launch_gap_us == pytest.approx(10.0 + 325.0 - 110.0)
    assert t.compute_us == pytest.approx(200.0)  # the queued gap is not GPU time
    assert a.verdict == UNDETERMINED and a.cause == "unexplained"
    assert sum(t.parts().values()) == pytest.approx(t.span_us)
    finding = next(f for f in a.integrity.findings if f.code == it.QUEUED_IDLE)
    assert finding.value_us == pytest.approx(99_980.0)


def test_text_json_and_report_show_the_finding(tmp_path, capsys):
    from tracekit.cli import main

    doc = _events()
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in GPU_CATS]
    path = _write(doc, tmp_path / "nokernels.json.gz")
    assert main(["analyze", str(path)]) == 0
    text = capsys.readouterr().out
    line = next(x for x in text.splitlines() if x.startswith("integrity "))
    assert line.startswith("integrity error: GPU activity was not recorded")
    assert "verdict   undetermined" in text
    assert main(["analyze", "--json", str(path)]) == 0
    doc_json = json.loads(capsys.readouterr().out)
    errors = [f["code"] for f in doc_json["integrity"] if f["severity"] == it.ERROR]
    assert errors == [it.GPU_MISSING] and doc_json["integrity"][0]["code"] == it.GPU_MISSING  # errors first
    assert doc_json["summary"]["verdict"] == UNDETERMINED
    out = tmp_path / "r.html"
    assert main(["report", str(path), "-o", str(out), "-q"]) == 0
    html = out.read_text()
    assert "Trace integrity — error: GPU activity was not recorded" in html
    assert "Undetermined" in html


def test_no_suggestions_when_the_trace_cannot_support_a_verdict(tmp_path):

    doc = _events()
    for e in doc["traceEvents"]:
        if e.get("cat") in GPU_CATS and "ts" in e:
            e["ts"] = e["ts"] + 400_000.0
    shifted = analysed_file(_write(doc, tmp_path / "shifted.json.gz"))
    assert shifted.analysis.verdict == UNDETERMINED
    assert shifted.suggestions == ()  # the GPU timeline is 400 ms off: no saving can be read from it
    assert analysed_file(SAMPLE).suggestions != ()  # the intact sample does get its suggestions


def test_graph_replay_after_a_long_host_sync_is_not_gpu_bound(tmp_path):
    # a serving decode step: a graph launched at 0, a 463 ms host sync, the replay's kernels run
    # 463 ms later for 9.8 ms with nothing recorded before them
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0.0, 474_000.0)
    corr = b.launch(0.0, 10.0, "kernel_a", 463_000.0, 4_900.0, api="cudaGraphLaunch")
    b.gpu("kernel_b", 467_900.0, 4_900.0, corr)
    b.launch(20.0, 472_900.0, None, 0.0, 0.0, api="cudaStreamSynchronize")
    a = analyze(load_trace(b.write(tmp_path / "decode.json")))
    t = a.totals
    assert t.gpu_busy_us == pytest.approx(9_800.0)
    # the GPU idles 0 .. 463,000 with the replay launched at 10: late until 10 + 20 µs latency,
    # then 462,970 µs queued with nothing running
    assert t.unexplained_us == pytest.approx(463_000.0 - 30.0)
    assert a.verdict == UNDETERMINED and a.cause == "unexplained"
    assert "nothing recorded running" in a.evidence


def test_report_tiles_name_no_verdict_beside_undetermined(tmp_path):
    from tracekit.cli import main

    b = TraceBuilder()
    b.launch(0.0, 5.0, "kernel_a", 10.0, 100.0)
    b.launch(150.0, 450_000.0, None, 0.0, 0.0, api="cudaStreamSynchronize")
    b.launch(450_200.0, 5.0, "kernel_b", 450_210.0, 100.0)
    out = tmp_path / "r.html"
    assert main(["report", str(b.write(tmp_path / "wait.json")), "-o", str(out), "-q"]) == 0
    html = out.read_text()
    assert "Undetermined" in html
    assert "-bound, GPU" not in html  # the model's label ("host-bound, GPU 0 %") stays off the tile
