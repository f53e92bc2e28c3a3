"""A bug in one part of the analysis (a rank's pattern detectors, one suggestion rule, the pricing) leaves that part out and says so in one warning, instead of ending the run."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pandas as pd

from tracekit.analyzers.detectors import attention, hostside, sequences
from tracekit.analyzers.detectors.patterns import Patterns
from tracekit.errors import DEBUG_ENV, bug_line, debugging
from tracekit.trace.model import RankTrace

T = TypeVar("T")


def failure_note(part: str, exc: BaseException, consequence: str) -> str:
    """The warning for a bug in `part`: what failed, where, and what the output leaves out."""
    return (f"tracekit bug: {part} failed ({bug_line(exc)}); {consequence} "
            f"(please report it with the trace; {DEBUG_ENV}=1 raises it)")


def attempt(part: str, run: Callable[[], T], fallback: Callable[[], T], consequence: str) -> tuple[T, str | None]:
    """(run(), None), or (fallback(), the failure's warning) when `run` raises an Exception; with
    DEBUG_ENV set (the test suite sets it) the exception propagates. Interrupts, MemoryError and
    RecursionError always propagate: they are the run's to report, not a part's."""
    try:
        return run(), None
    except (MemoryError, RecursionError):
        raise
    except Exception as exc:
        if debugging():
            raise
        return fallback(), failure_note(part, exc, consequence)


def _empty(columns: tuple[str, ...] | list[str]) -> pd.DataFrame:
    return pd.DataFrame(columns=list(columns))


def empty_patterns(rank: RankTrace) -> Patterns:
    """The Patterns of a rank whose detectors failed: every table empty with its columns (the rest at
    their empty defaults); the rules are not run on it (analysis.RankAnalysis.patterns_failure)."""
    return Patterns(rank=int(rank.rank), num_sms=None,
                    chains=_empty(sequences.CHAIN_COLUMNS), loops=_empty(sequences.LOOP_COLUMNS),
                    attention=_empty(attention.ATTENTION_COLUMNS), syncs=_empty(hostside.SYNC_COLUMNS),
                    copies=_empty(hostside.COPY_COLUMNS), dataloader=_empty(hostside.DATALOADER_COLUMNS),
                    comm=_empty(hostside.COMM_COLUMNS))
