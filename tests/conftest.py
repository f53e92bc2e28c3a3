"""Shared fixtures: the third-party trace corpus beside the repo (skipped when absent)."""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from shared_analysis import CACHE_ENV

# A bug in tracekit shows its traceback under the tests (tracekit.errors.DEBUG_ENV; the CLI otherwise
# prints one "internal error" line): the tests that assert "Traceback" is absent keep catching bugs.
os.environ.setdefault("TRACEKIT_DEBUG", "1")

SHARED_TRACES = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces"
SAMPLE_TRACES = Path(__file__).resolve().parents[1] / "sample_traces"
_CACHE_FOLDER = pytest.StashKey[str]()


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (setup.cfg's addopts): one worker per CPU this process may run on. xdist's own
    count asks psutil for the host's physical cores, which a CPU-pinned container exceeds and a
    2-vCPU VM can report as 1."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def pytest_configure(config: pytest.Config) -> None:
    """The run's folder of shared analyses (tests/shared_analysis.py), made by the controlling process
    before xdist starts its workers, which inherit its environment."""
    if not hasattr(config, "workerinput") and CACHE_ENV not in os.environ:
        folder = tempfile.mkdtemp(prefix="tracekit-tests-")
        os.environ[CACHE_ENV] = folder
        config.stash[_CACHE_FOLDER] = folder


def pytest_unconfigure(config: pytest.Config) -> None:
    folder = config.stash.get(_CACHE_FOLDER, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop(CACHE_ENV, None)


@pytest.fixture(autouse=True, scope="session")
def _sigint_as_in_a_terminal() -> Iterator[None]:
    """Ctrl-C as a terminal delivers it. An xdist worker (execnet) ignores SIGINT, and an ignored
    signal stays ignored across exec: the child processes of the Ctrl-C tests ran on to exit 0, and
    their own interpreters installed no KeyboardInterrupt handler. Python's own handler here makes
    every child start with SIGINT at its default again."""
    before = signal.getsignal(signal.SIGINT)
    if before is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    if before is signal.SIG_IGN:
        signal.signal(signal.SIGINT, before)


PEEK_BYTES = 1 << 16  # Kineto writes "traceEvents" after a few KB of metadata (deviceProperties)


def is_trace_file(path: Path) -> bool:
    """The corpus's rule for a profiler trace, read with gzip alone (not with tracekit's loader):
    within its first 64 KiB the JSON is an object holding "traceEvents", or an array whose events
    carry "ph". Anything else beside the traces (xDiT's capture_traces/execution_details.json, a
    list of {file, batch_size, mode}) is a JSON file of another kind."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as fh:
        head = fh.read(PEEK_BYTES)
    if b'"traceEvents"' in head:
        return True
    return head.lstrip().startswith(b"[") and b'"ph"' in head


def _shared_json_files() -> list[Path]:
    if not SHARED_TRACES.is_dir():
        return []
    return sorted(p for p in SHARED_TRACES.rglob("*") if p.name.endswith((".json", ".json.gz")))


def shared_trace_files() -> list[Path]:
    """Every profiler trace of ../shared/traces (see is_trace_file); [] when the corpus is absent."""
    return [p for p in _shared_json_files() if is_trace_file(p)]


def shared_non_trace_files() -> list[Path]:
    """The JSON files of ../shared/traces that are not profiler traces (tests check load_trace refuses them)."""
    return [p for p in _shared_json_files() if not is_trace_file(p)]


@pytest.fixture
def shared_traces() -> Path:
    if not SHARED_TRACES.is_dir():
        pytest.skip("../shared/traces is absent (third-party trace corpus)")
    return SHARED_TRACES


def tracekit_in_process(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """`tracekit ARGS` run through tracekit.cli.main in this process (stdout and stderr captured), as a
    CompletedProcess like `subprocess.run([python, "-m", "tracekit", ...])` gives: the same command
    without a fresh interpreter's start-up. Each CLI command keeps at least one test through a real
    process; the others use this."""
    from tracekit.cli import main

    out, err = io.StringIO(), io.StringIO()
    argv = [str(a) for a in args]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as stop:  # a gate's status (diff --fail-if-slower) leaves through SystemExit
            code = stop.code if isinstance(stop.code, int) else 1
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())
