"""The one orchestration: load -> analyze -> suggest -> compact per-rank result, in parallel; merge; write.

The package is light: the step options are here, everything else (tracekit.pipeline.core and the
modules beside it) is imported on first use (PEP 562), so that `--help` or a missing file loads no
pandas."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tracekit.analyzers.step_selection import (
    STEADY_STEPS,
    StepSelection,
    StepsError,
)

if TYPE_CHECKING:
    from tracekit.pipeline.core import (
        RankFailure,
        RankResult,
        RankTask,
        RunResult,
        analyze_rank_file,
        display_path,
        lost_rank,
        merge,
        peak_rss_kb,
        resolve_inputs,
        run,
        task_path,
    )

__all__ = ["STEADY_STEPS", "RankFailure", "RankResult", "RankTask", "RunResult", "StepSelection", "StepsError",
           "analyze_rank_file", "display_path", "lost_rank", "merge", "peak_rss_kb", "resolve_inputs", "run",
           "task_path"]


def __getattr__(name: str) -> Any:
    """The names of tracekit.pipeline.core, imported the first time one is used."""
    if name.startswith("__"):
        raise AttributeError(f"module 'tracekit.pipeline' has no attribute {name!r}")
    core = importlib.import_module("tracekit.pipeline.core")
    try:
        value = getattr(core, name)
    except AttributeError:
        raise AttributeError(f"module 'tracekit.pipeline' has no attribute {name!r}") from None
    globals()[name] = value
    return value
