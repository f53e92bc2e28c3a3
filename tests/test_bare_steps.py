"""Unprofiled step times in a trace ("tracekit"."bare"): the loader's BareSteps, and `tracekit profile` writing them."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest
from tracebuilder import TraceBuilder

from tracekit.profile.bare import METHOD, bare_object
from tracekit.trace.bare import MAX_STEPS, BareSteps, parse_bare
from tracekit.trace.load import load_trace

GOOD = {"clock": "gpu", "step_us": {"3": 300.5, "2": 100, "5": 50.25, "4": 200.0}, "steps_marked": 6,
        "step_source": "optimizer", "runs": 1, "method": METHOD}


def _trace(tmp_path: Path, tracekit: object = None, *, with_key: bool = True) -> Path:
    """Two ProfilerSteps with one kernel each; `tracekit` as the top-level "tracekit" object."""
    b = TraceBuilder()
    for step in (2, 3):
        t0 = 1000.0 * step
        b.annotation(f"ProfilerStep#{step}", t0, 900.0)
        b.launch(t0 + 10, 5, "k", t0 + 20, 30)
    if with_key:
        b.top["tracekit"] = tracekit
    return b.write(tmp_path / "t.json")


def _loaded(tmp_path: Path, bare: object) -> tuple[BareSteps | None, list[str]]:
    t = load_trace(_trace(tmp_path, {"version": "x", "bare": bare}))
    return t.rank().meta.bare, [w for w in t.warnings if "tracekit.bare" in w]


def test_a_good_bare_object_is_read_sorted_and_typed(tmp_path: Path) -> None:
    bare, warnings = _loaded(tmp_path, GOOD)
    assert warnings == []
    # GOOD's step_us sorted by step number, the int 100 as a float; source: the loader's constant
    assert bare == BareSteps(clock="gpu", step_us=((2, 100.0), (3, 300.5), (4, 200.0), (5, 50.25)),
                             source="tracekit profile", steps_marked=6, step_source="optimizer")
    assert bare.median_us([2, 3, 4]) == 200.0  # median of 100, 300.5, 200
    assert bare.median_us([3, 4]) == 250.25  # (300.5 + 200) / 2
    assert bare.median_us([5, 99]) == 50.25  # step 99 was not timed: left out
    assert bare.median_us([99]) is None and bare.median_us([]) is None
    assert bare.get(3) == 300.5 and bare.get(7) is None


def test_traces_without_a_bare_object_get_none(tmp_path: Path) -> None:
    for tk, with_key in ((None, False), ({"version": "x"}, True), ("not an object", True)):
        t = load_trace(_trace(tmp_path, tk, with_key=with_key))
        assert t.rank().meta.bare is None
        assert not [w for w in t.warnings if "tracekit.bare" in w]


@pytest.mark.parametrize(("bare", "field"), [
    ([1, 2], "tracekit.bare (a list, not an object)"),
    ("fast", "tracekit.bare (a string, not an object)"),
    ({**GOOD, "clock": "cpu"}, "tracekit.bare.clock ('cpu', not 'gpu' or 'wall')"),
    ({**GOOD, "clock": None}, "tracekit.bare.clock (None"),
    ({"clock": "wall"}, "tracekit.bare.step_us (a null, not an object)"),
    ({**GOOD, "step_us": [100.0, 200.0]}, "tracekit.bare.step_us (a list, not an object)"),
    ({**GOOD, "step_us": {}}, "tracekit.bare.step_us (empty)"),
    ({**GOOD, "step_us": {"1": -5.0}}, "'1': negative"),
    ({**GOOD, "step_us": {"x": 5.0, "-1": 5.0}}, "'x': not a step number; '-1': not a step number"),
    ({**GOOD, "step_us": {str(k): 1.0 for k in range(MAX_STEPS + 1)}}, "100001 entries, more than 100000"),
])
def test_an_unusable_bare_object_is_dropped_with_a_warning_naming_it(tmp_path: Path, bare: object,
                                                                     field: str) -> None:
    got, warnings = _loaded(tmp_path, bare)
    assert got is None
    (warning,) = warnings
    assert field in warning and warning.startswith(f"{tmp_path / 't.json'}: ignored ")


def test_bad_entries_are_dropped_one_by_one(tmp_path: Path) -> None:
    step_us = {"2": 100.0, "3": "fast", "4": -1.0, "5": 2e9, "6": True, "7.5": 3.0, "8": 80.0, "9": None}
    got, (warning,) = _loaded(tmp_path, {**GOOD, "step_us": step_us})
    assert got is not None and got.step_us == ((2, 100.0), (8, 80.0))  # the two good entries of step_us
    assert "tracekit.bare.step_us entries ('3': a string, not a number; '4': negative; '5': over 1e+09 µs" \
        " and 3 more)" in warning


def test_non_finite_times_and_bad_side_fields(tmp_path: Path) -> None:
    # NaN and inf cannot be written as JSON the loader accepts: parse the decoded value directly
    ignored: list[str] = []
    got = parse_bare({"clock": "wall", "step_us": {"1": math.nan, "2": math.inf, "3": 7.0}}, ignored)
    assert got == BareSteps("wall", ((3, 7.0),))
    assert ignored == ["tracekit.bare.step_us entries ('1': not finite; '2': not finite)"]
    got, (warning,) = _loaded(tmp_path, {**GOOD, "steps_marked": "six", "step_source": ["x"]})
    assert got is not None and (got.steps_marked, got.step_source) == (None, None)
    assert "tracekit.bare.steps_marked ('six', not a step count)" in warning
    assert "tracekit.bare.step_source (not a short string)" in warning


def test_bare_object_maps_timed_step_k_to_profiler_step_k() -> None:
    # boundaries of timed steps 0..4 (step k = bounds[k] -> bounds[k+1]): 10, 20, 30, 40, 1 µs
    timing = {"wall_us": [0.0, 10.0, 30.0, 60.0, 100.0, 101.0], "gpu_us": [], "steps_marked": 4,
              "step_source": "explicit"}
    # a profile with --warmup 2 records ProfilerStep#2..#4: the same step numbers, no shift
    assert bare_object(timing, [2, 3, 4]) == {
        "clock": "wall", "step_us": {"2": 30.0, "3": 40.0, "4": 1.0}, "steps_marked": 4,
        "step_source": "explicit", "runs": 1, "method": METHOD}
    timing["gpu_us"] = [0.0, 5.0, 15.0, 30.0, 50.0, 52.0]  # CUDA events: preferred
    got = bare_object(timing, [0, 1, 7])  # step 7 was not timed
    assert got is not None and (got["clock"], got["step_us"]) == ("gpu", {"0": 5.0, "1": 10.0})
    assert bare_object(timing, []) is None  # the profiled trace holds no step
    assert bare_object({"wall_us": [0.0], "gpu_us": []}, [0]) is None


# --- `tracekit profile` writes it ---------------------------------------------------------------

STEPPED = """\
import sys, time
import torch
from tracekit.profile import step
fail = len(sys.argv) > 1 and not torch.autograd._profiler_enabled()
if fail and sys.argv[1] == "fail-unprofiled":
    sys.exit(3)
if fail and sys.argv[1] == "hang-unprofiled":
    time.sleep(60)
for k in range(4):
    time.sleep(0.03 * (k + 1))  # step k sleeps 30, 60, 90, 120 ms
    torch.ones(4).sum()
    step()
"""


def _profile(*args: str) -> int:
    from tracekit.cli import main

    try:
        return main(["profile", "--no-report", *args])
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1


def _doc(path: Path) -> dict:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)


@pytest.fixture
def stepped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "stepped.py"
    script.write_text(STEPPED)
    return script


def test_profile_stores_the_unprofiled_steps_under_their_profiler_step_numbers(
        stepped: Path, capsys: pytest.CaptureFixture) -> None:
    assert _profile("--warmup", "1", str(stepped)) == 0
    err = capsys.readouterr().err
    assert "tracekit: timing the steps without the profiler (pass --no-bare to skip)" in err
    assert "unprofiled times of 4 steps stored in the trace (wall clock)" in err
    path = stepped.with_name("stepped.trace.json.gz")
    doc = _doc(path)
    marks = sorted(int(e["name"].split("#")[1]) for e in doc["traceEvents"]
                   if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#"))
    assert marks == [1, 2, 3, 4]  # --warmup 1 drops step 0; step 4 is the tail after the last mark
    bare = doc["tracekit"]["bare"]
    assert sorted(int(k) for k in bare["step_us"]) == marks
    assert {k: v for k, v in bare.items() if k != "step_us"} == {
        "clock": "wall", "steps_marked": 4, "step_source": "explicit", "runs": 1, "method": METHOD}
    # step k sleeps 30 (k + 1) ms (STEPPED): each time at least that, and less than the next one's
    for k, low_ms in ((1, 60), (2, 90), (3, 120)):
        assert low_ms * 1000 <= bare["step_us"][str(k)] < (low_ms + 30) * 1000, k
    assert bare["step_us"]["4"] < 30_000  # the tail: no sleep
    meta = load_trace(path).rank().meta
    assert meta.bare is not None and [s for s, _ in meta.bare.step_us] == marks


def test_no_bare_writes_none(stepped: Path, capsys: pytest.CaptureFixture) -> None:
    assert _profile("--no-bare", str(stepped)) == 0
    assert "without the profiler" not in capsys.readouterr().err
    doc = _doc(stepped.with_name("stepped.trace.json.gz"))
    assert "bare" not in doc["tracekit"] and doc["tracekit"]["steps_marked"] == 4


@pytest.mark.parametrize(("mode", "extra", "why"), [
    ("fail-unprofiled", (), "the script exited with status 3"),
    ("hang-unprofiled", ("--timeout", "1"), "timed out after 1 s"),
])
def test_a_failed_unprofiled_run_leaves_the_profile_without_bare(
        stepped: Path, capsys: pytest.CaptureFixture, mode: str, extra: tuple[str, ...], why: str) -> None:
    assert _profile(*extra, str(stepped), mode) == 0  # the profiled run itself succeeds
    notes = [line for line in capsys.readouterr().err.splitlines() if "not stored" in line]
    assert notes == [f"tracekit: unprofiled step times not stored: the run without the profiler failed: {why}"]
    doc = _doc(stepped.with_name("stepped.trace.json.gz"))
    assert "bare" not in doc["tracekit"] and doc["tracekit"]["exit_status"] == 0


def test_quiet_and_multi_process_launchers(stepped: Path, capsys: pytest.CaptureFixture,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    assert _profile("-q", str(stepped), "fail-unprofiled") == 0
    assert "tracekit:" not in capsys.readouterr().err  # -q: not even the note
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    assert _profile(str(stepped)) == 0
    err = capsys.readouterr().err
    assert "not timing the steps without the profiler under a multi-process launcher (WORLD_SIZE=2)" in err
    assert "bare" not in _doc(stepped.with_name("stepped.rank0.trace.json.gz"))["tracekit"]


def test_a_module_is_timed_as_python_dash_m_runs_it(stepped: Path) -> None:
    stepped.with_name("stepmod.py").write_text(STEPPED)  # in the working directory, where -m looks
    assert _profile("-q", "-m", "stepmod") == 0
    bare = _doc(stepped.with_name("stepmod.trace.json.gz"))["tracekit"]["bare"]
    assert sorted(bare["step_us"], key=int) == ["0", "1", "2", "3", "4"]  # ProfilerStep#0..#4, no warm-up
    assert 30_000 <= bare["step_us"]["0"] < 60_000  # step 0 sleeps 30 ms (STEPPED)
