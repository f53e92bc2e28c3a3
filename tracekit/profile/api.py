"""Python API: `with tracekit.profile_run() as run:` (tracekit.profile.profile) around any code, and `tracekit.profile_callable(fn)`."""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any

from tracekit.errors import ProfileError
from tracekit.profile.record import (
    ProfileRun,
    default_output,
    finish,
    nothing_recorded,
    per_rank_path,
    plan_outputs,
    provenance,
)
from tracekit.profile.runner import exit_status
from tracekit.profile.session import ProfileOptions, Session, require_torch

if TYPE_CHECKING:
    from tracekit.pipeline.types import Analysis


def _resolve(output: str | Path | None, stem: str) -> Path:
    if output is None:
        return per_rank_path(default_output(stem, unique=True))
    return per_rank_path(Path(output).expanduser().absolute())


class Profiling:
    """The handle of `with tracekit.profile_run(...) as run:`; `run.result` is set when the block ends.

    Inside the block, `run.step()` (or `tracekit.step()`) marks step boundaries; optimizer steps are
    marked automatically. The trace is written even if the block raises (the error propagates).
    """

    def __init__(
        self,
        output: str | Path | None = None,
        *,
        warmup: int = 0,
        active: int | None = None,
        with_stack: bool = False,
        memory: bool = False,
        force: bool = False,
        report: bool = True,
        name: str = "profile",
    ) -> None:
        self.options = ProfileOptions(
            with_stack=with_stack, memory=memory, warmup=warmup, active=active
        )
        self._output = output
        self._force = force
        self._report = report
        self._name = name
        self._session: Session | None = None
        self._report_path: Path | None = None
        self.trace_path: Path | None = None
        self.result: ProfileRun | None = None
        self._pid = os.getpid()

    def __enter__(self) -> Profiling:
        require_torch()
        self.trace_path = _resolve(self._output, self._name)
        self._report_path = plan_outputs(self.trace_path, force=self._force, report=self._report)
        self._session = Session(self.options)
        self._session.start()
        self._pid = os.getpid()
        return self

    def step(self) -> None:
        """Mark the end of one step."""
        if self._session is not None:
            self._session.mark_step(explicit=True)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        session, trace_path = self._session, self.trace_path
        if session is None or trace_path is None or os.getpid() != self._pid:
            return  # a child forked inside the block: the profiler and the trace are the parent's
        session.stop()
        meta = provenance(
            session,
            mode="api",
            target=self._name,
            command=sys.argv,
            exit_status=exit_status(exc),
        )
        self.result = finish(
            session, trace_path, meta, report_path=self._report_path, force=self._force
        )
        _warn_report(self.result)
        if self.result is None and exc is None:
            raise ProfileError(nothing_recorded(session, flag="warmup="))

    @property
    def analysis(self) -> Analysis | None:
        """The analysis of the written trace (None before the block ends or without analyzers)."""
        return self.result.analysis if self.result is not None else None


profile = Profiling  # `with tracekit.profile_run(...)` / `tracekit.profile.profile(...)`: the same class


def profile_callable(
    fn: Callable[..., Any],
    *args: Any,
    warmup: int = 3,
    iters: int = 10,
    output: str | Path | None = None,
    with_stack: bool = False,
    memory: bool = False,
    force: bool = False,
    report: bool = True,
    **kwargs: Any,
) -> ProfileRun:
    """Call `fn(*args, **kwargs)` `warmup` times unprofiled, then record `iters` calls, one step each.

    The warm-up calls absorb compilation (Triton, torch.compile), cuBLAS handle creation and similar
    first-call costs; CUDA is synchronized before recording starts and after the last call. Keyword
    arguments named like this function's own options cannot reach `fn`: use functools.partial.
    """
    torch = require_torch()
    if iters < 1:
        raise ProfileError(f"iters must be >= 1, not {iters}")
    if warmup < 0:
        raise ProfileError(f"warmup must be >= 0, not {warmup}")
    name = getattr(fn, "__name__", None) or type(fn).__name__
    trace_path = _resolve(output, name)
    report_path = plan_outputs(trace_path, force=force, report=report)
    for _ in range(warmup):
        fn(*args, **kwargs)
    _synchronize(torch)
    session = Session(
        ProfileOptions(with_stack=with_stack, memory=memory),
        optimizer_steps=False,
        user_steps=False,
        caller_steps=True,
    )
    session.start()
    error: BaseException | None = None
    try:
        for i in range(iters):
            if i:
                session.advance()
            fn(*args, **kwargs)
        _synchronize(torch)
    except BaseException as exc:
        error = exc
        raise
    finally:
        session.stop()
        meta = provenance(
            session,
            mode="callable",
            target=getattr(fn, "__qualname__", name),
            command=sys.argv,
            warmup_calls=warmup,
            exit_status=exit_status(error),
        )
        result = finish(session, trace_path, meta, report_path=report_path, force=force)
    _warn_report(result)
    if result is None:  # pragma: no cover - a schedule-free session always records
        raise ProfileError(nothing_recorded(session))
    return result


def _warn_report(result: ProfileRun | None) -> None:
    if result is not None and result.report_error is not None:
        warnings.warn(f"tracekit: {result.report_error}", RuntimeWarning, stacklevel=3)


def _synchronize(torch: ModuleType) -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
