"""`tracekit profile` run in-process (fast): -m, outputs, exit statuses, step detection, schedules."""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

DATA = Path(__file__).resolve().parent / "data" / "profile"


def cli(*args: str) -> int:
    """`tracekit profile --no-report ARGS` in this process; the status it would exit with."""
    from tracekit.cli import main

    try:
        return main(["profile", "--no-report", "--no-bare", *args])
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1


def load(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def step_names(doc: dict) -> list[str]:
    return sorted(
        (
            e["name"]
            for e in doc["traceEvents"]
            if e.get("cat") == "user_annotation" and e.get("name", "").startswith("ProfilerStep#")
        ),
        key=lambda name: int(name.split("#")[1]),
    )


def cpu_ops(doc: dict, name: str) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op" and e.get("name") == name]


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_module_mode_runs_as_python_dash_m(workdir: Path, capsys: pytest.CaptureFixture) -> None:
    shutil.copy(DATA / "profile_fixture_mod.py", workdir)
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    assert cli("-m", "profile_fixture_mod", "one", "--two") == 0
    assert (sys.argv, sys.path) == (saved_argv, saved_path)  # restored after the run
    seen = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert seen == {
        "argv": [str(workdir / "profile_fixture_mod.py"), "one", "--two"],
        "name": "__main__",
        "sum": 512.0,
    }
    doc = load(workdir / "profile_fixture_mod.trace.json.gz")
    assert (doc["tracekit"]["mode"], doc["tracekit"]["target"]) == ("module", "-m profile_fixture_mod")
    assert [e["args"]["Input Dims"] for e in cpu_ops(doc, "aten::mm")] == [[[8, 8], [8, 8]]]


def test_args_after_the_script_belong_to_it(workdir: Path, capsys: pytest.CaptureFixture) -> None:
    assert cli("-o", "out.json.gz", str(DATA / "args_script.py"), "a", "--force") == 0
    seen = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert seen["argv"] == [str(DATA / "args_script.py"), "a", "--force"]
    assert seen["path0"] == str(DATA)
    assert load(workdir / "out.json.gz")["tracekit"]["exit_status"] == 0


def test_plain_json_output_and_overwrite_rules(workdir: Path, capsys: pytest.CaptureFixture) -> None:
    out = workdir / "t.json"
    assert cli("-o", str(out), str(DATA / "args_script.py")) == 0
    first = json.loads(out.read_text())  # not gzipped: the name does not end in .gz
    assert first["tracekit"]["mode"] == "script"
    assert cli("-o", str(out), str(DATA / "args_script.py")) == 2
    err = capsys.readouterr().err
    assert err.endswith(f"tracekit: error: {out} already exists (use --force to overwrite)\n")
    assert json.loads(out.read_text()) == first
    assert cli("--force", "-o", str(out), str(DATA / "args_script.py")) == 0
    assert json.loads(out.read_text())["tracekit"]["recorded_at"]
    assert sorted(p.name for p in workdir.iterdir()) == ["t.json"]  # no temp files left
    assert cli("-o", str(workdir / "no" / "t.json"), str(DATA / "args_script.py")) == 2
    assert capsys.readouterr().err.endswith(f"tracekit: error: {workdir / 'no'} does not exist\n")


def test_trace_to_dev_null_has_no_report(workdir: Path, capsys: pytest.CaptureFixture) -> None:
    """-o /dev/null writes the trace in place (a device stays a device) and plans no report: there is
    no file to read it back from; the run still exits with the script's status."""
    from tracekit.cli import main

    try:
        status = main(["profile", "--no-bare", "--force", "-o", "/dev/null", str(DATA / "args_script.py")])
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else 1
    assert status == 0
    err = capsys.readouterr().err
    assert "tracekit: no report: /dev/null is not a regular file to read the trace back from" in err
    assert not Path("/dev/null.report.html").exists() and sorted(workdir.iterdir()) == []


@pytest.mark.parametrize(("arg", "status"), [("3", 3), ("0", 0), ("bye from the script", 1)])
def test_sys_exit_status_is_kept(
    workdir: Path, capsys: pytest.CaptureFixture, arg: str, status: int
) -> None:
    assert cli(str(DATA / "failing.py"), arg) == status
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert ("bye from the script\n" in err) == (status == 1)
    assert load(workdir / "failing.trace.json.gz")["tracekit"]["exit_status"] == status


def test_exception_traceback_hides_tracekit_frames(
    workdir: Path, capsys: pytest.CaptureFixture
) -> None:
    assert cli(str(DATA / "failing.py")) == 1
    err = capsys.readouterr().err
    trace = err[err.index("Traceback") : err.index("ValueError: boom from the script")]
    files = [line.split('"')[1] for line in trace.splitlines() if line.startswith('  File "')]
    assert files == [str(DATA / "failing.py")] * 3  # <module> -> outer -> inner, nothing else
    assert load(workdir / "failing.trace.json.gz")["tracekit"]["exit_status"] == 1


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda d: d / "missing.py", "missing.py: no such file"),
        (lambda d: _write(d / "bad.py", b"def f(:\n"), "bad.py is not valid Python: "),
        (lambda d: _write(d / "latin.py", b"x = '\xff'\n"), "latin.py is not valid Python"),
        (lambda d: d, "is a directory without a __main__.py"),
    ],
)
def test_bad_targets_fail_before_running(
    workdir: Path, capsys: pytest.CaptureFixture, make, expected: str
) -> None:
    assert cli(str(make(workdir))) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("tracekit: error: ") and expected in line
    assert not list(workdir.glob("*.gz"))


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_missing_module_or_target(workdir: Path, capsys: pytest.CaptureFixture) -> None:
    assert cli("-m", "no_such_module_for_tracekit") == 2
    assert capsys.readouterr().err == (
        "tracekit: error: no module named 'no_such_module_for_tracekit'\n"
    )
    assert cli("-m", "json") == 2  # a package without __main__
    assert "json is a package without a __main__ module" in capsys.readouterr().err
    assert cli() == 2
    assert capsys.readouterr().err == "tracekit: error: give a SCRIPT to run, or -m MODULE\n"


@pytest.mark.parametrize(
    ("mode", "source"),
    [
        ("hook", "optimizer"),  # optimizer.step() marks the steps, no edit to the script
        ("two", "optimizer"),  # a second optimizer stepping in the same iteration adds no steps
        ("explicit", "explicit"),  # tracekit.step() after optimizer.step(): not double-counted
        ("explicit-first", "explicit"),  # tracekit.step() before any optimizer step
        ("range", "explicit"),  # with tracekit.step_range(): ...
    ],
)
def test_step_detection(
    workdir: Path, capsys: pytest.CaptureFixture, mode: str, source: str
) -> None:
    assert cli(str(DATA / "train.py"), "5", mode) == 0
    doc = load(workdir / "train.trace.json.gz")
    # torch's convention: ProfilerStep#0 runs from the start to the first mark, and what follows
    # the last mark is one more, partial, step.
    assert step_names(doc) == [f"ProfilerStep#{i}" for i in range(6)]
    meta = doc["tracekit"]
    assert (meta["steps_marked"], meta["steps_recorded"], meta["step_source"]) == (5, 6, source)
    assert "trace written to train.trace.json.gz (6 steps)" in capsys.readouterr().err


def test_optimizer_step_op_nests_inside_its_profiler_step(workdir: Path) -> None:
    assert cli(str(DATA / "train.py"), "3", "hook") == 0
    events = load(workdir / "train.trace.json.gz")["traceEvents"]
    steps = [e for e in events if e.get("name", "").startswith("ProfilerStep#")]
    sgd = [e for e in events if e.get("name", "").startswith("Optimizer.step#SGD")]
    assert len(sgd) == 3
    for op in sgd:
        (step,) = [s for s in steps if s["ts"] <= op["ts"] < s["ts"] + s["dur"]]
        assert op["ts"] + op["dur"] <= step["ts"] + step["dur"]  # ends inside it, no overlap
    # the optimizer classes are back as torch left them
    assert not getattr(torch.optim.SGD.step, "_tracekit", False)
    assert getattr(torch.optim.SGD.step, "hooked", False)


def test_warmup_and_active_keep_only_the_active_steps(workdir: Path) -> None:
    assert cli("--warmup", "2", "--active", "3", str(DATA / "train.py"), "8", "hook") == 0
    doc = load(workdir / "train.trace.json.gz")
    assert step_names(doc) == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    meta = doc["tracekit"]
    assert (meta["steps_recorded"], meta["first_step"], meta["warmup_steps"]) == (3, 2, 2)
    assert meta["options"]["active"] == 3
    sgd = [e for e in doc["traceEvents"] if e.get("name", "").startswith("Optimizer.step#SGD")]
    assert len(sgd) == 3  # one optimizer step per recorded step, none from the others


@pytest.mark.parametrize(
    ("warmup", "active", "recorded"),
    [
        (2, 3, [5, 6, 7]),  # the pieces #2..#4 filled the window: it starts again at #5 with 3 steps
        (6, 2, [10, 11]),  # the pieces #0..#4 were warm-up: 6 warm-up steps counted from #5
        (0, 2, [5, 6]),  # the window (#0, #1) was saved before the mark: a new cycle records #5, #6
        (3, 1, [5]),  # the window (#3) had ended: a new cycle records #5
    ],
)
def test_several_optimizer_steps_before_the_first_explicit_mark(
    workdir: Path, warmup: int, active: int, recorded: list[int]
) -> None:
    """Four optimizer steps per iteration, tracekit.step() at its end: the hook marks four steps in the
    first iteration (#0..#4) before the script's mark takes over. Every recorded step must be one whole
    iteration: one aten::cumsum (its first op) and four SGD steps, counted from the raw events."""
    assert cli("--warmup", str(warmup), "--active", str(active), str(DATA / "train.py"), "8", "updates") == 0
    doc = load(workdir / "train.trace.json.gz")
    assert step_names(doc) == [f"ProfilerStep#{n}" for n in recorded]
    meta = doc["tracekit"]
    assert (meta["steps_recorded"], meta["first_step"], meta["step_source"]) == (active, recorded[0], "explicit")
    steps = [e for e in doc["traceEvents"] if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    for step in steps:
        inside = [e for e in doc["traceEvents"] if e.get("cat") in ("cpu_op", "user_annotation")
                  and step["ts"] <= e["ts"] < step["ts"] + step["dur"]]
        assert sum(e["name"] == "aten::cumsum" for e in inside) == 1
        assert sum(e["name"].startswith("Optimizer.step#SGD") for e in inside) == 4


def test_warmup_alone_records_every_later_step(workdir: Path) -> None:
    assert cli("--warmup", "3", str(DATA / "train.py"), "5", "hook") == 0
    assert step_names(load(workdir / "train.trace.json.gz")) == [
        "ProfilerStep#3",
        "ProfilerStep#4",
        "ProfilerStep#5",
    ]


def test_warmup_longer_than_the_run_records_nothing(
    workdir: Path, capsys: pytest.CaptureFixture
) -> None:
    assert cli("--warmup", "10", str(DATA / "train.py"), "3", "hook") == 2
    err = capsys.readouterr().err
    assert "tracekit: error: no trace recorded: the run marked 3 steps, but --warmup 10" in err
    assert not list(workdir.glob("*.gz"))


def test_quiet_stack_and_memory_options(workdir: Path, capsys: pytest.CaptureFixture) -> None:
    assert cli("-q", "--with-stack", "--memory", str(DATA / "args_script.py")) == 0
    captured = capsys.readouterr()
    assert "tracekit:" not in captured.err and json.loads(captured.out)["sum"] == 64 * 16 * 32
    doc = load(workdir / "args_script.trace.json.gz")
    options = doc["tracekit"]["options"]
    assert (options["with_stack"], options["profile_memory"]) == (True, True)
    cats = {e.get("cat") for e in doc["traceEvents"]}
    assert "python_function" in cats  # --with-stack: Python frames
    assert any(e.get("name") == "[memory]" for e in doc["traceEvents"])  # --memory: allocations
    assert cli("--force", str(DATA / "args_script.py"), "-o", "x") == 0
    assert json.loads(capsys.readouterr().out)["argv"][1:] == ["-o", "x"]  # after SCRIPT: its args
    plain = load(workdir / "args_script.trace.json.gz")
    assert "python_function" not in {e.get("cat") for e in plain["traceEvents"]}


def test_profiler_noise_hidden_and_verdict_last(workdir: Path, capfd: pytest.CaptureFixture) -> None:
    script = workdir / "train.py"
    script.write_text("import torch\nm = torch.nn.Linear(8, 8)\nopt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
                      "for _ in range(4):\n    m(torch.randn(4, 8)).sum().backward()\n    opt.step()\n"
                      "print('script done')\n")
    from tracekit.cli import main

    assert main(["profile", "--no-bare", str(script)]) == 0
    out, err = capfd.readouterr()
    assert "script done" in out
    assert "USDT:" not in out + err and "profiler_start" not in out + err
    assert err.strip().splitlines()[-1] == "tracekit: verdict: CPU-only"  # no CUDA here: CPU activity only


def test_native_noise_filter_keeps_other_lines(capfd: pytest.CaptureFixture) -> None:
    import os

    from tracekit.profile.quiet import NativeNoise

    noise = NativeNoise()
    with noise.hidden():
        os.write(2, b"USDT:2026-12-01 15:02:37 11650:11650 SyncActivityProfilerHandler.cpp:52] profiler_start\n")
        os.write(2, b"a real warning\n")
        os.write(1, b"STAGE:2024-01-01 10:00:00 1:1 ActivityProfilerController.cpp:314] Completed Stage: Warm Up\n")
    assert capfd.readouterr() == ("", "")  # held back while hidden
    noise.release()
    assert capfd.readouterr() == ("", "a real warning\n")
