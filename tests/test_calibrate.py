"""`tracekit calibrate` (the file it writes), load_calibration, and overhead_from_calibration's numbers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from tracebuilder import TraceBuilder

from tracekit.errors import CalibrationError, ProfileError
from tracekit.model.calibration import NO_LAUNCHES_NOTE, overhead_from_calibration
from tracekit.model.projection import DEFAULT_OVERHEAD, LaunchProfile, ProfilerOverhead
from tracekit.pipeline.calibration import SCHEMA, load_calibration
from tracekit.profile.calibrate import WINDOW, LoopCounts, count_window, summarise


def test_overhead_from_a_gpu_calibration() -> None:
    # 4 µs per event at a fast launch of 5.85 µs: 4 / (5.85 - 3.85 (the default launch_free_us)) = 2.0
    got = overhead_from_calibration(4.0, 5.85, 3.5, "here")
    assert got == ProfilerOverhead(per_event_scale=pytest.approx(2.0), launch_free_us=3.85, launch_floor_us=3.5,
                                   scale_range=(pytest.approx(1.6), pytest.approx(2.4)), source="here")
    # a trace recorded as slowly as the calibration run (the same fast launch) loses 4 µs per event
    assert got.per_event_us(LaunchProfile(fast_us=5.85, median_us=6.0, count=10)) == pytest.approx(4.0)
    # its launch calls lose median - the measured floor: 6.0 - 3.5
    assert got.launch_excess_us(LaunchProfile(fast_us=5.85, median_us=6.0, count=10)) == pytest.approx(2.5)


def test_overhead_from_calibration_edge_cases() -> None:
    # a fast launch barely above launch_free_us: divided by 0.25, not by 0.05: 1 / 0.25 = 4
    assert overhead_from_calibration(1.0, 3.9, None, "s").per_event_scale == pytest.approx(4.0)
    assert overhead_from_calibration(1.0, 2.0, None, "s").per_event_scale == pytest.approx(4.0)  # below it
    # no launch calls (a CPU machine): the default scale, said in the source; the default floor
    cpu = overhead_from_calibration(0.9, None, None, "cpu run")
    assert (cpu.per_event_scale, cpu.launch_floor_us) == (DEFAULT_OVERHEAD.per_event_scale, 3.0)
    assert cpu.scale_range == (pytest.approx(0.8 * 3.75), pytest.approx(1.2 * 3.75))
    assert cpu.source == f"cpu run ({NO_LAUNCHES_NOTE})"
    for bad in ((-1.0, None, None), (math.nan, None, None), (1.0, 0.0, None), (1.0, None, math.inf)):
        with pytest.raises(ValueError):
            overhead_from_calibration(*bad, "s")


def _write(path: Path, **fields: object) -> Path:
    doc = {"schema": SCHEMA, "device": "NVIDIA H200", "date": "2026-12-01T10:00:00+00:00",
           "per_event_us": 4.0, "launch_p10_us": 5.85, "bare_launch_us": 3.5, **fields}
    path.write_text(json.dumps(doc))
    return path


def test_load_calibration_reads_a_gpu_file(tmp_path: Path) -> None:
    got = load_calibration(_write(tmp_path / "cal.json"))
    # the numbers of test_overhead_from_a_gpu_calibration, the file named in the source
    assert (got.per_event_scale, got.launch_floor_us) == (pytest.approx(2.0), 3.5)
    assert got.source == "calibration: cal.json (NVIDIA H200, 2026-12-01T10:00:00+00:00)"
    nulls = load_calibration(_write(tmp_path / "cpu.json", launch_p10_us=None, bare_launch_us=None))
    assert (nulls.per_event_scale, nulls.launch_floor_us) == (3.75, 3.0)


@pytest.mark.parametrize(("content", "problem"), [
    ("{not json", "not a tracekit calibration (not JSON: "),
    ("[1, 2]", "not a tracekit calibration (a JSON list, not an object)"),
    ('{"schema": "tracekit.try/1"}', "not a tracekit calibration (schema 'tracekit.try/1', expected"),
    (None, "per_event_us is missing, not a number of µs in [0, 10000]"),
    ({"per_event_us": -1}, "per_event_us is -1, not a number of µs in [0, 10000]"),
    ({"per_event_us": "2"}, "per_event_us is '2', not a number"),
    ({"per_event_us": True}, "per_event_us is True, not a number"),
    ({"launch_p10_us": 0}, "launch_p10_us is 0, not a number of µs in (0, 10000]"),
    ({"bare_launch_us": 1e9}, "bare_launch_us is 1000000000.0, not a number"),
    ('{"schema": "tracekit-calibration/1", "per_event_us": NaN}', "not JSON: NaN is not a number"),
])
def test_a_bad_calibration_file_is_one_line_naming_it(tmp_path: Path, content: object, problem: str) -> None:
    path = tmp_path / "bad.json"
    if isinstance(content, str):
        path.write_text(content)
    elif content is None:
        path.write_text(json.dumps({"schema": SCHEMA}))
    else:
        assert isinstance(content, dict)
        _write(path, **content)
    with pytest.raises(CalibrationError) as info:
        load_calibration(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and problem in message and "\n" not in message


def test_a_missing_or_huge_calibration_file(tmp_path: Path) -> None:
    with pytest.raises(CalibrationError, match=r"nope\.json: cannot read the calibration file \("):
        load_calibration(tmp_path / "nope.json")
    big = tmp_path / "big.json"
    big.write_text(" " * (1 << 20) + "{}")
    with pytest.raises(CalibrationError, match="larger than 1 MB"):
        load_calibration(big)


# --- the command, on this machine ---------------------------------------------------------------

def _cli(*args: str) -> int:
    from tracekit.cli import main

    return main(["calibrate", *args])


def test_calibrate_writes_a_valid_file_and_never_overwrites_it_unasked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    assert _cli("--iterations", "200") == 0
    path = tmp_path / "tracekit-calibration.json"  # the default name, in the working directory
    out = capsys.readouterr().out
    assert f"calibration written to {path}" in out and "cost per recorded event or call" in out
    doc = json.loads(path.read_text())
    assert (doc["schema"], doc["iterations"], doc["ops_per_iteration"]) == (SCHEMA, 200, 4)
    assert doc["torch"] == str(torch.__version__) and doc["record_shapes"] is True
    assert doc["bare_us_per_iteration"] > 0 and doc["profiled_us_per_iteration"] > doc["bare_us_per_iteration"]
    per_call = doc["events_per_iteration"] + doc["runtime_calls_per_iteration"]
    assert doc["per_event_us"] == pytest.approx(
        (doc["profiled_us_per_iteration"] - doc["bare_us_per_iteration"]) / per_call)
    if not torch.cuda.is_available():
        # 4 torch.add(y, x) of CPU tensors per iteration: one aten::add op each, no runtime call
        assert (doc["events_per_iteration"], doc["runtime_calls_per_iteration"]) == (4.0, 0.0)
        assert doc["cuda"] is False and doc["activities"] == ["cpu"]
        assert doc["launch_p10_us"] is None and doc["bare_launch_us"] is None and doc["launch_bound"] is None
    overhead = load_calibration(path)
    source = f"calibration: tracekit-calibration.json ({doc['device']}, {doc['date']})"
    assert doc["python_slowdown"] > 0  # plain Python under the profiler / without it
    assert overhead == overhead_from_calibration(doc["per_event_us"], doc["launch_p10_us"],
                                                 doc["bare_launch_us"], source, doc["python_slowdown"])

    before = path.read_text()
    assert _cli("--iterations", "200") == 2
    assert capsys.readouterr().err == f"tracekit: error: {path} already exists (use --force to overwrite)\n"
    assert path.read_text() == before
    other = tmp_path / "sub" / "c.json"
    assert _cli("--iterations", "200", "-o", str(other)) == 2  # its folder does not exist
    assert "does not exist" in capsys.readouterr().err
    assert _cli("--iterations", "200", "-q", "--force") == 0
    assert capsys.readouterr().out == ""
    assert json.loads(path.read_text())["date"] and path.read_text() != before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tracekit-calibration.json"]  # no temp files


def test_iterations_is_hidden_from_help(capsys: pytest.CaptureFixture) -> None:
    assert _cli("--help") == 0
    out = capsys.readouterr().out
    assert "-o, --output" in out and "--iterations" not in out


# --- the GPU path, on a synthetic trace and by hand (no GPU on the test machine) -----------------

def test_count_window_counts_only_what_the_loop_recorded(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.launch(505, 3, "warm_kernel", 520, 2, ext=b.op("aten::add", 500, 20))  # before the window
    b.annotation(WINDOW, 1000, 1000)
    b.annotation(WINDOW, 1020, 950, gpu=True)  # its GPU-side copy: not a CPU event, not the window
    for i, launch_us in enumerate((4.0, 5.0, 6.0, 9.0)):
        t = 1010 + 200 * i
        b.launch(t + 5, launch_us, "add_kernel", t + 30, 2, ext=b.op("aten::add", t, 20))
    b.raw({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamIsCapturing", "pid": b.pid, "tid": b.tid,
           "ts": 1800, "dur": 1, "args": {}})
    b.annotation("inner", 1900, 10)
    b.annotation("inner", 1905, 10, gpu=True)  # GPU-side annotations are no CPU events
    b.launch(2100, 3, "late_kernel", 2110, 2, ext=b.op("aten::add", 2095, 20))  # after it
    got = count_window(b.write(tmp_path / "loop.json"))
    # inside [1000, 2000): 4 aten::add + the "inner" annotation; 4 launch calls + cudaStreamIsCapturing;
    # the 4 add_kernels, 2 µs each
    assert got == LoopCounts(events=5, runtime_calls=5, kernels=4, launch_us=(4.0, 5.0, 6.0, 9.0), gpu_busy_us=8.0)


def test_summarise_a_launch_bound_gpu_loop_by_hand() -> None:
    counts = LoopCounts(events=5, runtime_calls=5, kernels=4, launch_us=(4.0, 5.0, 6.0, 9.0), gpu_busy_us=8.0)
    c = summarise(counts, iterations=2, bare_ns=40_000, profiled_ns=90_000, cuda=True, device="GPU",
                  torch_version="t", date="d")
    assert (c.bare_us_per_iteration, c.profiled_us_per_iteration) == (20.0, 45.0)  # 40 µs / 2, 90 µs / 2
    assert (c.events_per_iteration, c.runtime_calls_per_iteration, c.kernels_per_iteration) == (2.5, 2.5, 2.0)
    assert c.per_event_us == pytest.approx(5.0)  # (45 - 20) / (2.5 + 2.5)
    # numpy's linear 10th percentile of 4, 5, 6, 9: 4 + 0.3 × (5 − 4); the median (5 + 6) / 2
    assert (c.launch_p10_us, c.launch_median_us) == (pytest.approx(4.3), 5.5)
    # GPU busy 8 µs / 2 = 4 µs per iteration < 0.9 × 20: launch-bound, 20 µs / 2 kernels each
    assert (c.gpu_busy_us_per_iteration, c.launch_bound, c.bare_launch_us) == (4.0, True, 10.0)
    doc = c.to_dict()
    assert (doc["schema"], doc["activities"], doc["date"]) == (SCHEMA, ["cpu", "cuda"], "d")
    # the same kernels behind a 4 µs bare loop: GPU busy 4 ≥ 0.9 × 4, so not launch-bound
    gpu_bound = summarise(counts, iterations=2, bare_ns=8_000, profiled_ns=90_000, cuda=True, device="GPU",
                          torch_version="t")
    assert (gpu_bound.launch_bound, gpu_bound.bare_launch_us) == (False, None)


def test_summarise_refuses_numbers_that_cannot_calibrate() -> None:
    counts = LoopCounts(events=4, runtime_calls=0, kernels=0, launch_us=(), gpu_busy_us=0.0)
    with pytest.raises(ProfileError, match="was not slower than the unprofiled one"):
        summarise(counts, iterations=1, bare_ns=5_000, profiled_ns=5_000, cuda=False, device="c", torch_version="t")
    with pytest.raises(ProfileError, match="recorded no CPU events"):
        summarise(LoopCounts(0, 0, 0, (), 0.0), iterations=1, bare_ns=1, profiled_ns=2, cuda=False, device="c",
                  torch_version="t")


def test_python_slowdown_sets_the_gap_scale(tmp_path: Path) -> None:
    # plain Python 1.6x slower under the profiler: the host gaps left after their events' cost keep
    # 1 / 1.6 = 0.625 of their length; above 4x it is clipped to 0.25; absent: the default's
    assert overhead_from_calibration(4.0, 5.85, 3.5, "here", 1.6).gap_scale == pytest.approx(0.625)
    assert overhead_from_calibration(4.0, 5.85, 3.5, "here", 9.0).gap_scale == pytest.approx(0.25)
    assert overhead_from_calibration(4.0, 5.85, 3.5, "here").gap_scale == DEFAULT_OVERHEAD.gap_scale
    assert load_calibration(_write(tmp_path / "cal.json", python_slowdown=2.0)).gap_scale == pytest.approx(0.5)
    with pytest.raises(CalibrationError, match="python_slowdown"):
        load_calibration(_write(tmp_path / "bad.json", python_slowdown=-1))
