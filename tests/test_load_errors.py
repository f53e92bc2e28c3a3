"""Bad input: one clear line naming the file and the problem, exit code 2, never a traceback."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest
from tracebuilder import TraceBuilder

import tracekit
from tracekit.cli import main


def _gemm_trace(tmp_path):
    b = TraceBuilder()
    ext = b.op("aten::mm", 0, 50)
    b.launch(5, 5, "gemm", 20, 10, ext=ext)
    return b.write(tmp_path / "good.json")


def _cases(tmp_path):
    good = _gemm_trace(tmp_path).read_bytes()
    (tmp_path / "empty.json").write_bytes(b"")
    (tmp_path / "truncated.json").write_bytes(good[: len(good) // 2])
    gz = gzip.compress(good)
    (tmp_path / "truncated.json.gz").write_bytes(gz[: len(gz) // 2])
    (tmp_path / "notatrace.json").write_text(json.dumps({"hello": [1, 2, 3]}))
    (tmp_path / "noevents.json").write_text(json.dumps({"traceEvents": []}))
    (tmp_path / "scalar.json").write_text("42")
    (tmp_path / "garbage.json.gz").write_bytes(b"\x1f\x8bnot really gzip")
    (tmp_path / "emptydir").mkdir()
    return {
        "missing.json": "no such file or directory",
        "empty.json": "file is empty",
        "truncated.json": "truncated JSON",
        "truncated.json.gz": "truncated gzip",
        "notatrace.json": "not a PyTorch profiler trace",
        "noevents.json": "no events",
        "scalar.json": "not a PyTorch profiler trace",
        "garbage.json.gz": "gzip",
        "emptydir": "no trace files",
    }


def test_each_bad_input_raises_one_line_naming_the_file(tmp_path):
    for name, reason in _cases(tmp_path).items():
        with pytest.raises(tracekit.TraceFormatError) as info:
            tracekit.load_trace(tmp_path / name)
        message = str(info.value)
        assert name in message and reason in message, message
        assert "\n" not in message


def test_cli_exit_code_2_and_no_traceback(tmp_path, capsys):
    for name, reason in _cases(tmp_path).items():
        assert main(["info", str(tmp_path / name)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("tracekit: error: ") and reason in err
        assert "Traceback" not in err


def test_cli_in_a_subprocess_writes_nothing_to_stdout(tmp_path):
    (tmp_path / "bad.json").write_text("{")
    proc = subprocess.run([sys.executable, "-m", "tracekit", "info", str(tmp_path / "bad.json")],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().startswith("tracekit: error:") and "Traceback" not in proc.stderr


def test_directory_with_one_bad_file_loads_the_rest_with_a_warning(tmp_path):
    d = tmp_path / "ranks"
    d.mkdir()
    _gemm_trace(tmp_path).rename(d / "rank-0.json")
    (d / "rank-1.json").write_text("{")
    t = tracekit.load_trace(d)
    assert list(t.ranks) == [0]
    assert any("rank-1.json" in w and "JSON" in w for w in t.warnings)


def test_cpu_only_trace_is_not_an_error(tmp_path, capsys):
    b = TraceBuilder()
    b.op("aten::add", 0, 1)
    assert main(["info", str(b.write(tmp_path / "cpu.json"))]) == 0
    captured = capsys.readouterr()
    assert "CPU-only" in captured.out and "CPU-only" in captured.err


class _Terminal:
    def __init__(self) -> None:
        self.text = ""

    def isatty(self) -> bool:
        return True

    def write(self, s: str) -> None:
        self.text += s

    def flush(self) -> None:
        pass


def test_progress_only_on_a_terminal_and_not_quiet(tmp_path, monkeypatch):
    from tracekit.trace.load import stderr_progress

    b = TraceBuilder()
    ext = b.op("aten::mm", 0, 50)
    b.launch(5, 5, "gemm", 20, 10, ext=ext)
    path = b.write(tmp_path / "t.json")
    term = _Terminal()
    monkeypatch.setattr("sys.stderr", term)
    assert stderr_progress(quiet=True) is None
    tracekit.load_trace(path, progress=stderr_progress(after_s=0.0))
    assert "reading t.json: 100%" in term.text
    monkeypatch.setattr(term, "isatty", lambda: False)
    assert stderr_progress(after_s=0.0) is None


def test_random_damage_never_escapes_as_another_exception(tmp_path):
    import random

    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 500)
    for i in range(20):
        ext = b.op(f"aten::op{i}", 10 * i, 8, **{"Input Dims": [[i, 2]], "Input type": ["float"]})
        b.launch(10 * i + 1, 2, f"kernel_{i}", 10 * i + 5, 3, ext=ext, flows=True)
    good = json.dumps(b.document()).encode()
    rng = random.Random(1234)
    outcomes = {"loaded": 0, "error": 0}
    for case in range(300):
        data = bytearray(good)
        if case % 3 == 0:
            data = data[: rng.randrange(1, len(data))]
        else:
            for _ in range(rng.randrange(1, 4)):
                data[rng.randrange(len(data))] = rng.choice(b'{}[],:"0123456789eE.-x ')
        path = tmp_path / f"damaged{case}.json"
        path.write_bytes(bytes(data))
        try:
            t = tracekit.load_trace(path)
            assert len(t.rank().gpu) <= 20
            outcomes["loaded"] += 1
        except tracekit.TraceFormatError as exc:
            assert str(path) in str(exc) and "\n" not in str(exc)
            outcomes["error"] += 1
    assert outcomes["loaded"] > 10 and outcomes["error"] > 100
