"""`tracekit profile` end to end in a subprocess: arguments, failures, Ctrl-C, missing torch."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data" / "profile"


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(DATA), env.get("PYTHONPATH", "")])
    env.pop("TRITON_INTERPRET", None)
    env.update(extra)
    return env


def run_cli(cwd: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 240):
    return subprocess.run(
        [sys.executable, "-m", "tracekit", "profile", "--no-report", *args],
        cwd=cwd,
        env=env or _env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def load(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def step_names(doc: dict) -> list[str]:
    return sorted(
        e["name"]
        for e in doc["traceEvents"]
        if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("ProfilerStep#")
    )


def ops(doc: dict, name: str) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op" and e.get("name") == name]


def last_json_line(stdout: str) -> dict:
    return json.loads([line for line in stdout.splitlines() if line.startswith("{")][-1])


def test_script_gets_its_args_and_the_trace_has_its_ops(tmp_path: Path) -> None:
    script = DATA / "args_script.py"
    res = run_cli(tmp_path, "--record-command", str(script), "--", "--lr", "3", "-x")
    assert res.returncode == 0, res.stderr
    seen = last_json_line(res.stdout)
    assert seen["argv"] == [str(script), "--", "--lr", "3", "-x"]  # as `python SCRIPT -- --lr 3 -x` gives
    assert seen["name"] == "__main__"
    assert seen["path0"] == str(DATA)
    assert seen["sum"] == 64 * 16 * 32
    assert "CPU activity only" in res.stderr
    assert "trace written to args_script.trace.json.gz" in res.stderr
    doc = load(tmp_path / "args_script.trace.json.gz")
    meta = doc["tracekit"]
    assert meta["mode"] == "script" and meta["target"] == str(script)  # as given (--record-command)
    assert meta["command"][:2] == ["tracekit", "profile"] and meta["command"][-3:] == ["--lr", "3", "-x"]
    assert meta["cwd"] == str(tmp_path)
    assert meta["exit_status"] == 0 and meta["cuda"] is False
    assert meta["steps_marked"] == 0 and meta["steps_recorded"] == 0
    assert meta["options"]["record_shapes"] is True
    assert meta["torch"] and meta["version"]
    (mm,) = [e for e in ops(doc, "aten::mm")]
    assert mm["args"]["Input Dims"] == [[64, 32], [32, 16]]
    assert step_names(doc) == []  # no step marked: no whole-run ProfilerStep#0 either
    assert doc["traceName"] == "args_script.trace.json.gz"


def test_failing_script_shows_its_own_traceback_and_keeps_the_trace(tmp_path: Path) -> None:
    res = run_cli(tmp_path, str(DATA / "failing.py"))
    assert res.returncode == 1
    err = res.stderr
    assert "Traceback (most recent call last):" in err
    assert 'failing.py", line' in err and "in outer" in err and "in inner" in err
    assert "ValueError: boom from the script" in err
    assert "tracekit" not in err.split("Traceback")[1].split("ValueError")[0]
    assert "runpy" not in err
    doc = load(tmp_path / "failing.trace.json.gz")
    assert doc["tracekit"]["exit_status"] == 1
    assert [e["args"]["Input Dims"] for e in ops(doc, "aten::relu")] == [[[16, 16]]]


@pytest.mark.parametrize(
    ("sig", "status", "shown"),
    [(signal.SIGINT, 130, "tracekit: interrupted at sigint.py line"), (signal.SIGTERM, 143, "trace written")],
)
def test_interrupted_script_keeps_its_trace(
    tmp_path: Path, sig: signal.Signals, status: int, shown: str
) -> None:
    # --no-bare: unsignalled, the run without the profiler would loop for sigint.py's whole 60 s
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracekit", "profile", "--no-report", "--no-bare", str(DATA / "sigint.py")],
        cwd=tmp_path,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "READY"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == status, err
    assert shown in err
    assert "trace written to sigint.trace.json.gz" in err
    doc = load(tmp_path / "sigint.trace.json.gz")
    assert doc["tracekit"]["exit_status"] == status
    assert len(ops(doc, "aten::tanh")) >= 1


def test_not_python_gives_one_line_and_status_2(tmp_path: Path) -> None:
    (tmp_path / "blob.py").write_bytes(b"\x7fELF\x00\x01")
    res = run_cli(tmp_path, "blob.py")
    assert res.returncode == 2
    assert res.stderr == "tracekit: error: blob.py is not a Python script (it is a binary file)\n"
    assert res.stdout == "" and not list(tmp_path.glob("*.gz"))


def test_missing_torch_says_how_to_install(tmp_path: Path) -> None:
    fake = tmp_path / "fake"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text("raise ImportError('No module named torch')\n")
    env = _env()
    env["PYTHONPATH"] = os.pathsep.join([str(fake), env["PYTHONPATH"]])
    res = run_cli(tmp_path, str(DATA / "args_script.py"), env=env)
    assert res.returncode == 2
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith("tracekit: error: torch is not installed")
    assert line.endswith("pip install 'tracekit[profile]'")
