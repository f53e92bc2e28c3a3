"""One load and one analysis per trace file for a whole test run, shared by the xdist workers: the
first process that needs a file loads and analyses it (`tracekit.pipeline.local`'s defaults) and
pickles (Trace, LocalResult) into the run's cache folder; every later call, in any worker, unpickles
its own copy, so no test sees another test's objects. Without the run's folder (conftest sets
TRACEKIT_TEST_CACHE) it computes every time, as the pipeline does."""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # conftest imports this module: tracekit loads only when a test analyses a file
    from tracekit.pipeline.local import LocalResult
    from tracekit.trace.model import Trace

CACHE_ENV = "TRACEKIT_TEST_CACHE"
_CACHED_ROOTS = tuple(Path(__file__).resolve().parents[1].joinpath(p).resolve() for p in ("sample_traces", "../shared/traces"))
MIN_FREE_BYTES = 8 << 30  # a run pickles about 5 GB (about 9 MB a trace); with less room left, compute instead
WAIT_S = 600.0  # a lock older than this is a worker that died while analysing: compute here instead


def _compute(path: Path) -> tuple[Trace, LocalResult]:
    from tracekit.pipeline.local import analyse_trace, load_file

    trace = load_file(path)
    return trace, analyse_trace(trace)


def _key(path: Path) -> str:
    """The file as the caller spelled it (and where that is now), its size and modification time."""
    st = path.stat()
    return hashlib.sha1(f"{path}|{path.absolute()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()


def _read(final: Path) -> tuple[Trace, LocalResult]:
    with final.open("rb") as f:
        found: tuple[Trace, LocalResult] = pickle.load(f)
    return found


def loaded_and_analysed(where: str | os.PathLike[str]) -> tuple[Trace, LocalResult]:
    """(load_file(where), analyse_trace(that trace)), computed once per run for a file of the sample
    or shared traces; any other path (a test's own temporary trace) is computed on each call."""
    path = Path(where)  # as given: the trace and the result keep the caller's spelling of the path
    folder = os.environ.get(CACHE_ENV)
    if not folder or not Path(folder).is_dir() or not any(path.resolve().is_relative_to(r) for r in _CACHED_ROOTS):
        return _compute(path)
    final = Path(folder) / f"{_key(path)}.pickle"
    if not final.exists() and shutil.disk_usage(folder).free < MIN_FREE_BYTES:
        return _compute(path)
    lock = final.with_suffix(".lock")
    waited = time.monotonic()
    while not final.exists():
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:  # another worker is analysing this file: its result comes soon
            if time.monotonic() - waited > WAIT_S:
                return _compute(path)
            time.sleep(0.05)
            continue
        os.close(fd)
        try:
            found = _compute(path)
            part = final.with_suffix(f".{os.getpid()}.part")
            with part.open("wb") as f:
                pickle.dump(found, f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(part, final)
        finally:
            lock.unlink(missing_ok=True)
        return found
    return _read(final)


def analysed_file(where: str | os.PathLike[str]) -> LocalResult:
    """analyse_file(where) with its defaults (see loaded_and_analysed)."""
    return loaded_and_analysed(where)[1]
