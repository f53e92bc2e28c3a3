"""The package's one atomic writer: temp file beside the target (mkstemp, O_EXCL), then a publish
that replaces an existing file only with force (os.replace) and otherwise never clobbers (os.link
to a free name). Output paths that resolve to an input (through `..`, symlinks or hard links) are
refused, even with force; a character device or FIFO (/dev/null) is written in place, never renamed."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from tracekit.errors import OutputError

MAX_BESIDE = 1000  # report-1.html ... report-999.html


def numbered(path: Path, n: int) -> Path:
    """`path` with '-n' before its first suffix: report.html -> report-2.html."""
    stem, dot, ext = path.name.partition(".")
    return path.with_name(f"{stem}-{n}{dot}{ext}")


def _identity(path: str | os.PathLike) -> tuple[str, tuple[int, int] | None]:
    """(real path, (st_dev, st_ino) of the file it names, None when it names nothing)."""
    real = os.path.realpath(path)
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return real, None
    return real, (st.st_dev, st.st_ino)


def is_input(path: Path, inputs: Iterable[Path]) -> Path | None:
    """The input that `path` resolves to, if any: the same real path (through `..` and symlinks,
    even where the file does not exist yet) or the same file (st_dev/st_ino: a hard link)."""
    real, ident = _identity(path)
    for source in inputs:
        other_real, other_ident = _identity(source)
        if real == other_real or (ident is not None and ident == other_ident):
            return Path(source)
    return None


def special_kind(path: Path) -> str | None:
    """What `path` is when it exists and is neither a regular file nor a directory: 'device'
    (a character device such as /dev/null) or 'fifo', both written in place; OutputError for a
    block device or a socket. None for a regular file, a directory or a free name."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    if stat.S_ISCHR(mode):
        return "device"
    if stat.S_ISFIFO(mode):
        return "fifo"
    kind = "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a regular file"
    raise OutputError(f"{path}: is {kind}; not written (choose a file name with -o)")


def check_target(path: Path, *, inputs: Iterable[Path] = (), force: bool = False, option: str = "-o") -> None:
    """Fail early (OutputError, one line) when `path` cannot be written: it is an input (even with
    force), a directory, or its folder is missing or not writable. Run before the long work; the
    line names `option`, the one that gave the path (diff's is --html)."""
    path = Path(path)
    source = is_input(path, inputs)
    if source is not None:
        raise OutputError(f"{path}: is the input trace {source}; choose another output with {option}")
    if special_kind(path) is not None:
        return  # written in place (open_special), never renamed or replaced
    if path.is_dir():
        raise OutputError(f"{path}: is a directory; give a file name with {option}")
    parent = path.parent
    if not parent.is_dir():
        raise OutputError(f"{path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{path}: directory {parent} is not writable; choose another path with {option}")


_DEFERRED = {signal.SIGINT, signal.SIGTERM, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])}


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM/SIGHUP until the block ends (they are then handled as usual): a file
    is created and given to its cleanup, or published and its temp name removed, all or nothing."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _DEFERRED)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def make_temp(target: Path, suffix: str = ".tmp") -> Path:
    """A new empty file '.NAME.XXXX<suffix>' beside `target`, created with O_EXCL (mkstemp) and
    mode 0600 (publish() sets the final mode); OSError when the folder cannot take it. For a
    special target (/dev/null, a FIFO) the temp file goes to the system's temp folder."""
    folder = tempfile.gettempdir() if special_kind(target) is not None else target.parent  # not in /dev
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix, dir=folder)
    os.close(fd)
    return Path(tmp)


def temp_beside(target: Path) -> Path:
    """make_temp(target), failing with a one-line OutputError."""
    try:
        return make_temp(target)
    except OSError as exc:
        raise OutputError(f"{target}: cannot write in {target.parent} ({exc.strerror}); "
                          "choose another path with -o") from None


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def publish(tmp: Path, target: Path, *, force: bool = False, inputs: Iterable[Path] = ()) -> Path:
    """Give the finished temp file its final name (mode 0666 less the umask); return that name.

    With force an existing file is replaced (os.replace; never an input). Without, the first free
    name of target, target-1, ... is claimed with os.link, which fails rather than replace a file
    created meanwhile. A character device or FIFO target gets the bytes written into it instead.
    `tmp` is gone afterwards, whatever happens."""
    inputs = tuple(inputs)
    if special_kind(target) is not None:  # /dev/null, a FIFO: written in place, never renamed
        try:
            with open(tmp, "rb") as src, open_special(target) as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        finally:
            _remove(tmp)
        return target
    with signals_deferred():
        return _publish(tmp, target, force, inputs)


def _publish(tmp: Path, target: Path, force: bool, inputs: tuple[Path, ...]) -> Path:
    try:
        os.chmod(tmp, 0o666 & ~_umask())
        if force:
            if is_input(target, inputs) is not None:
                raise OutputError(f"{target}: is an input trace; not replaced")
            os.replace(tmp, target)
            return target
        for n in range(MAX_BESIDE):
            candidate = target if n == 0 else numbered(target, n)
            if _claim(tmp, candidate):
                return candidate
        raise OutputError(f"{target}: exists, and so do {MAX_BESIDE - 1} numbered files beside it; use --force")
    except OSError as exc:
        raise OutputError(f"{target}: cannot write ({exc.strerror or type(exc).__name__})") from None
    finally:
        _remove(tmp)


def _claim(tmp: Path, candidate: Path) -> bool:
    """Link `tmp` to `candidate` if that name is free (False when taken)."""
    try:
        os.link(tmp, candidate)
        return True
    except FileExistsError:
        return False
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK, errno.ENOSYS):
            raise
    # no hard links here: reserve the name exclusively, then move the temp file onto our reservation
    try:
        os.close(os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        return False
    os.replace(tmp, candidate)
    return True


def write_atomic(path: Path, produce: Callable[[], str], *, force: bool = False,
                 inputs: Iterable[Path] = ()) -> Path:
    """Render with `produce()` first, then write atomically; return the path written.

    An existing file is replaced only with force=True; otherwise the text goes to a free name beside
    it (the caller tells the user where). A failing `produce()`, write or interruption leaves no file
    behind; an output path that is one of `inputs` is refused."""
    path = Path(path)
    inputs = tuple(inputs)
    check_target(path, inputs=inputs, force=force)
    text = produce()  # may raise: nothing has been created yet
    if special_kind(path) is not None:
        with open_special(path) as fh:
            fh.write(text.encode("utf-8"))
        return path
    with contextlib.ExitStack() as cleanup:
        with signals_deferred():
            tmp = temp_beside(path)
            cleanup.callback(_remove, tmp)
        try:
            with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
                fh.write(text)
        except OSError as exc:
            raise OutputError(f"{path}: cannot write ({exc.strerror or type(exc).__name__})") from None
        return publish(tmp, path, force=force, inputs=inputs)
    raise AssertionError("unreachable")  # pragma: no cover


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def write_stream(path: Path, write: Callable[[BinaryIO], None], *, force: bool = False,
                 inputs: Iterable[Path] = ()) -> Path:
    """Like write_atomic for output too large to hold as one string: `write(fh)` streams bytes into a
    temp file beside `path`, which is then published (same rules); return the path written."""
    path = Path(path)
    inputs = tuple(inputs)
    check_target(path, inputs=inputs, force=force)
    if special_kind(path) is not None:
        with open_special(path) as special:
            write(special)
        return path
    with contextlib.ExitStack() as cleanup:
        with signals_deferred():
            tmp = temp_beside(path)
            cleanup.callback(_remove, tmp)
        try:
            with open(tmp, "wb") as fh:
                write(fh)
        except OSError as exc:
            raise OutputError(f"{path}: cannot write ({exc.strerror or type(exc).__name__})") from None
        return publish(tmp, path, force=force, inputs=inputs)
    raise AssertionError("unreachable")  # pragma: no cover


@contextlib.contextmanager
def open_special(path: Path) -> Iterator[BinaryIO]:
    """`path`, a character device (/dev/null) or a FIFO, opened for writing in place; a FIFO that
    no one reads is an OutputError at once rather than a wait forever, and so is a failed write."""
    try:
        fd = os.open(path, os.O_WRONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise OutputError(f"{path}: is a FIFO that no process reads; not written") from None
        raise OutputError(f"{path}: cannot write ({exc.strerror or type(exc).__name__})") from None
    try:
        if hasattr(os, "O_NONBLOCK"):
            os.set_blocking(fd, True)
        with open(fd, "wb") as fh:
            yield fh
    except OSError as exc:
        raise OutputError(f"{path}: cannot write ({exc.strerror or type(exc).__name__})") from None
