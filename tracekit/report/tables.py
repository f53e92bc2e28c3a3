"""Table and bar views for the report: kernel rows, time by class/library, launch overhead per step."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import pandas as pd

from tracekit.analyzers.kernels import SUM_COUNT, SUM_KEY, SUM_TIME
from tracekit.analyzers.launch import LaunchOverhead, LaunchTotals
from tracekit.report.names import hover_name, short_name
from tracekit.report.palette import class_color
from tracekit.units import (
    DASH,
    fmt_bytes,
    fmt_int,
    fmt_pct,
    fmt_ratio,
    fmt_si,
    fmt_time,
    num,
    plural,
)

MAX_KERNEL_ROWS = 1000  # rows beyond this are summed into one "rest" line with a note
MAX_STEP_ROWS = 64
MAX_BARS = 12


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
    phase: str = ""  # '' for a steady step, else why the headline leaves it out ('one-time work')


def fmt_shapes(shapes: object) -> str:
    """Input shapes as '1×768, 768×2304' from a tuple of shape tuples; text as given; unknown as a dash."""
    if shapes is None or shapes == "":
        return DASH
    if isinstance(shapes, str):
        return shapes
    if isinstance(shapes, (tuple, list)):
        parts = []
        for one in shapes:
            if isinstance(one, (tuple, list)):
                parts.append("×".join(str(x) for x in one) if one else "()")
            else:
                parts.append(str(one))
        return ", ".join(parts) if parts else DASH
    return str(shapes)


COLUMNS: tuple[Column, ...] = (
    Column("name", "Kernel", False, css="l kname"),
    Column("class", "Class", False, css="l clip-s"),
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


def _numcell(value: object, fmt: Callable[[object], str]) -> Cell:
    v = num(value)
    return Cell(fmt(v), float(f"{v:.6g}") if v is not None else -1.0)


def _estimated(cell: Cell, estimated: object) -> Cell:
    """A FLOPs / TFLOP/s cell of a row whose counts are estimates (costs.estimates): "~" before it."""
    if estimated is not True or cell.text == DASH:
        return cell
    return Cell("~" + cell.text, cell.sort, "estimated from the kernels' names and launch grids")


def name_cell(name: str) -> Cell:
    """The short kernel name, with the full one (demangled, capped) as hover text."""
    short = short_name(name)
    title = hover_name(name) if short != name or len(name) > 22 else ""
    return Cell(short, short.lower(), title)


def _textcell(value: object, *, clip: int = 0) -> Cell:
    text = DASH if value is None or value == "" or (isinstance(value, float) and value != value) else str(value)
    return Cell(text, text.lower(), text if clip and len(text) > clip else "")


def _gbps_plain(v: object) -> str:
    x = num(v)
    return fmt_int(x) if x is not None and x >= 100 else fmt_ratio(x)


def _pct_auto(v: object) -> str:
    """roofline_pct is a percent (0..100)."""
    return fmt_pct(v, fraction=False)


def by_time(kernels: pd.DataFrame) -> pd.DataFrame:
    """Kernel rows longest first, positions 0..n-1 as index (the kernel table's row numbers)."""
    return kernels.sort_values("time_us", ascending=False, kind="stable").reset_index(drop=True)


def kernel_table(kernels: pd.DataFrame) -> KernelTable:
    """The kernel rows (Analysis.kernels), longest first, capped at MAX_KERNEL_ROWS with the rest in a note."""
    rows_sorted = by_time(kernels)
    total_time = float(rows_sorted["time_us"].sum())
    shown = rows_sorted.head(MAX_KERNEL_ROWS)
    rows, row_classes = [], []
    for k in shown.itertuples(index=False):
        t = num(k.time_us)
        guess = getattr(k, "estimated", False)
        share = (t / total_time) if (t is not None and total_time) else None
        rows.append(
            (
                name_cell(str(k.name)),
                _textcell(k._1, clip=11),  # the 'class' column (a keyword, renamed by itertuples)
                _textcell(k.library),
                _textcell(k.op, clip=13),
                _textcell(fmt_shapes(k.shapes), clip=13),
                _textcell(k.dtype),
                _numcell(k.count, fmt_int),
                _numcell(t, fmt_time),
                _numcell(share, fmt_pct),
                _estimated(_numcell(k.flops, fmt_si), guess),
                _estimated(_numcell(k.bytes, fmt_bytes), guess),
                _numcell(k.intensity, fmt_ratio),
                _estimated(_numcell(k.achieved_tflops, fmt_ratio), guess),
                _numcell(k.achieved_gbps, _gbps_plain),
                _textcell(k.bound),
                _numcell(k.roofline_pct, _pct_auto),
            )
        )
        row_classes.append(str(k._1 or "other"))
    note = ""
    if len(rows_sorted) > len(shown):
        rest = len(rows_sorted) - len(shown)
        rest_t = float(rows_sorted["time_us"].iloc[len(shown):].sum())
        note = (
            f"Showing the {len(shown):,} longest of {len(rows_sorted):,} kernel rows; the other "
            f"{rest:,} take {fmt_time(rest_t)} ({fmt_pct(rest_t / total_time if total_time else None)}"
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
    """Bars from {label: (time_us, count)}, largest first; extra labels merged into 'N others'."""
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
                count=plural(c, "call") if c else "",
                color=class_color(label) if colors else "#5b7fa8",
                width=round(100 * t / top, 2),
            )
        )
    return out


def summary_bars(table: pd.DataFrame, *, colors: bool) -> list[Bar]:
    """Bars from a kernels.summarize table (Analysis.classes or .libraries)."""
    items = {
        str(key): (float(t), int(c))
        for key, t, c in zip(table[SUM_KEY], table[SUM_TIME], table[SUM_COUNT], strict=True)
    }
    return bars(items, colors=colors)


def _pct_of(part: float | None, whole: float) -> float:
    return 0.0 if part is None or whole <= 0 else round(min(100.0, 100.0 * part / whole), 2)


# idle breakdown: the time no stream has GPU work (the union over streams, so the parts add up to the
# step's GPU idle and never exceed its span), by what kept it idle: LaunchTotals fields -> label, css swatch
IDLE_PARTS = (
    (("launch_gap_us",), "waiting for launches", "host"),
    (("cpu_wait_us", "data_wait_us", "sync_wait_us", "copy_wait_us"), "other CPU work (Python, DataLoader, syncs, copies)", "other"),
    (("gpu_gap_us",), "waiting on the GPU itself", "kwait"),
)


def idle_parts(t: LaunchTotals) -> tuple[tuple[str, float, str, str], ...]:
    """(label, share of the breakdown in %, text, css) for the idle breakdown of a step or summary."""
    values = [(label, css, float(sum(getattr(t, key) for key in keys))) for keys, label, css in IDLE_PARTS]
    total = sum(v for _, _, v in values if v) or 0.0
    return tuple(
        (label, _pct_of(v, total), f"{label}: {fmt_time(v)} ({fmt_pct(v / total)})", css)
        for label, css, v in values
        if v and total
    )


PHASE_LABELS = {"setup": "one-time work", "warmup": "warm-up", "partial": "partial step", "outlier": "outlier"}


def step_label(step: int) -> str:
    """'step 12', or 'whole trace' for the pseudo-step -1 of a trace without ProfilerStep marks."""
    return "whole trace" if step < 0 else f"step {step}"


def step_rows(lo: LaunchOverhead) -> tuple[list[StepRow], str]:
    """One row per step (capped), bars scaled to the longest span, plus a note when capped."""
    frame = lo.steps
    n = min(len(frame), MAX_STEP_ROWS)
    phases = frame["phase"].astype(str).tolist() if "phase" in frame else ["steady"] * len(frame)
    totals = lo.step_totals[:n]
    longest = max((t.span_us for t in totals), default=0.0) or 1.0
    out = []
    for i, t in enumerate(totals):
        row = frame.iloc[i]
        out.append(
            StepRow(
                label=step_label(int(row["step"])),
                span=fmt_time(t.span_us),
                gpu_busy=fmt_time(t.gpu_busy_us),
                cpu_launch=fmt_time(t.cpu_launch_us),
                idle=fmt_time(t.gpu_idle_us),
                kernels=fmt_int(t.kernels),
                launches=fmt_int(t.launches),
                q50=fmt_time(row["queue_p50_us"]),
                q90=fmt_time(row["queue_p90_us"]),
                qmax=fmt_time(row["queue_max_us"]),
                short=fmt_int(t.short_kernels),
                busy_w=_pct_of(t.gpu_busy_us, t.span_us),
                launch_w=_pct_of(t.cpu_launch_us, t.span_us),
                span_w=_pct_of(t.span_us, longest),
                idle_parts=idle_parts(t),
                phase="" if phases[i] == "steady" else PHASE_LABELS.get(phases[i], phases[i]),
            )
        )
    note = f"Showing the first {n} of {len(frame)} steps." if len(frame) > n else ""
    return out, note
