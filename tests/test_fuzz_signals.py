"""Interruption and output safety: SIGINT/SIGTERM at start-up, load, analysis or writing leave no temp
file and no partial report, print one line and exit 130/143; outputs respect the umask, are never an
input and never replace a file without --force (even one created after the free-name check)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tracebuilder import TraceBuilder

from tracekit import output
from tracekit.cli import main
from tracekit.errors import OutputError

REPO = Path(__file__).resolve().parents[1]
BIG = REPO / "sample_traces" / "gpt2_decode.trace.json.gz"


def _small(tmp_path: Path) -> Path:
    b = TraceBuilder()
    ext = b.op("aten::mm", 0, 50)
    b.launch(5, 5, "ampere_sgemm_128x64_nn", 20, 10, ext=ext)
    return b.write(tmp_path / "T.json")


def _spawn(args: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tracekit", *args], cwd=cwd, env=dict(os.environ),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize(("sig", "delay"), [(signal.SIGTERM, 0.8), (signal.SIGTERM, 2.0), (signal.SIGINT, 1.2)])
def test_signal_during_report_leaves_nothing_behind(tmp_path: Path, sig: int, delay: float) -> None:
    out = tmp_path / "r.html"
    proc = _spawn(["report", str(BIG), "-o", str(out)], tmp_path)
    time.sleep(delay)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "r.html"]
    assert leftovers == []
    assert "Traceback" not in err
    # finished before the signal (0), or the signal came while the interpreter was exiting after
    # the report was written (Python restores the default handlers then: -sig): a complete report
    if proc.returncode in (0, -sig) and out.exists():
        assert out.read_text(encoding="utf-8").rstrip().endswith("</html>")
    else:
        assert proc.returncode == 128 + sig, err
        assert err.strip().splitlines()[-1] in ("tracekit: terminated", "tracekit: interrupted"), err
        assert not out.exists()


@pytest.mark.parametrize("delay", [0.15, 0.3, 0.45, 0.6])
def test_ctrl_c_at_start_up_is_one_line(tmp_path: Path, delay: float) -> None:
    proc = _spawn(["info", str(_small(tmp_path))], tmp_path)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    if "Fatal Python error: init_import_site" in err:
        pytest.skip("the signal came while the interpreter itself started (site), before any tracekit code")
    assert "Traceback" not in err, err
    # 0: it had finished; -2: the interpreter had not started Python code yet; else one line, 130
    assert proc.returncode in (0, 130, -signal.SIGINT), (proc.returncode, err)
    if proc.returncode == 130:
        assert err.strip() == "tracekit: interrupted"


def test_interrupt_while_writing_removes_the_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture) -> None:
    trace = _small(tmp_path)
    opened: list[str] = []

    def open_then_interrupt(path: object, *args: object, **kwargs: object) -> object:
        opened.append(Path(str(path)).name)
        open(path, *args, **kwargs).close()
        raise KeyboardInterrupt

    monkeypatch.setattr(output, "open", open_then_interrupt, raising=False)
    code = main(["report", str(trace), "-o", str(tmp_path / "r.html")])
    monkeypatch.undo()
    assert opened and opened[0].startswith(".r.html.") and opened[0].endswith(".tmp")
    assert code == 130
    assert sorted(p.name for p in tmp_path.iterdir()) == ["T.json"]
    assert capsys.readouterr().err.strip().splitlines()[-1] == "tracekit: interrupted"


def test_report_mode_follows_the_umask(tmp_path: Path) -> None:
    trace = _small(tmp_path)
    old = os.umask(0o027)
    try:
        assert main(["report", str(trace), "-o", str(tmp_path / "r.html"), "-q"]) == 0
    finally:
        os.umask(old)
    assert (tmp_path / "r.html").stat().st_mode & 0o777 == 0o640


def test_publish_never_replaces_a_file_created_after_the_check(tmp_path: Path) -> None:
    target = tmp_path / "r.html"
    output.check_target(target)  # the name is free at check time...
    assert not target.exists()
    target.write_text("someone else's")  # ...then another process takes it
    tmp = output.temp_beside(target)
    tmp.write_text("ours")
    written = output.publish(tmp, target)
    assert written == tmp_path / "r-1.html" and written.read_text() == "ours"
    assert target.read_text() == "someone else's"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r-1.html", "r.html"]


def test_force_never_replaces_an_input(tmp_path: Path) -> None:
    trace = _small(tmp_path)
    before = trace.read_bytes()
    (tmp_path / "sub").mkdir()
    for spelled in (trace, tmp_path / "sub" / ".." / "T.json"):
        with pytest.raises(OutputError, match="is the input trace"):
            output.write_atomic(spelled, lambda: "<html>", force=True, inputs=[trace])
    tmp = output.temp_beside(trace)
    with pytest.raises(OutputError, match="is an input trace"):
        output.publish(tmp, trace, force=True, inputs=[trace])
    assert trace.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["T.json", "sub"]


def test_output_checked_before_the_trace_is_loaded(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """`-o` naming a directory fails at once, even on a trace that would take long to load."""
    start = time.process_time()  # CPU time (every thread's): loading the trace would cost seconds of it
    assert main(["report", str(BIG), "-o", str(tmp_path)]) == 2
    assert time.process_time() - start < 0.5
    assert "is a directory" in capsys.readouterr().err


def test_version_and_help_import_no_command(tmp_path: Path) -> None:
    code = ("import sys, tracekit.cli as c; c.main(['--help']); "
            "print(sorted(m for m in sys.modules if m.startswith(('pandas', 'jinja2', 'torch', 'tracekit.cli.'))))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    assert res.stdout.strip().splitlines()[-1] == "['tracekit.cli.group']", res.stdout + res.stderr
    res = subprocess.run([sys.executable, "-c", "import sys, tracekit; import tracekit.profile.session as s; "
                          "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pandas', 'jinja2', 'torch')))"],
                         capture_output=True, text=True, env=dict(os.environ))
    assert res.returncode == 0 and res.stdout.strip() == "[]", res.stdout + res.stderr


def test_profile_never_writes_over_its_own_script(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    pytest.importorskip("torch")
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    assert main(["profile", "--no-report", "-o", str(script), "--force", str(script)]) == 2
    assert script.read_text() == "print('hi')\n"
    assert "is the script being profiled" in capsys.readouterr().err
