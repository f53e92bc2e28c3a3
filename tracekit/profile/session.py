"""One profiling session: torch.profiler set up for tracekit, step marks, optimizer hook, Triton patch."""

from __future__ import annotations

import contextlib
import importlib.util
import signal
import sys
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol

from tracekit.errors import ProfileError
from tracekit.profile import steps
from tracekit.profile.optim_steps import OptimizerSteps
from tracekit.profile.pauses import DebugModes, GcPauses
from tracekit.profile.quiet import NativeNoise
from tracekit.profile.triton_meta import TritonRecorder

INSTALL_HINT = "pip install 'tracekit[profile]'"
RECORD_SHAPES = True  # every tracekit recording keeps the ops' Input Dims/types (the cost models read them)


@dataclass(frozen=True)
class ProfileOptions:
    """Profiler settings shared by the CLI and the Python API."""

    with_stack: bool = False
    memory: bool = False
    warmup: int = 0  # steps run under the profiler but not recorded
    active: int | None = None  # steps recorded after the warm-up (None: all the rest)

    def __post_init__(self) -> None:
        if self.warmup < 0:
            raise ProfileError(f"warmup must be >= 0, not {self.warmup}")
        if self.active is not None and self.active < 1:
            raise ProfileError(f"active must be >= 1, not {self.active}")

    def recorded(self, step: int) -> bool:
        """Whether ProfilerStep#step falls in the recorded window of the schedule."""
        return step >= self.warmup and (self.active is None or step < self.warmup + self.active)


def profiler_activities(cuda: bool) -> list[Any]:
    """What tracekit records: CPU activity, and CUDA activity when there is a GPU."""
    from torch.profiler import ProfilerActivity

    return [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])


def require_torch() -> ModuleType:
    """Import torch, or raise the one-line ProfileError that says how to install it. Ctrl-C is
    held back while torch imports and arrives right after, as KeyboardInterrupt: interrupted inside
    a C extension's initialisation (numpy's), the import fails as an ImportError instead, and a
    second attempt as "cannot load module more than once per process"."""
    try:
        with _sigint_held():
            import torch
    except ImportError as exc:
        raise ProfileError(f"torch is not installed ({exc}): {INSTALL_HINT}") from None
    return torch


@contextlib.contextmanager
def _sigint_held() -> Iterator[None]:
    """SIGINT blocked in this thread (and the threads it starts) while held; a pending one is
    delivered on release."""
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class _Actions(Protocol):
    """torch.profiler.ProfilerAction: the members a schedule returns."""

    @property
    def WARMUP(self) -> object: ...
    @property
    def RECORD(self) -> object: ...
    @property
    def RECORD_AND_SAVE(self) -> object: ...
    @property
    def NONE(self) -> object: ...


class _Schedule:
    """torch.profiler schedule: wait 0, warmup W, active A (or every later step), repeat 1; `shift`
    renumbers the steps after a realignment (step n is schedule step n - shift)."""

    def __init__(self, options: ProfileOptions, action: _Actions) -> None:
        self._options = options
        self._warmup = options.warmup
        self._last = None if options.active is None else options.warmup + options.active - 1
        self._action = action
        self.shift = 0

    def __call__(self, step: int) -> Any:
        action = self._action
        step -= self.shift
        if step < self._warmup:
            return action.WARMUP
        if self._last is None or step < self._last:
            return action.RECORD
        return action.RECORD_AND_SAVE if step == self._last else action.NONE

    def records(self, step: int) -> bool:
        """Whether ProfilerStep#step is in the recorded window."""
        return self._options.recorded(step - self.shift)

    def realign(self, step: int) -> None:
        """Make ProfilerStep#(step + 1) the script's second step: in the warm-up, the warm-up starts
        over; once recording or past the window, the window starts there with all its steps (a new
        profiler cycle when #step ended it or came after it: its events replace the first cycle's)."""
        self.shift = step if step < self._warmup else step + 1 - self._warmup


class Session:
    """Start/stop torch.profiler for tracekit; count step marks from the script or its optimizer."""

    def __init__(
        self,
        options: ProfileOptions,
        *,
        optimizer_steps: bool = True,
        user_steps: bool = True,
        caller_steps: bool = False,
        triton: bool = True,
    ) -> None:
        self.options = options
        self.marks = 0  # step boundaries marked so far (ProfilerStep#marks is the one running)
        # 'optimizer' | 'explicit' | 'caller' (the caller drives steps: ProfilerStep#0 is a real one)
        self.step_source: str | None = "caller" if caller_steps else None
        self.cuda = False
        self.trace_ready = False
        self.triton: TritonRecorder | None = None
        self._optimizer_steps = optimizer_steps
        self._user_steps = user_steps
        self._want_triton = triton
        self._explicit = False
        self._optimizer_marks = 0
        self._pieces = 0  # ProfilerStep#0..#pieces-1: the first step, cut by several optimizer steps
        self._dropped: frozenset[int] = frozenset()  # those of the pieces recorded before the realignment
        self._schedule: _Schedule | None = None
        self._primary_optimizer: int | None = None
        self._prof: Any = None
        self._optimizer_hook: OptimizerSteps | None = None
        self._running = False
        self._noise = NativeNoise()  # the profiler's own C++ lines, kept off the terminal
        self.gc_pauses: GcPauses | None = None  # garbage collections as annotations (profiled runs)
        self.debug: DebugModes | None = None  # debug settings sampled at the step marks

    @property
    def profiler(self) -> Any:
        """The torch.profiler.profile object (for export)."""
        return self._prof

    def start(self) -> None:
        """Set up hooks and start recording. Raises ProfileError if torch is missing or busy."""
        torch = require_torch()
        if steps.active() is not None:
            raise ProfileError("a tracekit profile is already running in this process")
        from torch.profiler import ProfilerAction, profile

        self.cuda = bool(torch.cuda.is_available())
        self._schedule = _Schedule(self.options, ProfilerAction)
        self._prof = profile(
            activities=profiler_activities(self.cuda),
            schedule=self._schedule,
            on_trace_ready=self._on_trace_ready,
            record_shapes=RECORD_SHAPES,
            with_stack=self.options.with_stack,
            profile_memory=self.options.memory,
        )
        steps.set_active(self)
        try:
            if self._want_triton and _triton_installed():
                recorder = TritonRecorder(torch)
                if recorder.install():
                    self.triton = recorder
            if self._optimizer_steps:
                self._optimizer_hook = OptimizerSteps(self._on_optimizer_step)
                self._optimizer_hook.install()
            self.debug = DebugModes(torch, self.cuda)
            self.debug.sample()
            self.gc_pauses = GcPauses(torch)
            self.gc_pauses.install()
            with warnings.catch_warnings():
                # "Profiler clears events at the end of each cycle": tracekit records one cycle
                warnings.filterwarnings("ignore", message=".*clears events.*")
                with self._noise.hidden():
                    self._prof.start()
        except Exception as exc:
            self._noise.release()
            self._cleanup()
            raise ProfileError(f"torch.profiler could not start: {exc}") from None
        self._running = True

    def stop(self) -> None:
        """Stop recording (closing the running step) and undo every hook, even if stop fails."""
        if not self._running:
            return
        self._running = False
        if self.debug is not None:
            self.debug.sample()
        try:
            with self._noise.hidden():
                self._prof.stop()
        finally:
            self._noise.release()
            self._cleanup()

    def _cleanup(self) -> None:
        steps.set_active(None)
        if self.gc_pauses is not None:
            self.gc_pauses.restore()
        if self._optimizer_hook is not None:
            self._optimizer_hook.restore()
            self._optimizer_hook = None
        if self.triton is not None:
            self.triton.restore()

    def mark_step(self, *, explicit: bool) -> None:
        """A step boundary: from the script (explicit) or from the primary optimizer's step()."""
        if not self._running or (explicit and not self._user_steps):
            return
        if explicit and not self._explicit:
            self._explicit = True
            self.step_source = "explicit"
            if self._optimizer_marks == 1:  # the hook already marked this boundary: take over from it
                return
            if self._optimizer_marks > 1:  # several optimizer steps cut the script's first step
                self._realign()
        self.advance()

    def _realign(self) -> None:
        """ProfilerStep#0..#marks are pieces of the script's first step: the next one starts its
        second, the schedule's window moves after them and the pieces leave the recorded steps."""
        pieces = range(self.marks + 1)
        self._dropped = frozenset(s for s in pieces if self._schedule is not None and self._schedule.records(s))
        self._pieces = len(pieces)
        if self._schedule is not None:
            self._schedule.realign(self.marks)

    def advance(self) -> None:
        """End ProfilerStep#marks and start the next one."""
        if self._running:
            self.marks += 1
            if self.debug is not None:
                self.debug.sample()
            with self._noise.hidden(), warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*clears events.*")  # a realigned window's new cycle
                self._prof.step()

    def _on_optimizer_step(self, optimizer: object) -> None:
        if self._explicit:
            return
        if self._primary_optimizer is None:
            self._primary_optimizer = id(optimizer)
            self.step_source = "optimizer"
        elif id(optimizer) != self._primary_optimizer:  # e.g. a GAN's second optimizer
            return
        self._optimizer_marks += 1
        self.mark_step(explicit=False)

    @property
    def whole_run_step(self) -> bool:
        """True when ProfilerStep#0 spans the whole run only because no step was marked."""
        return self.marks == 0 and self.step_source != "caller"

    def _on_trace_ready(self, prof: object) -> None:
        self.trace_ready = True

    def recorded_steps(self) -> list[int]:
        """ProfilerStep numbers present in the trace (empty when no step was marked)."""
        if not self.marks and self.step_source != "caller":
            return []
        records = self._schedule.records if self._schedule is not None else self.options.recorded
        return [s for s in range(self._pieces, self.marks + 1) if records(s)]

    def dropped_steps(self) -> frozenset[int]:
        """ProfilerStep annotations the written trace leaves out: the whole-run #0 when no step was
        marked, or the recorded pieces of a first step cut by several optimizer steps."""
        return frozenset({0}) if self.whole_run_step else self._dropped


def _triton_installed() -> bool:
    if "triton" in sys.modules:
        return True
    try:
        return importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):
        return False
