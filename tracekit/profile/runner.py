"""Run a script or module in this process as `python SCRIPT args` / `python -m MODULE args` would."""

from __future__ import annotations

import builtins
import importlib.util
import itertools
import os
import runpy
import sys
import traceback
import types
import zipfile
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from tracekit.errors import ProfileError
from tracekit.terminal import visible

# Exit status of a run interrupted by Ctrl-C (128 + SIGINT), as shells report it.
INTERRUPTED = 130

_HIDDEN_DIRS = tuple(
    {os.path.dirname(os.path.dirname(p)) + os.sep for p in (__file__, os.path.realpath(__file__))}
)
_HIDDEN_FILES = {runpy.__file__, "<frozen runpy>"}


@dataclass(frozen=True)
class Target:
    """What to run: a script path or a module name, with the arguments it receives."""

    script: str | None = None
    module: str | None = None
    args: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """A short name for messages and the default output file."""
        if self.module is not None:
            return self.module
        return Path(self.script or "script").stem

    @property
    def display(self) -> str:
        return f"-m {self.module}" if self.module is not None else str(self.script)

    def check(self) -> None:
        """Raise ProfileError (one line) unless the target exists and is Python."""
        if self.module is not None:
            _check_module(self.module)
        else:
            _check_script(Path(self.script or ""))

    def run(self) -> None:
        """Execute the target as __main__; whatever it raises (SystemExit too) propagates."""
        saved_argv, saved_path0 = sys.argv[:], sys.path[0] if sys.path else None
        try:
            if self.module is not None:
                sys.argv[:] = [self.module, *self.args]
                _set_path0(os.getcwd())
                runpy.run_module(self.module, run_name="__main__", alter_sys=True)
            else:
                typed = self.script or ""
                script = os.path.abspath(typed)
                sys.argv[:] = [typed, *self.args]  # as typed: python never makes argv[0] absolute
                _set_path0(script if os.path.isdir(script) else os.path.dirname(script))
                if os.path.isfile(script) and not zipfile.is_zipfile(script):
                    _run_source_file(script)
                else:  # a directory or zip with __main__.py: run_path sets argv[0] to the name given
                    runpy.run_path(typed, run_name="__main__")
        finally:
            sys.argv[:] = saved_argv
            if saved_path0 is not None:
                _set_path0(saved_path0)


def _run_source_file(script: str) -> None:
    """Execute the file at the absolute path `script` as __main__, as `python SCRIPT` does:
    __file__ and the code's file name absolute, sys.argv left as it is (runpy.run_path would
    replace argv[0] with the path it is given)."""
    with open(script, "rb") as fh:
        source = fh.read()
    code = compile(source, script, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=script, __cached__=None, __loader__=None, __package__=None,
                         __spec__=None, __builtins__=builtins)
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    try:
        exec(code, main.__dict__)
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved


def _set_path0(entry: str) -> None:
    if sys.path:
        sys.path[0] = entry
    else:
        sys.path.append(entry)


def _check_script(path: Path) -> None:
    if not path.exists():
        raise ProfileError(f"{path}: no such file")
    if path.is_dir():
        if not (path / "__main__.py").is_file():
            raise ProfileError(f"{path} is a directory without a __main__.py")
        return
    try:
        source = path.read_bytes()
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if b"\0" in source:
        raise ProfileError(f"{path} is not a Python script (it is a binary file)")
    try:
        compile(source, str(path), "exec", dont_inherit=True)
    except SyntaxError as exc:
        where = f" (line {exc.lineno})" if exc.lineno else ""
        raise ProfileError(f"{path} is not valid Python: {exc.msg}{where}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProfileError(f"{path} is not a Python script: {exc}") from None


def _check_module(name: str) -> None:
    saved = sys.path[0] if sys.path else None
    _set_path0(os.getcwd())  # where `python -m` looks first
    try:
        spec = importlib.util.find_spec(name)
        package = spec is not None and spec.submodule_search_locations is not None
        if package and importlib.util.find_spec(f"{name}.__main__") is None:
            raise ProfileError(f"{name} is a package without a __main__ module")
    except (ImportError, ValueError) as exc:
        raise ProfileError(f"cannot find module {name!r}: {exc}") from None
    finally:
        if saved is not None:
            _set_path0(saved)
    if spec is None:
        raise ProfileError(f"no module named {name!r}")


def exit_status(exc: BaseException | None) -> int:
    """The process status `python SCRIPT` would end with after `exc` (None: finished normally)."""
    if exc is None:
        return 0
    if isinstance(exc, SystemExit):
        code = exc.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code & 0xFF if code >= 0 else code % 256
        return 1
    if isinstance(exc, KeyboardInterrupt):
        return INTERRUPTED
    return 1


def report_exception(exc: BaseException) -> None:
    """Show what Python would show for `exc` leaving the script, without tracekit's frames; Ctrl-C
    (KeyboardInterrupt) is one line saying where the script was, not a traceback."""
    sys.stdout.flush()
    if isinstance(exc, KeyboardInterrupt):
        _strip_frames(exc, set())
        tb, where = exc.__traceback__, ""
        while tb is not None:
            where = f" at {visible(os.path.basename(tb.tb_frame.f_code.co_filename))} line {tb.tb_lineno}"
            tb = tb.tb_next
        print(f"tracekit: interrupted{where}; writing the trace of what ran", file=sys.stderr, flush=True)
        return
    if isinstance(exc, SystemExit):
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
        return
    _strip_frames(exc, set())
    hook = sys.excepthook
    if hook is not sys.__excepthook__:
        try:
            hook(type(exc), exc, exc.__traceback__)
            return
        except Exception:
            pass
    traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    sys.stderr.flush()


def _hidden(tb: TracebackType) -> bool:
    filename = tb.tb_frame.f_code.co_filename
    return filename in _HIDDEN_FILES or filename.startswith(_HIDDEN_DIRS)


def _strip_frames(exc: BaseException, seen: set[int]) -> None:
    """Unlink runpy's and tracekit's frames from exc's traceback (and its cause/context chain)."""
    if id(exc) in seen:
        return
    seen.add(id(exc))
    kept: list[TracebackType] = []
    tb = exc.__traceback__
    while tb is not None:
        if not _hidden(tb):
            kept.append(tb)
        tb = tb.tb_next
    for earlier, later in itertools.pairwise(kept):
        earlier.tb_next = later
    if kept:
        kept[-1].tb_next = None
        exc.__traceback__ = kept[0]
    for linked in (exc.__cause__, exc.__context__):
        if linked is not None:
            _strip_frames(linked, seen)
