"""Atomic output: write to a temp file in the target directory, then os.replace; never clobber without force."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from tracekit.errors import OutputError

MAX_BESIDE = 1000  # report-1.html ... report-999.html


def free_path(path: Path) -> Path:
    """`path` if it does not exist, else the first 'name-N.ext' beside it that does not."""
    if not path.exists():
        return path
    name = path.name
    stem, dot, ext = name.partition(".")
    for n in range(1, MAX_BESIDE):
        candidate = path.with_name(f"{stem}-{n}{dot}{ext}")
        if not candidate.exists():
            return candidate
    raise OutputError(f"{path}: exists, and so do {MAX_BESIDE - 1} numbered files beside it; use --force")


@contextlib.contextmanager
def atomic_file(path: Path, *, force: bool = False) -> Iterator[tuple[BinaryIO, Path]]:
    """(binary file, final path) to write to: a temp file beside the target, moved into place only when
    the block finishes. An existing file is replaced only with force=True, otherwise the output goes
    to a free name beside it. An exception inside the block leaves no file behind."""
    path = Path(path)
    if path.is_dir():
        raise OutputError(f"{path}: is a directory; give a file name with -o")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise OutputError(f"{path}: directory {parent} does not exist")
    target = path if force else free_path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=parent)
    except OSError as exc:
        raise OutputError(f"{target}: cannot write in {parent} ({exc.strerror}); choose another path with -o") from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh, target
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise OutputError(f"{target}: cannot write ({exc.strerror})") from exc
        raise


def write_atomic(path: Path, produce: Callable[[], str], *, force: bool = False) -> Path:
    """Render with `produce()` first, then write atomically; return the path written.

    An existing file is replaced only with force=True; otherwise the text goes to a free name beside
    it (the caller tells the user where). A failing `produce()` or write leaves no file behind.
    """
    path = Path(path)
    if path.is_dir():
        raise OutputError(f"{path}: is a directory; give a file name with -o")
    text = produce()  # may raise: nothing has been created yet
    with atomic_file(path, force=force) as (fh, target):
        fh.write(text.encode("utf-8"))
    return target
