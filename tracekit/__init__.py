"""tracekit: why PyTorch and Triton code is slow on a GPU, and what to change.

The package root is light: importing it loads no pandas, jinja2 or torch. Each public name is
imported from its layer on first use (PEP 562 module __getattr__). `tracekit.profile` is the
subpackage; its context manager is `tracekit.profile_run` (also `tracekit.profile.profile`).
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # builtin, loaded: nothing to read or compile
import os as _os
import sys as _sys


def _interrupted_early(signum: int, frame: object) -> None:
    """Ctrl-C while tracekit._startup itself loads (it is read and compiled first where no bytecode is
    cached): one line and 128 + the signal, as _startup's handler; nothing has been printed yet."""
    _os.write(2, b"tracekit: interrupted\n")
    _os._exit(128 + signum)


_argv0 = (getattr(_sys, "argv", None) or [""])[0]
if (_argv0 == "-m" or _os.path.basename(_argv0) in ("tracekit", "tracekit.exe", "tracekit-script.py")) \
        and _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
    _signal.signal(_signal.SIGINT, _interrupted_early)  # the CLI (tracekit._startup's _CLI_NAMES): before anything else

from tracekit import _startup  # noqa: E402

_startup.install(_interrupted_early)  # Ctrl-C during the CLI's imports is one line (tracekit._startup)

import importlib  # noqa: E402  (after the Ctrl-C handler)
from typing import Any  # noqa: E402

from tracekit._version import __version__ as __version__  # noqa: E402

# public name -> (module, attribute)
_LAZY: dict[str, tuple[str, str]] = {
    "analyze": ("tracekit.analyzers", "analyze"),
    "analyse_trace": ("tracekit.pipeline.local", "analyse_trace"),
    "analyse_file": ("tracekit.pipeline.local", "analyse_file"),
    "OutputError": ("tracekit.errors", "OutputError"),
    "ProfileError": ("tracekit.errors", "ProfileError"),
    "TraceFormatError": ("tracekit.errors", "TraceFormatError"),
    "TracekitError": ("tracekit.errors", "TracekitError"),
    "ProfileRun": ("tracekit.profile.record", "ProfileRun"),
    "profile_run": ("tracekit.profile.api", "profile"),
    "profile_callable": ("tracekit.profile.api", "profile_callable"),
    "step": ("tracekit.profile.steps", "step"),
    "step_range": ("tracekit.profile.steps", "step_range"),
    "render_html": ("tracekit.pipeline.reports", "render_html"),
    "write_report": ("tracekit.pipeline.reports", "write_report"),
    "Suggestion": ("tracekit.suggestions", "Suggestion"),
    "suggest": ("tracekit.suggestions", "suggest"),
    "load_trace": ("tracekit.trace.load", "load_trace"),
    "RankTrace": ("tracekit.trace.model", "RankTrace"),
    "Trace": ("tracekit.trace.model", "Trace"),
    "TraceMeta": ("tracekit.trace.model", "TraceMeta"),
}

__all__ = sorted([*_LAZY, "__version__", "profile"])


def __getattr__(name: str) -> Any:
    """Import a public name from its layer the first time it is used."""
    if name == "profile":  # the subpackage (tracekit.profile.profile is the context manager)
        return importlib.import_module("tracekit.profile")
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'tracekit' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
