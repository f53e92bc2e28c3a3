"""What a profiled run records besides torch.profiler: Python garbage-collection pauses and the debug settings that slow every step.

Each collection becomes a user annotation around the pause (`gc.callbacks` "start" → "stop"), named
`tracekit::gc.collect() gen 2` when the script called `gc.collect()` and `tracekit::gc gen N` for the
interpreter's own collections (trace/tables.py GC_NAME_RE), so the trace shows what fills a silence
on the thread. The debug settings (anomaly detection, deterministic algorithms, CUDA_LAUNCH_BLOCKING,
sync debug mode) are sampled at every step mark; a setting counts as on when it was on at any mark.
"""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, suppress
from types import ModuleType
from typing import Any

from tracekit.trace.tables import GC_ANNOTATION, GC_EXPLICIT


class GcPauses:
    """gc.callbacks that wrap every collection in a record_function; `gc.collect` wrapped to tell the
    script's own calls apart. `install()` / `restore()` are idempotent; the callback never raises."""

    def __init__(self, torch: ModuleType) -> None:
        self._torch = torch
        self._open: dict[int, Any] = {}  # thread id -> the running collection's record_function
        self._explicit = threading.local()
        self._collect: Callable[..., int] | None = None
        self.collections = 0

    def install(self) -> None:
        if self._collect is not None:
            return
        original = gc.collect
        self._collect = original
        pauses = self

        def collect(generation: int = 2) -> int:
            pauses._explicit.on = True
            try:
                return original(generation)
            finally:
                pauses._explicit.on = False

        collect.__doc__ = original.__doc__
        # One range entered and left here first: torch imports modules on its first record_function
        # (torch.profiler._cupti_monitor in torch 2.13), and an import inside a collection that started
        # while importlib held a module lock fails that import (KeyError from the lock's bookkeeping).
        with suppress(Exception), self._torch.autograd.profiler.record_function(f"{GC_ANNOTATION} warm-up"):
            pass
        gc.collect = collect
        gc.callbacks.append(self._callback)

    def restore(self) -> None:
        if self._collect is None:
            return
        if gc.callbacks.count(self._callback):
            gc.callbacks.remove(self._callback)
        gc.collect = self._collect
        self._collect = None
        for record in self._open.values():  # a collection cut short by the stop: close its range
            self._exit(record)
        self._open.clear()

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        try:
            me = threading.get_ident()
            if phase == "start" and me not in self._open:
                explicit = GC_EXPLICIT if getattr(self._explicit, "on", False) else ""
                record = self._torch.autograd.profiler.record_function(
                    f"{GC_ANNOTATION}{explicit} gen {int(info.get('generation', 2))}")
                record.__enter__()
                self._open[me] = record
                self.collections += 1
            elif phase == "stop" and me in self._open:
                self._exit(self._open.pop(me))
        except Exception:  # a collection can start anywhere: never break the script
            self._open.pop(threading.get_ident(), None)

    @staticmethod
    def _exit(record: AbstractContextManager[object]) -> None:
        with suppress(Exception):
            record.__exit__(None, None, None)


class DebugModes:
    """The debug settings, OR-ed over the samples taken (trace/tables.py DEBUG_MODES_KEY)."""

    def __init__(self, torch: ModuleType, cuda: bool) -> None:
        self._torch = torch
        self._cuda = cuda
        self.seen: dict[str, bool] = {}

    def sample(self) -> None:
        torch = self._torch
        now: dict[str, Callable[[], bool]] = {
            "anomaly": lambda: bool(torch.is_anomaly_enabled()),
            "anomaly_check_nan": lambda: bool(torch.is_anomaly_enabled() and torch.is_anomaly_check_nan_enabled()),
            "deterministic_algorithms": lambda: bool(torch.are_deterministic_algorithms_enabled()),
            "cudnn_deterministic": lambda: bool(torch.backends.cudnn.deterministic),
            "cuda_launch_blocking": lambda: os.environ.get("CUDA_LAUNCH_BLOCKING", "") == "1",
            "sync_debug_mode": lambda: bool(self._cuda and torch.cuda.get_sync_debug_mode() != 0),
        }
        for key, read in now.items():
            try:
                self.seen[key] = self.seen.get(key, False) or read()
            except Exception:  # an older torch without the query: leave it out
                continue
