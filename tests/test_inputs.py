"""The one input set (tracekit.trace.inputs) and the output checks against it (tracekit.output):
every spelling of an input is refused as an output, special files are written in place, and the
same file given several ways is read once."""

from __future__ import annotations

import contextlib
import io
import os
import socket
import stat
import threading
import time
from pathlib import Path

import pytest

from tracekit.cli import main
from tracekit.errors import OutputError
from tracekit.output import check_target, is_input, make_temp, publish, write_atomic, write_stream
from tracekit.trace.inputs import collect_inputs, unique_files

TEXT = '{"traceEvents": []}'


def _run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "RUN"
    (run / "capture_traces").mkdir(parents=True)
    for name in ("rank0.json", "rank1.json", "capture_traces/cap.json", "capture_traces/notes.txt"):
        (run / name).write_text(TEXT)
    return run


def test_the_same_file_given_three_ways_is_one_input(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    (tmp_path / "LINK").symlink_to(run)
    os.link(run / "rank1.json", tmp_path / "hard.json")
    found = collect_inputs([run, run / ".." / "RUN" / "rank0.json", tmp_path / "LINK" / "rank1.json",
                            tmp_path / "hard.json"])
    # RUN/ lists rank0 and rank1; the other three spellings are those two files again
    assert found.traces == (run / "rank0.json", run / "rank1.json")
    assert len(found.notes) == 3 and all("read once" in n for n in found.notes)
    # capture_traces/ beside each rank file: the one .json in it (notes.txt is not a trace name)
    assert found.captures == (run / "capture_traces" / "cap.json",)
    assert found.files == (*found.traces, *found.captures)


def test_a_symlink_keeps_the_name_of_the_file_it_points_to(tmp_path: Path) -> None:
    (tmp_path / "real.json").write_text(TEXT)
    (tmp_path / "a_link.json").symlink_to(tmp_path / "real.json")
    kept, notes = unique_files([tmp_path / "a_link.json", tmp_path / "real.json"])
    assert kept == [tmp_path / "real.json"]
    assert notes == [f"{tmp_path / 'a_link.json'}: the same file as {tmp_path / 'real.json'}; read once"]


def test_a_directory_with_a_symlink_to_a_sibling_loads_one_rank(tmp_path: Path) -> None:
    from test_fuzz_corpus import base_doc, dumps

    d = tmp_path / "d"
    d.mkdir()
    (d / "rank0.json").write_text(dumps(base_doc()))
    (d / "latest.json").symlink_to(d / "rank0.json")
    from tracekit.trace.load import load_trace

    trace = load_trace(d)
    assert sorted(trace.ranks) == [0]  # not two ranks of the same 4 kernels
    assert any("read once" in w for w in trace.warnings)


def test_entries_named_like_traces_that_are_not_files_are_skipped_with_a_warning(tmp_path: Path) -> None:
    # a FIFO and a folder named *.json in a rank directory, a folder named *.json in its capture_traces/:
    # never opened (a FIFO would block), each named once in the warnings, the two rank files read
    from test_fuzz_corpus import base_doc, dumps

    run = tmp_path / "RUN"
    (run / "capture_traces" / "cap.json").mkdir(parents=True)
    for name in ("rank0.json", "rank1.json"):
        (run / name).write_text(dumps(base_doc()))
    os.mkfifo(run / "fifo.json")
    (run / "sub.json.gz").mkdir()
    expected = [f"{run / 'capture_traces' / 'cap.json'}: not a regular file; skipped",
                f"{run / 'fifo.json'}: not a regular file; skipped",
                f"{run / 'sub.json.gz'}: not a regular file; skipped"]
    found = collect_inputs(run)
    assert found.traces == (run / "rank0.json", run / "rank1.json") and found.captures == ()
    assert sorted(found.notes) == expected
    from tracekit.trace.load import load_trace

    trace = load_trace(run)
    assert sorted(trace.ranks) == [0, 1]
    assert sorted(w for w in trace.warnings if "regular" in w) == expected
    code, _, err = _cli(["info", str(run)])
    assert code == 0 and sorted(line for line in err.splitlines() if "regular" in line) == \
        [f"tracekit: warning: {w}" for w in expected]


@pytest.mark.parametrize("spelling", ["self", "dotdot", "symlink", "hardlink", "missing_dir_dotdot"])
def test_every_spelling_of_an_input_is_refused_even_with_force(tmp_path: Path, spelling: str) -> None:
    src = tmp_path / "T.json"
    src.write_text(TEXT)
    (tmp_path / "sub").mkdir()
    target = {"self": src, "dotdot": tmp_path / "sub" / ".." / "T.json", "symlink": tmp_path / "l.html",
              "hardlink": tmp_path / "h.html", "missing_dir_dotdot": tmp_path / "nope" / ".." / "T.json"}[spelling]
    if spelling == "symlink":
        target.symlink_to(src)
    if spelling == "hardlink":
        os.link(src, target)
    assert is_input(target, [src]) == src
    with pytest.raises(OutputError, match=f"{target}: is the input trace {src}"):
        check_target(target, inputs=[src], force=True)
    with pytest.raises(OutputError):
        write_atomic(target, lambda: "x", inputs=[src], force=True)
    assert src.read_text() == TEXT


def test_dev_null_is_written_in_place(tmp_path: Path) -> None:
    assert write_atomic(Path(os.devnull), lambda: "report") == Path(os.devnull)
    assert write_stream(Path(os.devnull), lambda fh: fh.write(b"x"), force=True) == Path(os.devnull)
    tmp = make_temp(Path(os.devnull))  # what profile/ does: a temp file, then publish
    assert tmp.parent != Path("/dev")
    assert publish(tmp, Path(os.devnull), force=True) == Path(os.devnull)
    assert not tmp.exists() and not os.path.lexists(os.devnull + "-1")
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_a_fifo_is_written_to_its_reader(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    deadline = time.monotonic() + 5
    while True:  # wait for the reader to open its end (open for write then succeeds)
        try:
            assert write_atomic(fifo, lambda: "é" * 100000) == fifo
            break
        except OutputError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)
    reader.join(5)
    assert got == ["é".encode() * 100000]  # every byte, in one stream (larger than a pipe buffer)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]  # no temp or numbered file


def test_a_fifo_without_reader_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    start = time.monotonic()
    with pytest.raises(OutputError, match="pipe: is a FIFO that no process reads"):
        write_atomic(fifo, lambda: "x")
    assert time.monotonic() - start < 2


def test_a_socket_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        with pytest.raises(OutputError, match="is a socket; not written"):
            check_target(path, force=True)


def _cli(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "NaN"])
def test_fail_if_slower_refuses_what_is_not_a_finite_percentage(tmp_path: Path, value: str) -> None:
    src = tmp_path / "T.json"
    src.write_text(TEXT)  # never loaded: the option is refused first
    code, out, err = _cli(["diff", str(src), str(src), "--fail-if-slower", value])
    assert code == 2 and out == ""
    assert err == (f"tracekit: error: Invalid value for '--fail-if-slower': '{value}' is not a finite "
                   "percentage >= 0 (e.g. 5)\n")


def test_diff_html_onto_a_capture_of_either_side_is_refused_before_loading(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    cap = run / "capture_traces" / "cap.json"
    code, _, err = _cli(["diff", str(tmp_path / "nowhere.json"), str(run), "--html", str(cap), "--force"])
    assert code == 2 and err.count("\n") == 1 and "nowhere.json: no such file" in err
    code, _, err = _cli(["diff", str(run / "rank0.json"), str(run), "--html", str(cap), "--force"])
    assert code == 2 and err == f"tracekit: error: {cap}: is the input trace {cap}; choose another output with --html\n"
    assert cap.read_text() == TEXT


@pytest.mark.parametrize("name", ["-x.json", "a$(touch PWNED).json", "it's.json", "plain.json"])
def test_the_export_command_pastes_back_to_the_literal_name(name: str) -> None:
    import shlex

    from tracekit.report.context import export_command

    words = shlex.split(export_command(name))
    stem = name.removesuffix(".json")
    # a name starting with '-' goes after `--`, where click takes it as the TRACE argument
    expected = (["-o", f"{stem}.annotated.json.gz", "--", name] if name.startswith("-")
                else [name, "-o", f"{stem}.annotated.json.gz"])
    assert words == ["tracekit", "export", *expected]
