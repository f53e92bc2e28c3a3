"""The `tracekit diff --html` page: a TraceDiff turned into strings, rendered with the report's environment.

Same rules as the report: the jinja2 environment of `report.html` (autoescape on), the report's CSS
inlined, a Content-Security-Policy that forbids every network request (and, here, every script: the
page has none), written atomically.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from markupsafe import Markup

from tracekit.compare.diff import AFTER, BEFORE, DELTA, MOVED_ROWS, TraceDiff, direction
from tracekit.output import write_atomic
from tracekit.report.diff_text import APPLIED_WORDS, collapsed, headline_lines
from tracekit.report.html import asset, environment
from tracekit.report.names import short_name
from tracekit.units import fmt_time

if TYPE_CHECKING:
    import pandas as pd

TEMPLATE = "diff.html.j2"
_LABELS = {
    "span_us": "Step span", "gpu_busy_us": "GPU busy", "gpu_idle_us": "GPU idle", "kernels": "Kernels",
    "launches": "Launches", "cpu_launch_us": "CPU launch time", "syncs": "Syncs", "sync_us": "Sync time",
    "host_wait_us": "Host-wait gaps",
}
_COUNTS = {"kernels", "launches", "syncs"}
TABLE_ROWS = 40


@dataclass(frozen=True)
class Row:
    """One table row: cells already formatted; `css` marks faster / slower."""

    cells: tuple[str, ...]
    css: str = ""
    titles: tuple[str, ...] = ()  # hover text per cell ("" where the cell shows all of it)


@dataclass(frozen=True)
class DiffView:
    """Everything the diff template shows, as strings."""

    version: str
    title: str
    before: str
    after: str
    headline: str  # the step the diff judges, its kind and change, the other two steps beside it
    disagreement: str  # "as traced it looks slower: the profiler's overhead changed", or ""
    headline_css: str  # faster / slower / ""
    attributed: str
    metrics: tuple[Row, ...]
    classes: tuple[Row, ...]
    idle: tuple[Row, ...]
    moved: tuple[Row, ...]
    kernels: tuple[Row, ...]
    suggestions: tuple[Row, ...]
    warnings: tuple[str, ...]


def _signed(us: float) -> str:
    return ("+" if us > 0 else "−" if us < 0 else "±") + fmt_time(abs(us))


NOISE = 0.005  # changes under 0.5 % of the BEFORE step are not coloured


def _css(delta: float | None, scale: float = 0.0) -> str:
    if not delta or abs(delta) < NOISE * scale:
        return ""
    return "faster" if delta < 0 else "slower"


def _cell(name: str, v: float | None) -> str:
    if v is None:
        return "–"
    return f"{v:.1f}" if name in _COUNTS else fmt_time(v)


def _rows(table: pd.DataFrame, label: Callable[[Mapping[str, Any]], tuple[str, ...]], scale: float,
          limit: int = TABLE_ROWS) -> tuple[Row, ...]:
    return tuple(Row((*label(r), fmt_time(r[BEFORE]), fmt_time(r[AFTER]), _signed(r[DELTA])),
                     _css(r[DELTA], scale)) for r in table.head(limit).to_dict("records"))


def _moved(table: pd.DataFrame, scale: float) -> tuple[Row, ...]:
    """The ops that moved most, numbers first: before, after, change, op, shapes, match, kernels."""
    rows = []
    for r in table.head(MOVED_ROWS).to_dict("records"):
        kb, kb_full = collapsed(str(r["kernels_before"]))
        ka, ka_full = collapsed(str(r["kernels_after"]))
        op, shapes = str(r["op"]), str(r["shapes"])
        rows.append(Row((fmt_time(r[BEFORE]), fmt_time(r[AFTER]), _signed(r[DELTA]), op, shapes or "–",
                         str(r["match"]), kb, ka), _css(r[DELTA], scale),
                        ("", "", "", op, shapes, "", kb_full, ka_full)))
    return tuple(rows)


def _verdict(verdict: str, cause: str | None) -> str:
    return f"{verdict}: {cause}" if cause else verdict


def diff_view(d: TraceDiff, version: str) -> DiffView:
    """The view model of one TraceDiff."""
    scale = abs(d.step.before or 0.0)
    metrics = []
    for m in d.metrics:
        pct = "–" if m.pct is None else f"{m.pct:+.1f}%"
        ratio = "–" if not m.ratio or not m.delta else (f"{m.ratio:.2f}× less" if m.ratio > 1
                                                       else f"{1 / m.ratio:.2f}× more")
        delta = "–" if m.delta is None else (f"{m.delta:+.1f}" if m.name in _COUNTS else _signed(m.delta))
        metrics.append(Row((_LABELS.get(m.name, m.name), _cell(m.name, m.before), _cell(m.name, m.after),
                            delta, pct, ratio), _css(m.delta, abs(m.before or 0.0))))
    lines = headline_lines(d, "→", fmt_time, "–")
    headline = lines[0][0].upper() + lines[0][1:] + f"; verdict {d.verdict[0]} → {d.verdict[1]}"
    way = direction(d.headline)
    headline_css = way if way in ("faster", "slower") else ""
    share = d.attributed_share
    attributed = "" if share is None else (
        f"Named kernel classes and GPU-idle causes account for {100 * share:.0f}% of the traced step change.")
    checks = []
    for s in d.suggestions:
        verdict = s.outcome or "–"
        applied = APPLIED_WORDS[s.applied]
        part = "–" if s.part_saving_us is None else (f"{fmt_time(s.before_part_us or 0.0)} → "
                                                     f"{fmt_time(s.after_part_us or 0.0)}")
        checks.append(Row((s.id, f"{applied}: {s.applied_evidence}", s.target, part,
                           "–" if s.predicted_us_per_step is None else fmt_time(s.predicted_us_per_step),
                           "–" if s.realised_us_per_step is None else fmt_time(s.realised_us_per_step), verdict),
                          {"came true": "faster", "untouched": None, "unconfirmed": None}.get(s.outcome or "", "slower")
                          or ""))
    kernels = d.kernels[d.kernels["match"] != "name"]
    return DiffView(
        version=version, title=f"tracekit diff: {Path(d.before_path).name} → {Path(d.after_path).name}",
        before=f"{d.before_path} ({d.before_steps} steps, {_verdict(d.verdict[0], d.cause[0])})",
        after=f"{d.after_path} ({d.after_steps} steps, {_verdict(d.verdict[1], d.cause[1])})",
        headline=headline, disagreement=lines[1] if len(lines) > 1 else "", headline_css=headline_css,
        attributed=attributed, metrics=tuple(metrics),
        classes=_rows(d.classes, lambda r: (r["class"],), scale),
        idle=_rows(d.idle, lambda r: (r["part"],), scale),
        moved=_moved(d.moved, scale),
        kernels=tuple(Row((*r.cells[:2], short_name(r.cells[2]), *r.cells[3:]), r.css, ("", "", r.cells[2]))
                      for r in _rows(kernels, lambda r: (r["match"], r["class"], r["name"]), scale)),
        suggestions=tuple(checks), warnings=d.warnings,
    )


def render_diff(d: TraceDiff) -> str:
    """The diff page HTML (one self-contained file)."""
    from tracekit._version import __version__

    return environment().get_template(TEMPLATE).render(view=diff_view(d, __version__),
                                                       css=Markup(asset("report.css")))


def write_diff_html(d: TraceDiff, out: Path, *, force: bool = False, inputs: Sequence[Path] = ()) -> Path:
    """Write the page atomically (an existing file only with force; else a numbered name beside it;
    never over one of the two traces or any other of the `inputs`: pipeline.compare.diff_inputs)."""
    return write_atomic(Path(out), lambda: render_diff(d), force=force,
                        inputs=(Path(d.before_path), Path(d.after_path), *inputs))
