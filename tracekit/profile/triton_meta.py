"""Triton launch metadata: wrap user @triton.jit launches in a profiler op that records their arguments."""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from types import ModuleType
from typing import Any, SupportsInt, cast

from tracekit.trace.tables import ARG_NAMES_KEY, DOT_TABLE_KEYS, KERNEL_BACKEND_KEY, TRITON_BACKEND
from tracekit.trace.tables import USER_TRITON_KEY as USER_KERNEL_KEY

# Keys of the cpu_op args written for each user Triton launch (docs/triton-metadata.md), besides
# KERNEL_BACKEND_KEY and USER_KERNEL_KEY (defined with the trace schema).
GRID_KEY = "grid"  # "[x, y, z]"
NUM_WARPS_KEY = "num_warps"
NUM_STAGES_KEY = "num_stages"
NUM_CTAS_KEY = "num_ctas"  # only when the launch passed it
CONSTEXPRS_KEY = "constexprs"  # "NAME=VALUE,...": only when a constexpr is not a number

# Source files and modules whose kernels already carry their metadata (Inductor's generated code).
_SKIP_FILE_MARKERS = ("torchinductor", "/torch/_inductor/")
_SKIP_MODULE_PREFIXES = ("torch._inductor",)

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

# A call of tl.dot / tl.dot_scaled (or a bare `dot(` imported from triton.language) in the kernel's
# source: the kernel multiplies tiles on the tensor cores, so it is a GEMM (or attention) kernel.
_DOT_CALL = re.compile(r"\bdot(?:_scaled)?\s*\(")

# Kineto writes string args into the JSON unescaped: keep quotes, backslashes, controls out.
_UNSAFE = {ord('"'): "'", ord("\\"): "/", **{c: " " for c in range(32)}}


def safe_text(text: str) -> str:
    """`text` without the characters Kineto would write unescaped into the trace JSON."""
    return text.translate(_UNSAFE)


# torch._C._profiler._RecordFunctionFast: (name, args, kwargs) -> a profiler op around the launch
RecordFunctionFast = Callable[[str, list[object], dict[str, Any]], AbstractContextManager[object]]


class _KernelInfo:
    """What never changes between launches of one kernel: its name, parameters, defaults."""

    __slots__ = ("const_idx", "defaults", "index", "name", "params", "table_row", "user")

    def __init__(self, fn: Callable[..., Any], source: object = None) -> None:
        code = getattr(fn, "__code__", None)
        self.name: str = safe_text(getattr(fn, "__name__", "triton_kernel"))
        file = code.co_filename if code is not None else ""
        module = getattr(fn, "__module__", "") or ""
        self.user: bool = not (
            any(marker in file for marker in _SKIP_FILE_MARKERS)
            or module.startswith(_SKIP_MODULE_PREFIXES)
        )
        parameters = list(inspect.signature(fn).parameters.values())
        self.params: tuple[str, ...] = tuple(p.name for p in parameters)
        self.const_idx: tuple[int, ...] = tuple(
            i for i, p in enumerate(parameters) if _is_constexpr(p.annotation)
        )
        self.defaults: dict[str, Any] = {
            p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty
        }
        self.index = 0  # 1-based position in TritonRecorder.kernels, set when first launched
        self.table_row: dict[str, Any] = {
            "name": self.name,
            "file": file,
            "line": code.co_firstlineno if code is not None else None,
            ARG_NAMES_KEY: list(self.params),
            "constexpr_names": [self.params[i] for i in self.const_idx],
        }
        if isinstance(source, str):  # the kernel's source as written (_source)
            self.table_row[DOT_TABLE_KEYS[0]] = bool(_DOT_CALL.search(source))


def _source(fn: object, py_fn: object) -> str | None:
    """The kernel's source: Triton's JITFunction.src, else (the interpreter's InterpretedFunction has
    none) the Python function's; None when neither can be read."""
    src = getattr(fn, "src", None)
    if isinstance(src, str):
        return src
    try:
        return inspect.getsource(py_fn)  # type: ignore[arg-type]
    except (OSError, TypeError):
        return None


def _is_constexpr(annotation: object) -> bool:
    if annotation is inspect.Parameter.empty:
        return False
    if isinstance(annotation, str):
        return "constexpr" in annotation
    return getattr(annotation, "__name__", "") == "constexpr"


def _plain(value: object) -> bool | int | float | str | None:
    """A constexpr value as plain data: unwrap tl.constexpr; numbers stay, others become str()."""
    inner = getattr(value, "value", value) if type(value).__name__ == "constexpr" else value
    if inner is None or isinstance(inner, (bool, int, float)):
        return inner
    return safe_text(str(inner))


class TritonRecorder:
    """Patches JITFunction.run (and the interpreter's run) while profiling; restores them after."""

    def __init__(self, torch: ModuleType, *, use_cpu_op: bool = True) -> None:
        self._torch = torch
        self._tensor = torch.Tensor
        fast = getattr(torch._C._profiler, "_RecordFunctionFast", None) if use_cpu_op else None
        self._fast: RecordFunctionFast | None = fast if fast is not None and _accepts_kwargs(fast) else None
        self._infos: dict[int, _KernelInfo] = {}
        self._text_cache: dict[Any, str] = {}
        self._patched: list[tuple[type, Any]] = []
        self._defaults: tuple[Any, Any] | None = None
        self.launches = 0
        self.kernels: list[dict[str, Any]] = []  # the trace's tracekit.triton_kernels table
        # Fallback when _RecordFunctionFast cannot carry the arguments: one dict per launch.
        self.records: list[dict[str, Any]] = []

    @property
    def mode(self) -> str:
        """'cpu_op' when launches are recorded as profiler ops, 'top_level' for the fallback list."""
        return "cpu_op" if self._fast is not None else "top_level"

    def install(self) -> bool:
        """Patch every Triton launcher class that is importable; False if Triton is not installed."""
        for module_name, class_name in (
            ("triton.runtime.jit", "JITFunction"),
            ("triton.runtime.interpreter", "InterpretedFunction"),
        ):
            try:
                module = __import__(module_name, fromlist=[class_name])
                cls = getattr(module, class_name)
            except Exception:  # Triton missing, or a build without the interpreter
                continue
            original = cls.__dict__.get("run")
            if original is None:
                continue
            self._patched.append((cls, original))
            setattr(cls, "run", self._wrap(original))  # noqa: B010  (a class attribute mypy cannot see)
        return bool(self._patched)

    def restore(self) -> None:
        """Put the original launchers back."""
        while self._patched:
            cls, original = self._patched.pop()
            setattr(cls, "run", original)  # noqa: B010

    def _wrap(self, original: Callable[..., Any]) -> Callable[..., Any]:
        recorder = self
        infos = self._infos

        def run(fn: object, *args: object, **kwargs: object) -> Any:
            info = infos.get(id(fn))
            if info is None:
                info = recorder._new_info(fn)
            if not info.user or kwargs.get("warmup"):
                return original(fn, *args, **kwargs)
            try:
                rec_args, extra = recorder._describe(info, args, kwargs)
                scope = (
                    recorder._fast(info.name, rec_args, extra)
                    if recorder._fast is not None
                    else recorder._fallback(info, rec_args, extra)
                )
            except Exception:  # never let metadata break the user's launch
                return original(fn, *args, **kwargs)
            recorder.launches += 1
            with scope:
                return original(fn, *args, **kwargs)

        run.__wrapped__ = original  # type: ignore[attr-defined]
        return run

    def _new_info(self, fn: object) -> _KernelInfo:
        py_fn = getattr(fn, "fn", None)
        try:
            info = _KernelInfo(py_fn, _source(fn, py_fn))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            info = _KernelInfo.__new__(_KernelInfo)
            info.user = False
        self._infos[id(fn)] = info
        return info

    def _describe(
        self, info: _KernelInfo, args: tuple[object, ...], kwargs: dict[str, object]
    ) -> tuple[list[object], dict[str, Any]]:
        """The op's inputs (one per kernel parameter, in order) and its extra args."""
        if not info.index:
            self.kernels.append(info.table_row)
            info.index = len(self.kernels)
        params = info.params
        values = list(args[: len(params)])
        if len(values) < len(params):
            defaults = info.defaults
            for name in params[len(values) :]:
                values.append(kwargs[name] if name in kwargs else defaults.get(name))
        grid = kwargs.get("grid")
        if callable(grid):
            grid = grid(dict(zip(params, values, strict=True)))
            kwargs["grid"] = grid  # evaluated once: Triton gets the tuple, not the callable
        tensor = self._tensor
        rec_args: list[object] = []
        for value in values:
            kind = type(value)
            if kind is float or kind is bool or isinstance(value, tensor):
                rec_args.append(value)
            elif type(value) is int:
                rec_args.append(value if _INT64_MIN <= value <= _INT64_MAX else None)
            else:  # e.g. a TensorDescriptor: describe its base tensor; other objects: no data
                base = getattr(value, "base", None)
                rec_args.append(base if isinstance(base, tensor) else None)
        extra: dict[str, Any] = {KERNEL_BACKEND_KEY: TRITON_BACKEND, USER_KERNEL_KEY: info.index}
        if grid is not None:
            # Triton's grid: a tuple or list of ints (anything else raises, and the launch goes unrecorded)
            extra[GRID_KEY] = self._grid_text(cast("Sequence[SupportsInt]", grid))
        options = self._defaults if self._defaults is not None else self._default_options()
        warps = kwargs.get(NUM_WARPS_KEY, options[0])
        if warps is not None:
            extra[NUM_WARPS_KEY] = warps
        stages = kwargs.get(NUM_STAGES_KEY, options[1])
        if stages is not None:
            extra[NUM_STAGES_KEY] = stages
        if NUM_CTAS_KEY in kwargs:
            extra[NUM_CTAS_KEY] = kwargs[NUM_CTAS_KEY]
        for i in info.const_idx:
            if rec_args[i] is None:  # a constexpr that Concrete Inputs cannot show (dtype, str)
                extra[CONSTEXPRS_KEY] = self._constexpr_text(info, values)
                break
        return rec_args, extra

    def _grid_text(self, grid: Sequence[SupportsInt]) -> str:
        try:
            text = self._text_cache.get(grid)
        except TypeError:  # a list grid
            grid, text = tuple(grid), None
        if text is None:
            dims = [int(g) for g in grid] + [1, 1, 1]
            text = f"[{dims[0]}, {dims[1]}, {dims[2]}]"
            if len(self._text_cache) > 4096:  # many distinct grids (dynamic shapes): start over
                self._text_cache.clear()
            self._text_cache[grid] = text
        return text

    def _constexpr_text(self, info: _KernelInfo, values: list[object]) -> str:
        """All of the launch's constexprs as "NAME=VALUE,..." (Inductor's kernel_kwargs form)."""
        return ",".join(f"{info.params[i]}={_plain(values[i])}" for i in info.const_idx)

    def _default_options(self) -> tuple[Any, Any]:
        """The backend's default num_warps/num_stages (None under the interpreter or on failure)."""
        self._defaults = (None, None)
        try:
            try:
                from triton import knobs  # triton >= 3.3

                interpret = bool(knobs.runtime.interpret)
            except ImportError:
                interpret = os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on")
            if not interpret:
                from triton.compiler import make_backend
                from triton.runtime import driver

                opts = make_backend(driver.active.get_current_target()).parse_options({})
                self._defaults = (opts.num_warps, opts.num_stages)
        except Exception:
            pass
        return self._defaults

    def _fallback(self, info: _KernelInfo, rec_args: list[object],
                  extra: dict[str, Any]) -> AbstractContextManager[object]:
        """Record the launch in the top-level list; return a plain annotation for the trace."""
        args: list[dict[str, Any]] = []
        for name, value in zip(info.params, rec_args, strict=True):
            if isinstance(value, self._tensor):
                shape, strides = list(value.shape), list(value.stride())
                dtype = str(value.dtype).removeprefix("torch.")
                args.append({"name": name, "shape": shape, "dtype": dtype, "strides": strides})
            else:
                args.append({"name": name, "value": value})
        record = {k: v for k, v in extra.items() if k not in (KERNEL_BACKEND_KEY, CONSTEXPRS_KEY)}
        record[GRID_KEY] = [int(g) for g in extra[GRID_KEY].strip("[]").split(",")]
        shown = dict(p.split("=", 1) for p in extra.get(CONSTEXPRS_KEY, "").split(",") if p)
        record[CONSTEXPRS_KEY] = {
            info.params[i]: shown.get(info.params[i], rec_args[i]) for i in info.const_idx
        }
        record.update(name=info.name, seq=len(self.records), args=args)
        self.records.append(record)
        return self._torch.autograd.profiler.record_function(info.name)


def _accepts_kwargs(fast: RecordFunctionFast) -> bool:
    """Whether this torch's _RecordFunctionFast takes (name, args, kwargs) (torch >= 2.4)."""
    try:
        with fast("tracekit_probe", [], {}):
            pass
    except TypeError:
        return False
    return True
