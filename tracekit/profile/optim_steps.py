"""Optimizer step marks: end a ProfilerStep just after optimizer.step() returns, outside its op."""

from __future__ import annotations

import functools
import importlib
import types
from collections.abc import Callable, Iterator
from typing import Any


class OptimizerSteps:
    """Calls `on_step(optimizer)` after each optimizer step, once its profiler op has closed.

    torch's global step post-hook runs inside the `Optimizer.step#...` op, so a ProfilerStep ended
    there would overlap that op. The optimizer classes that exist at install time get their `step`
    wrapped (marking after it returns); the post-hook still covers classes defined later.
    """

    def __init__(self, on_step: Callable[[object], None]) -> None:
        self._on_step = on_step
        self._patched: list[tuple[type, Any, Any]] = []
        self._handle: Any = None
        self._base: Any = None
        self._depth = 0  # wrapped step() calls in progress (an optimizer may step another)
        self._pending: object = None  # optimizer whose post-hook fired inside a wrapped step()

    def install(self) -> None:
        """Register the post-hook and wrap the step() of every Optimizer subclass defined so far."""
        optim = importlib.import_module("torch.optim.optimizer")
        register = getattr(optim, "register_optimizer_step_post_hook", None)
        if register is None:  # torch < 2.0: no step hooks, no automatic steps
            return
        self._base = optim.Optimizer
        if hasattr(self._base, "profile_hook_step"):
            for cls in _subclasses(self._base):
                self._wrap(cls)
        self._handle = register(self._post_hook)

    def restore(self) -> None:
        """Remove the hook; give each wrapped class its hooked step() back."""
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        while self._patched:
            cls, wrapper, hooked = self._patched.pop()
            if cls.__dict__.get("step") is wrapper:
                setattr(cls, "step", hooked)  # noqa: B010  (a class attribute mypy cannot see)

    def _wrap(self, cls: type) -> None:
        inner = cls.__dict__.get("step")
        if not isinstance(inner, types.FunctionType) or getattr(inner, "_tracekit", False):
            return
        # torch hooks step() (the op, the hooks) when a class is first instantiated; do it now
        hooked = inner if getattr(inner, "hooked", False) else self._base.profile_hook_step(inner)
        setattr(hooked, "hooked", True)  # noqa: B010  (torch's own marker)
        steps = self

        @functools.wraps(hooked)
        def step(*args: object, **kwargs: object) -> Any:
            steps._depth += 1
            try:
                return hooked(*args, **kwargs)
            finally:
                steps._depth -= 1
                if not steps._depth and steps._pending is not None:
                    optimizer, steps._pending = steps._pending, None
                    steps._on_step(optimizer)

        step.hooked = True  # type: ignore[attr-defined]
        step._tracekit = True  # type: ignore[attr-defined]
        cls.step = step  # type: ignore[attr-defined]
        self._patched.append((cls, step, hooked))

    def _post_hook(self, optimizer: object, args: tuple[object, ...], kwargs: dict[str, object]) -> None:
        """torch's global optimizer step post-hook: (optimizer, step's args, step's kwargs)."""
        if self._depth:
            self._pending = optimizer
            return
        # a class defined after install: mark now (inside its op, this once), wrap it for next time
        self._on_step(optimizer)
        if self._base is not None and hasattr(self._base, "profile_hook_step"):
            for cls in type(optimizer).__mro__:
                if "step" in cls.__dict__:
                    self._wrap(cls)
                    break


def _subclasses(cls: type) -> Iterator[type]:
    seen: set[type] = set()
    todo: list[type] = list(cls.__subclasses__())
    while todo:
        sub = todo.pop()
        if sub not in seen:
            seen.add(sub)
            todo.extend(sub.__subclasses__())
            yield sub
