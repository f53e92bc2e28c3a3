"""tracekit: why PyTorch and Triton code is slow on a GPU, and what to change.

The package root is light: importing it loads no pandas, jinja2 or torch. Each public name is
imported from its layer on first use (PEP 562 module __getattr__). `tracekit.profile` is the
subpackage; its context manager is `tracekit.profile_run` (also `tracekit.profile.profile`).
"""

from __future__ import annotations

from tracekit import _startup

_startup.install()  # first: Ctrl-C during the CLI's imports is one line (tracekit._startup)

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
