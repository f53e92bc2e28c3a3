"""A bug in tracekit ends as one line naming the command, the exception and the innermost tracekit frame,
exit 70; TRACEKIT_DEBUG=1 shows the traceback instead. (A bug in a pattern detector or a rule does not
end the run: tests/test_isolation.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from tracekit.analyzers import analysis
from tracekit.cli import main

SAMPLE = Path(__file__).resolve().parent.parent / "sample_traces" / "small_matmul_loop.trace.json.gz"


def _broken(*args: object, **kwargs: object) -> object:
    raise ValueError("max() iterable argument is empty")


def test_a_bug_is_one_line_and_exit_70(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("TRACEKIT_DEBUG", raising=False)
    monkeypatch.setattr(analysis, "roofline", _broken)
    code = main(["analyze", str(SAMPLE)])
    err = capsys.readouterr().err
    assert code == 70
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err
    assert lines[0].startswith("tracekit: internal error in `tracekit analyze`: ValueError: max() iterable argument is empty at ")
    # the innermost tracekit frame: the test's stand-in raised it, so the frame that called it
    assert "tracekit/analyzers/analysis.py:" in lines[0] and "TRACEKIT_DEBUG=1" in lines[0]


def test_debug_shows_the_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEKIT_DEBUG", "1")
    monkeypatch.setattr(analysis, "roofline", _broken)
    with pytest.raises(ValueError, match="iterable argument is empty"):
        main(["analyze", str(SAMPLE)])


def _interrupted_in_set_name(*args: object, **kwargs: object) -> object:
    """What Python raises when Ctrl-C lands in a class body's `__set_name__` (a dataclass field while a
    module imports: seen in CI's start-up Ctrl-C test): a RuntimeError caused by the KeyboardInterrupt."""
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt as exc:
        raise RuntimeError("Error calling __set_name__ on 'Field' instance 'x' in 'Patterns'") from exc


def test_ctrl_c_wrapped_by_python_is_an_interruption(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Even with TRACEKIT_DEBUG=1 (bugs raise), a RuntimeError whose cause is a KeyboardInterrupt ends as
    the one `interrupted` line and exit 130, like Ctrl-C itself."""
    monkeypatch.setenv("TRACEKIT_DEBUG", "1")
    monkeypatch.setattr(analysis, "roofline", _interrupted_in_set_name)
    code = main(["analyze", str(SAMPLE)])
    err = capsys.readouterr().err
    assert code == 130
    assert err.strip() == "tracekit: interrupted"
