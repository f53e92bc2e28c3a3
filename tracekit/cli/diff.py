"""`tracekit diff BEFORE AFTER`: what changed between two runs, per steady step, and did the predictions come true."""

from __future__ import annotations

import json
from pathlib import Path

import click

from tracekit.analyzers.analysis import Analysis
from tracekit.cli.common import analyze_for_cli, load_for_cli, quiet_option, steps_option
from tracekit.compare.diff import AFTER, BEFORE, DELTA, Change, TraceDiff, diff
from tracekit.pipeline import STEADY_STEPS, StepSelection
from tracekit.report.text import safe as _safe
from tracekit.suggestions import suggest
from tracekit.units import fmt_us

_LABELS = {
    "span_us": "step span", "gpu_busy_us": "GPU busy", "gpu_idle_us": "GPU idle", "kernels": "kernels",
    "launches": "launches", "cpu_launch_us": "CPU launch time", "syncs": "syncs", "sync_us": "sync time",
    "host_wait_us": "host-wait gaps",
}
_COUNTS = {"kernels", "launches", "syncs"}


def _value(name: str, v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.1f}" if name in _COUNTS else fmt_us(v)


def _signed(us: float) -> str:
    return ("+" if us > 0 else "-" if us < 0 else "±") + fmt_us(abs(us))


def _change(c: Change) -> str:
    if c.delta is None:
        return "-"
    pct = "" if c.pct is None else f"{c.pct:+.1f}%"
    ratio = ""
    if c.ratio is not None and c.ratio > 0 and c.delta != 0:
        ratio = f"  {c.ratio:.2f}x less" if c.ratio > 1 else f"  {1 / c.ratio:.2f}x more"
    delta = f"{c.delta:+.1f}" if c.name in _COUNTS else _signed(c.delta)
    return f"{delta:>10s} {pct:>8s}{ratio}"


def render_text(d: TraceDiff, top: int = 10) -> str:
    """The diff as text: step metrics, classes, idle, ops that moved, new/vanished kernels, suggestions."""
    lines = [f"before  {_safe(d.before_path)}  ({d.before_steps} steps, {d.verdict[0]}"
             + (f", {d.cause[0]}" if d.cause[0] else "") + ")",
             f"after   {_safe(d.after_path)}  ({d.after_steps} steps, {d.verdict[1]}"
             + (f", {d.cause[1]}" if d.cause[1] else "") + ")", "",
             f"{'per steady step':18s} {'before':>10s} {'after':>10s} {'change':>10s}"]
    for m in d.metrics:
        lines.append(f"{_LABELS.get(m.name, m.name):18s} {_value(m.name, m.before):>10s} "
                     f"{_value(m.name, m.after):>10s} {_change(m)}")
    lines.append(f"{'verdict':18s} {d.verdict[0]} -> {d.verdict[1]}")
    share = d.attributed_share
    if share is not None:
        lines.append(f"named parts account for {100 * share:.0f}% of the step change "
                     "(classes and GPU idle by cause)")
    lines += ["", f"{'time by class':18s} {'before':>10s} {'after':>10s} {'change':>10s}"]
    for r in d.classes.head(top).to_dict("records"):
        lines.append(f"  {_safe(r['class']):16s} {fmt_us(r[BEFORE]):>10s} {fmt_us(r[AFTER]):>10s} "
                     f"{_signed(r[DELTA]):>10s}")
    lines += ["", f"{'GPU idle':18s} {'before':>10s} {'after':>10s} {'change':>10s}"]
    for r in d.idle.to_dict("records"):
        lines.append(f"  {r['part']:16s} {fmt_us(r[BEFORE]):>10s} {fmt_us(r[AFTER]):>10s} {_signed(r[DELTA]):>10s}")
    lines += ["", "ops that moved most (matched by launching op and input shapes):"]
    for r in d.moved.head(top).to_dict("records"):
        kernels = r["kernels_before"] if r["kernels_before"] == r["kernels_after"] else \
            f"{r['kernels_before'] or '-'} => {r['kernels_after'] or '-'}"
        lines.append(f"  {_signed(r[DELTA]):>10s} {fmt_us(r[BEFORE]):>10s} -> {fmt_us(r[AFTER]):>10s} "
                     f"{r['match']:9s} {_safe(r['op'], 32)} {_safe(r['shapes'], 40)}  [{_safe(kernels, 90)}]")
    for label, status in (("new kernels", "new"), ("vanished kernels", "vanished")):
        rows = d.kernels[d.kernels["match"] == status]
        if len(rows):
            lines += ["", f"{label} ({len(rows)}):"]
            for r in rows.head(5).to_dict("records"):
                t = r[AFTER] if status == "new" else r[BEFORE]
                lines.append(f"  {fmt_us(t):>10s}  {_safe(r['class']):13s} {_safe(r['name'], 90)}")
    if d.suggestions:
        lines += ["", "suggestions on BEFORE: predicted saving vs the realised change of the part each targets"]
        for s in d.suggestions:
            pred = "-" if s.predicted_us_per_step is None else fmt_us(s.predicted_us_per_step)
            real = "-" if s.realised_us_per_step is None else _signed(-s.realised_us_per_step)
            verdict = s.outcome or "-"
            lines.append(f"  {s.id:18s} predicted -{pred:>10s}  realised {real:>10s}  {verdict}  "
                         f"({s.target})")
    for w in d.warnings:
        lines.append(f"note: {w}")
    return "\n".join(lines)


def _analysed(path: str, quiet: bool, rank: int | None, steps: StepSelection) -> Analysis:
    return analyze_for_cli(load_for_cli(path, quiet=quiet), steps=steps, rank=rank)


def compare(before: str, after: str, *, quiet: bool = False, rank: int | None = None,
            steps: StepSelection = STEADY_STEPS) -> TraceDiff:
    """Load and analyse both traces, run the rules on BEFORE, and diff them."""
    a = _analysed(before, quiet, rank, steps)
    b = _analysed(after, quiet, rank, steps)
    return diff(a, b, suggest(a))


def slower_message(d: TraceDiff, pct: float) -> str | None:
    """Why the CI gate fails (None when the step did not get slower by more than pct %)."""
    step = d.step
    if step.pct is None or step.pct <= pct:
        return None
    grew = d.grew_most()
    which = ""
    if grew is not None:
        row = d.classes[d.classes["class"] == grew].iloc[0]
        which = f"; {grew} grew most ({_signed(float(row[DELTA]))} per step)"
    return (f"the steady step got {step.pct:.1f}% slower ({fmt_us(step.before or 0)} -> "
            f"{fmt_us(step.after or 0)}), more than {pct:g}%{which}")


@click.command("diff")
@click.argument("before", type=click.Path())
@click.argument("after", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (schema tracekit.diff/1).")
@click.option("--html", "html", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the diff as one offline HTML page.")
@click.option("--force", is_flag=True, help="Overwrite the --html file if it exists.")
@click.option("--fail-if-slower", "fail_pct", type=click.FloatRange(min=0), default=None, metavar="PCT",
              help="Exit 1 when the steady step got slower by more than PCT percent.")
@click.option("--rank", type=int, default=None, help="Compare only this rank (default: all ranks).")
@click.option("--top", default=10, show_default=True, help="How many rows per table in the text.")
@steps_option
@quiet_option
def command(before: str, after: str, as_json: bool, html: Path | None, force: bool, fail_pct: float | None,
            rank: int | None, top: int, steps: StepSelection, quiet: bool) -> None:
    """Compare two traces (files or rank directories) over their steady steps; check BEFORE's suggestions."""
    result = compare(before, after, quiet=quiet or as_json, rank=rank, steps=steps)
    if html is not None:
        from tracekit.report.diff_view import write_diff_html

        written = write_diff_html(result, html, force=force)
        if not quiet:
            click.echo(f"tracekit: diff page written to {written}", err=True)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2, allow_nan=False))
    else:
        click.echo(render_text(result, top=top))
    if fail_pct is not None:
        message = slower_message(result, fail_pct)
        if message is not None:
            click.echo(f"tracekit: {message}", err=True)
            raise SystemExit(1)
