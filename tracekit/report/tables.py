"""Table and bar views for the report: kernel rows, time by class/library, launch overhead per step."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tracekit.report.format import (
    DASH,
    fmt_bytes,
    fmt_int,
    fmt_pct,
    fmt_ratio,
    fmt_si,
    fmt_time,
    num,
)
from tracekit.report.palette import class_color

MAX_KERNEL_ROWS = 1000  # rows beyond this are summed into one "rest" line with a note
MAX_STEP_ROWS = 64
MAX_BARS = 12
_SHAPE_LIST = re.compile(r"\[\s*((?:-?\d+\s*,\s*)*-?\d+)?\s*\]")  # '[1, 768]' -> '1×768'


@dataclass(frozen=True)
class Cell:
    """One table cell: the text shown and the value sorted on (number or lower-case text)."""

    text: str
    sort: float | str
    title: str = ""


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    numeric: bool
    help: str = ""
    css: str = ""  # cell class: 'l' left-aligned text, 'kname' monospace name, 'clip' ellipsis


@dataclass(frozen=True)
class Bar:
    """A labelled horizontal bar: share in 0..1 of the largest/total, with formatted value."""

    label: str
    value: str
    share: float
    pct: str
    count: str = ""
    color: str = ""
    width: float = 0.0  # 0..100, relative to the largest bar


@dataclass(frozen=True)
class KernelTable:
    columns: tuple[Column, ...]
    rows: tuple[tuple[Cell, ...], ...]
    classes: tuple[str, ...]  # for the class filter
    row_classes: tuple[str, ...]
    total_rows: int
    note: str = ""


@dataclass(frozen=True)
class StepRow:
    label: str
    span: str
    gpu_busy: str
    cpu_launch: str
    idle: str
    kernels: str
    launches: str
    q50: str
    q90: str
    qmax: str
    short: str
    busy_w: float  # 0..100 of this step's span
    launch_w: float  # 0..100 of this step's span (capped)
    span_w: float  # 0..100 of the longest step's span
    idle_parts: tuple[tuple[str, float, str, str], ...] = field(default_factory=tuple)  # label, %, text, css


def pick(d: Mapping[str, Any] | None, *names: str, default: Any = None) -> Any:
    """The first present, non-None value among several possible keys (schemas evolve)."""
    if not d:
        return default
    for n in names:
        v = d.get(n)
        if v is not None:
            return v
    return default


def _dims(match: re.Match[str]) -> str:
    inner = match.group(1)
    return "×".join(x.strip() for x in inner.split(",")) if inner else "()"


GENERIC_KERNEL_NAMES = frozenset({"Kernel", "Kernel2", "kernel", "device_kernel", "kernel_entry"})


_IDENT = re.compile(r"[A-Za-z_][\w:]*")
_SIGNATURE = re.compile(r"(?<![\w:])[A-Za-z_][\w:]*[<(]")  # 'name(' or 'name<': a C++ function signature
_BUILTIN_TYPES = frozenset({"int", "long", "unsigned", "short", "char", "bool", "float", "double", "half", "void"})


def _depth0(name: str) -> tuple[str, dict[int, str]]:
    """The name with <...> and (...) groups removed, and {position: text} of each removed <...> group."""
    out: list[str] = []
    groups: dict[int, str] = {}
    depth, start, arg = 0, 0, []
    for ch in name:
        if ch in "<(":
            if depth == 0:
                start, arg = len(out), []
            depth += 1
            if depth == 1:
                continue
        elif ch in ">)" and depth > 0:
            depth -= 1
            if depth == 0:
                if ch == ">":
                    groups[start] = "".join(arg)
                continue
        if depth == 0:
            out.append(ch)
        else:
            arg.append(ch)
    return "".join(out), groups


def short_name(name: str) -> str:
    """A readable kernel name: no return type, namespaces, template arguments or parameter lists.

    'void at::native::vectorized_elementwise_kernel<4, ...>(int, ...)' -> 'vectorized_elementwise_kernel';
    generic names keep what tells them apart: 'Kernel2<cutlass_80_tensorop_s1688gemm_...>' (an
    identifier as first template argument) or 'gemvx::kernel' (the enclosing namespace).
    """
    if "::" not in name and not name.startswith("void ") and not _SIGNATURE.match(name):
        return name
    text, groups = _depth0(name)
    text = text.rstrip()
    if not text:
        return name
    qualified = text.split()[-1]  # after any return type ('void', 'std::enable_if<...>::type')
    parts = [p for p in qualified.split("::") if p]
    if not parts:
        return name
    base = parts[-1]
    if base in GENERIC_KERNEL_NAMES:
        first = groups.get(len(text), "").split(",")[0].strip()
        if _IDENT.fullmatch(first) and first not in _BUILTIN_TYPES:
            return f"{base}<{first.rsplit('::', 1)[-1]}>"
        if len(parts) > 1:
            return f"{parts[-2]}::{base}"
    return base


def shapes_text(shapes: object) -> str:
    """Input shapes as '1×768, 768×2304'; scalars as '()'; unknown as a dash."""
    if shapes is None or shapes == "":
        return DASH
    if isinstance(shapes, str):
        return _SHAPE_LIST.sub(_dims, shapes)
    if isinstance(shapes, Sequence):
        parts = []
        for s in shapes:
            if isinstance(s, Sequence) and not isinstance(s, str):
                if s and all(isinstance(x, int) for x in s):
                    parts.append("×".join(str(x) for x in s))
                elif not s:
                    parts.append("()")
                else:
                    parts.append(shapes_text(s))
            else:
                parts.append(str(s))
        return ", ".join(parts) if parts else DASH
    return str(shapes)


COLUMNS: tuple[Column, ...] = (
    Column("name", "Kernel", False, css="l kname"),
    Column("class", "Class", False, css="l"),
    Column("library", "Library", False, css="l"),
    Column("op", "Op", False, "the innermost CPU op that launched it", css="l clip"),
    Column("shapes", "Shapes", False, "input shapes of the op", css="l clip"),
    Column("dtype", "Dtype", False, css="l"),
    Column("count", "Calls", True),
    Column("time_us", "Time", True, "total over all calls"),
    Column("share", "Share", True, "of total GPU kernel time"),
    Column("flops", "FLOPs", True, "total over all calls"),
    Column("bytes", "Bytes", True, "total over all calls"),
    Column("intensity", "FLOP/B", True, "arithmetic intensity: FLOPs per byte moved"),
    Column("achieved_tflops", "TFLOP/s", True, "achieved"),
    Column("achieved_gbps", "GB/s", True, "achieved"),
    Column("bound", "Bound", False, css="l"),
    Column("roofline_pct", "% roof", True, "achieved / attainable at this intensity"),
)


MAX_TITLE = 300  # hover text of a kernel name, in characters (demangled C++ names run to thousands)


def _numcell(value: object, fmt) -> Cell:
    v = num(value)
    return Cell(fmt(v), float(f"{v:.6g}") if v is not None else -1.0)


def name_cell(name: str) -> Cell:
    """The short kernel name, with the full one (capped) as hover text when they differ or it is long."""
    short = short_name(name)
    title = name if short != name or len(name) > 32 else ""
    if len(title) > MAX_TITLE:
        title = title[: MAX_TITLE - 1] + "…"
    return Cell(short, short.lower(), title)


def _textcell(value: object, *, clip: int = 0) -> Cell:
    text = DASH if value is None or value == "" else str(value)
    return Cell(text, text.lower(), text if clip and len(text) > clip else "")


def _gbps_plain(v: object) -> str:
    x = num(v)
    return fmt_int(x) if x is not None and x >= 100 else fmt_ratio(x)


def _pct_auto(v: object) -> str:
    """roofline_pct is a percent (0..100)."""
    return fmt_pct(v, fraction=False)


def kernel_table(kernels: Sequence[Mapping[str, Any]]) -> KernelTable:
    """The kernel rows, longest first, capped at MAX_KERNEL_ROWS with the rest summed in a note."""
    rows_sorted = sorted(kernels, key=lambda k: -(num(k.get("time_us")) or 0.0))
    total_time = sum(num(k.get("time_us")) or 0.0 for k in rows_sorted) or 0.0
    shown = rows_sorted[:MAX_KERNEL_ROWS]
    rows, row_classes = [], []
    for k in shown:
        t = num(k.get("time_us"))
        share = (t / total_time) if (t is not None and total_time) else None
        name = str(k.get("name", ""))
        rows.append(
            (
                name_cell(name),
                _textcell(k.get("class")),
                _textcell(k.get("library")),
                _textcell(k.get("op"), clip=24),
                _textcell(shapes_text(k.get("shapes")), clip=24),
                _textcell(k.get("dtype")),
                _numcell(k.get("count"), fmt_int),
                _numcell(t, fmt_time),
                _numcell(share, fmt_pct),
                _numcell(k.get("flops"), fmt_si),
                _numcell(k.get("bytes"), fmt_bytes),
                _numcell(k.get("intensity"), fmt_ratio),
                _numcell(k.get("achieved_tflops"), fmt_ratio),
                _numcell(k.get("achieved_gbps"), _gbps_plain),
                _textcell(k.get("bound")),
                _numcell(k.get("roofline_pct"), _pct_auto),
            )
        )
        row_classes.append(str(k.get("class") or "other"))
    note = ""
    if len(rows_sorted) > len(shown):
        rest = rows_sorted[len(shown):]
        rest_t = sum(num(k.get("time_us")) or 0.0 for k in rest)
        note = (
            f"Showing the {len(shown):,} longest of {len(rows_sorted):,} kernel rows; the other "
            f"{len(rest):,} rows take {fmt_time(rest_t)} ({fmt_pct(rest_t / total_time if total_time else None)}"
            " of kernel time). `tracekit analyze --json` lists them all."
        )
    return KernelTable(
        columns=COLUMNS,
        rows=tuple(rows),
        classes=tuple(sorted(set(row_classes))),
        row_classes=tuple(row_classes),
        total_rows=len(rows_sorted),
        note=note,
    )


def bars(items: Mapping[str, tuple[float, int]], *, colors: bool) -> list[Bar]:
    """Bars from {label: (time_us, count)}, largest first; extra labels merged into 'other N'."""
    ordered = sorted(items.items(), key=lambda kv: -kv[1][0])
    total = sum(t for t, _ in items.values()) or 0.0
    if len(ordered) > MAX_BARS:
        head, tail = ordered[: MAX_BARS - 1], ordered[MAX_BARS - 1 :]
        ordered = [*head, (f"{len(tail)} others", (sum(t for _, (t, _) in tail), sum(c for _, (_, c) in tail)))]
    top = max((t for _, (t, _) in ordered), default=0.0) or 1.0
    out = []
    for label, (t, c) in ordered:
        share = t / total if total else 0.0
        out.append(
            Bar(
                label=label,
                value=fmt_time(t),
                share=share,
                pct=fmt_pct(share),
                count=f"{c:,} calls" if c else "",
                color=class_color(label) if colors else "#5b7fa8",
                width=round(100 * t / top, 2),
            )
        )
    return out


def _summary_items(records: Sequence[Mapping[str, Any]], key: str) -> dict[str, tuple[float, int]]:
    return {
        str(pick(r, key, "name", default="other")): (num(r.get("time_us")) or 0.0, int(num(r.get("count")) or 0))
        for r in records
    }


def _sum_by(kernels: Sequence[Mapping[str, Any]], key: str) -> dict[str, tuple[float, int]]:
    items: dict[str, tuple[float, int]] = {}
    for k in kernels:
        label = str(k.get(key) or "other")
        t, c = items.get(label, (0.0, 0))
        items[label] = (t + (num(k.get("time_us")) or 0.0), c + int(num(k.get("count")) or 0))
    return items


def class_bars(classes: Sequence[Mapping[str, Any]], kernels: Sequence[Mapping[str, Any]]) -> list[Bar]:
    """Time by kernel class: the analysis' `classes` table, else summed from the kernel rows."""
    items = _summary_items(classes, "class") if classes else _sum_by(kernels, "class")
    return bars(items, colors=True)


def library_bars(libraries: Sequence[Mapping[str, Any]], kernels: Sequence[Mapping[str, Any]]) -> list[Bar]:
    """Time by library: the analysis' `libraries` table, else summed from the kernel rows."""
    items = _summary_items(libraries, "library") if libraries else _sum_by(kernels, "library")
    return bars(items, colors=False)


def _pct_of(part: float | None, whole: float) -> float:
    return 0.0 if part is None or whole <= 0 else round(min(100.0, 100.0 * part / whole), 2)


# idle breakdown keys (summed over streams, HTA-style) -> label and css swatch
IDLE_PARTS = (
    (("host_wait_us", "host_wait"), "host wait", "host"),
    (("kernel_wait_us", "kernel_wait"), "kernel wait", "kwait"),
    (("other_idle_us", "other_us", "other"), "other", "other"),
)


def idle_parts(s: Mapping[str, Any]) -> tuple[tuple[str, float, str, str], ...]:
    """(label, share of the breakdown in %, text, css) for the idle breakdown of a step/summary."""
    src = pick(s, "idle", "idle_breakdown", default=None)
    src = src if isinstance(src, Mapping) else s
    values = [(label, css, num(pick(src, *keys))) for keys, label, css in IDLE_PARTS]
    total = sum(v for _, _, v in values if v) or 0.0
    return tuple(
        (label, _pct_of(v, total), f"{label}: {fmt_time(v)} ({fmt_pct(v / total)})", css)
        for label, css, v in values
        if v and total
    )


def step_label(step: object) -> str:
    """'step 12', or 'whole trace' for the pseudo-step -1 of a trace without ProfilerStep marks."""
    v = num(step)
    if v is None or v < 0:
        return "whole trace"
    return f"step {int(v)}"


def step_rows(steps: Sequence[Mapping[str, Any]]) -> tuple[list[StepRow], str]:
    """One row per step (capped), bars scaled to the longest span, plus a note when capped."""
    shown = list(steps[:MAX_STEP_ROWS])
    longest = max((num(pick(s, "span_us")) or 0.0 for s in shown), default=0.0) or 1.0
    out = []
    for s in shown:
        span = num(pick(s, "span_us"))
        busy = num(pick(s, "gpu_busy_us"))
        launch = num(pick(s, "cpu_launch_us"))
        idle = num(pick(s, "gpu_idle_us"))
        if idle is None and span is not None and busy is not None:
            idle = max(0.0, span - busy)
        q = pick(s, "queue_delay", default=None)
        q = q if isinstance(q, Mapping) else s
        out.append(
            StepRow(
                label=step_label(pick(s, "step")),
                span=fmt_time(span),
                gpu_busy=fmt_time(busy),
                cpu_launch=fmt_time(launch),
                idle=fmt_time(idle),
                kernels=fmt_int(pick(s, "kernels")),
                launches=fmt_int(pick(s, "launches")),
                q50=fmt_time(pick(q, "queue_p50_us", "p50_us", "p50")),
                q90=fmt_time(pick(q, "queue_p90_us", "p90_us", "p90")),
                qmax=fmt_time(pick(q, "queue_max_us", "max_us", "max")),
                short=fmt_int(pick(s, "short_kernels")),
                busy_w=_pct_of(busy, span or 0.0),
                launch_w=_pct_of(launch, span or 0.0),
                span_w=_pct_of(span, longest),
                idle_parts=idle_parts(s),
            )
        )
    note = f"Showing the first {len(shown)} of {len(steps)} steps." if len(steps) > len(shown) else ""
    return out, note
