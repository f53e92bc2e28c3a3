"""Bad input: one clear line naming the file and the problem, exit code 2, never a traceback."""

from __future__ import annotations

import gzip
import json
import os
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


# --- validation at the loader boundary (issue: hostile values) -------------------------------
# Expected counts come from the events each test writes: N good kernels, M malformed ones.

def _kernels(b: TraceBuilder, n: int) -> None:
    for i in range(n):
        ext = b.op("aten::mm", 100 * i, 50)
        b.launch(100 * i + 5, 5, "ampere_sgemm_128x64_nn", 100 * i + 20, 10, ext=ext)


def test_multi_member_gzip_is_one_trace(tmp_path):
    b = TraceBuilder()
    _kernels(b, 3)
    text = json.dumps(b.document()).encode()
    path = tmp_path / "two.json.gz"
    path.write_bytes(gzip.compress(text[:50]) + gzip.compress(text[50:]))  # `cat a.gz b.gz`, as gzip accepts
    assert len(tracekit.load_trace(path).rank().kernels) == 3


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "-Infinity", "1e999", "sNaN", "abc", 1e300, -1e300])
def test_bad_timestamps_are_skipped_and_counted(tmp_path, bad):
    b = TraceBuilder()
    _kernels(b, 3)
    b.raw({"ph": "X", "cat": "kernel", "name": "bad_ts", "pid": 0, "tid": 7, "ts": bad, "dur": 1,
           "args": {"device": 0, "stream": 7, "correlation": 5}})
    b.raw({"ph": "X", "cat": "kernel", "name": "bad_dur", "pid": 0, "tid": 7, "ts": 10, "dur": "Infinity",
           "args": {"device": 0, "stream": 7}})
    t = tracekit.load_trace(b.write(tmp_path / "t.json"))
    r = t.rank()
    assert sorted(set(r.kernels["name"])) == ["ampere_sgemm_128x64_nn"] and len(r.kernels) == 3
    assert r.skipped == 2 and any("skipped 2 malformed events" in w for w in t.warnings)


def test_numbers_written_as_strings_are_numbers(tmp_path):
    b = TraceBuilder()
    b.raw({"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": "20", "dur": "10.5"})
    b.raw({"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 1, "ts": 40, "dur": 5})
    ops = tracekit.load_trace(b.write(tmp_path / "t.json")).rank().ops
    # origin is the first op's integer µs (20): times are relative to it
    assert ops["ts"].tolist() == [0.0, 20.0] and ops["dur"].tolist() == [10.5, 5.0]


def test_ids_beyond_int64_still_link(tmp_path):
    big, other = 2**70, 2**70 + 1
    b = TraceBuilder()
    b.raw({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 10, "dur": 5,
           "args": {"correlation": big, "External id": 2**65}})
    b.raw({"ph": "X", "cat": "kernel", "name": "k_linked", "pid": 0, "tid": 7, "ts": 20, "dur": 5,
           "args": {"device": 0, "stream": 7, "correlation": big}})
    b.raw({"ph": "X", "cat": "kernel", "name": "k_unlinked", "pid": 0, "tid": 7, "ts": 30, "dur": 5,
           "args": {"device": 0, "stream": 7, "correlation": other, "grid": [2**64, 1, 1]}})
    gpu = tracekit.load_trace(b.write(tmp_path / "t.json")).rank().gpu.set_index("name")
    assert gpu.loc["k_linked", "launch"] == 0 and gpu.loc["k_unlinked", "launch"] == -1
    assert gpu.loc["k_unlinked", "grid_x"] == -1  # a size past int64 is unknown, not an error


def test_profiler_step_past_int64_is_not_a_step(tmp_path):
    b = TraceBuilder()
    _kernels(b, 1)
    b.annotation("ProfilerStep#" + "9" * 30, 0, 200)
    b.annotation("ProfilerStep#١٢", 0, 200)  # Arabic-Indic digits: not a step number
    b.annotation("ProfilerStep#3", 0, 200)
    assert tracekit.load_trace(b.write(tmp_path / "t.json")).rank().steps["step"].tolist() == [3]


@pytest.mark.parametrize("where", ["args", "name", "Input Dims", "deviceProperties"])
def test_deep_nesting_is_one_line(tmp_path, where):
    b = TraceBuilder()
    _kernels(b, 1)
    deep = "[" * 100_000 + "]" * 100_000
    doc = json.dumps(b.document())
    if where == "deviceProperties":
        text = doc.replace('"deviceProperties": [', '"deviceProperties": [' + deep + ", ", 1)
    elif where == "args":
        text = doc.replace('"args": {', '"args": {"x": ' + deep + ", ", 1)
    elif where == "name":
        text = doc.replace('"name": "aten::mm"', '"name": ' + deep, 1)
    else:
        text = doc.replace('"args": {', '"args": {"Input Dims": ' + deep + ", ", 1)
    path = tmp_path / "deep.json"
    path.write_text(text)
    with pytest.raises(tracekit.TraceFormatError, match="nested too deeply") as info:
        tracekit.load_trace(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_wrong_typed_device_and_shape_fields_are_ignored_with_a_warning(tmp_path):
    b = TraceBuilder()
    b.top["deviceProperties"] = [{"id": 0, "name": ["H100"], "numSms": "many", "totalGlobalMem": 80e9}]
    ext = b.op("aten::mm", 0, 50, **{"Input Dims": [[64, "x"], 7], "Input type": [["float"]]})
    b.launch(5, 5, "ampere_sgemm_128x64_nn", 20, 10, ext=ext)
    t = tracekit.load_trace(b.write(tmp_path / "t.json"))
    r = t.rank()
    assert r.meta.device_name is None and r.meta.device_properties == ({"id": 0, "totalGlobalMem": 80e9},)
    assert r.ops["input_dims"].tolist() == [None] and r.ops["input_types"].tolist() == [None]
    (warning,) = [w for w in t.warnings if "ignored" in w]
    assert "deviceProperties fields of the wrong type (name, numSms)" in warning
    assert "2 op input values" in warning


def test_byte_budget_refuses_in_one_line(tmp_path, monkeypatch):
    b = TraceBuilder()
    _kernels(b, 50)
    path = b.write(tmp_path / "t.json.gz")
    size = len(gzip.decompress(path.read_bytes()))
    assert len(tracekit.load_trace(path, max_bytes=size).rank().kernels) == 50
    with pytest.raises(tracekit.TraceFormatError, match=r"larger than the .* limit") as info:
        tracekit.load_trace(path, max_bytes=size - 1)
    assert str(path) in str(info.value) and "--max-trace-bytes" in str(info.value)
    monkeypatch.setenv("TRACEKIT_MAX_TRACE_BYTES", "1K")
    with pytest.raises(tracekit.TraceFormatError, match="larger than the"):
        tracekit.load_trace(path)
    assert main(["info", str(path), "--max-trace-bytes", "1M"]) == 0  # the option wins over the variable


def test_fifo_is_refused_not_read(tmp_path):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    with pytest.raises(tracekit.TraceFormatError, match="not a regular file"):
        tracekit.load_trace(fifo)
