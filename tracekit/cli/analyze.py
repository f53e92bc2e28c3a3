"""`tracekit analyze TRACE... [--json] [--rank N] [--jobs N] [--scheduler ADDR]`: the analysis, as text or JSON."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from tracekit.cli.common import (
    capture_option,
    fmt_us,
    max_bytes_option,
    quiet_option,
    run_for_cli,
    scheduler_options,
    steps_option,
)
from tracekit.terminal import visible
from tracekit.units import plural

if TYPE_CHECKING:
    from tracekit.pipeline import StepSelection


def _safe(text: object, width: int | None = None) -> str:
    """Trace names are untrusted: control characters made visible, truncated to `width`."""
    s = str(text)
    if width is not None and len(s) > width:
        s = s[: width - 3] + "..."
    return visible(s)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _num(x: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if x is None or x != x else fmt.format(x)


def _text(x: object) -> str:
    return "-" if x is None or (isinstance(x, float) and x != x) or x == "" else _safe(x)


def render_text(doc: dict[str, Any], top: int = 15, max_steps: int = 10) -> str:
    """A compact, human-readable rendering of an analysis document (`analyze --json`'s object)."""
    from tracekit.analyzers.steady import excluded_lines

    s = doc["summary"]
    ranks = ", ".join(str(r["rank"]) for r in doc["ranks"])
    device = (doc.get("device") or {}).get("name")
    verdict = s["verdict"] + (f" ({s['cause']})" if s.get("cause") else "")
    multi = len(doc["ranks"]) > 1
    lines = [f"trace     {_safe(doc['trace'])}", f"ranks     {ranks}",
             f"device    {_safe(device) if device else 'unknown (no roofline)'}",
             f"verdict   {_safe(verdict)}", f"          {_safe(s.get('evidence') or '')}", _steps_line(doc)]
    for line in excluded_lines(doc.get("excluded_steps") or [], multi=multi)[:max_steps]:
        lines.append(f"          {_safe(line, 140)}")
    if doc.get("stragglers") is not None:
        lines += ["", *cross_rank_text(doc), ""]
    if s["verdict"] != "cpu-only":
        per_step = _num(s["kernels_per_step_median"])
        lines += [
            f"GPU       busy {fmt_us(s['gpu_busy_us'])} of {fmt_us(s['span_us'])} span "
            f"({_pct(s['gpu_util'])}), idle {fmt_us(s['gpu_idle_us'])}",
            f"CPU       {s['launches']} launches, {fmt_us(s['cpu_launch_us'])} in launch calls; "
            f"{s['syncs']} syncs, {fmt_us(s['sync_us'])}",
            f"kernels   {s['kernels']} in {plural(s['steps'], 'step')} (median {per_step}/step"
            + (f", {_num(s['kernels_per_token'])}/token" if s["kernels_per_token"] is not None else "")
            + f"), {s['short_kernels']} shorter than their launch call",
            f"queue     delay p50 {fmt_us(s['queue_p50_us'])}, p90 {fmt_us(s['queue_p90_us'])}, "
            f"max {fmt_us(s['queue_max_us'])}",
            f"idle      per stream: host wait {fmt_us(s['host_wait_us'])}, kernel wait "
            f"{fmt_us(s['kernel_wait_us'])}, other {fmt_us(s['other_idle_us'])}",
            "", "time by class:",
        ]
        for r in doc["classes"]:
            lines.append(f"  {_safe(r['class']):14s} {fmt_us(r['time_us']):>12s} {100 * r['share']:6.1f}% {r['count']:8d}x")
        kernels = doc["kernels"]
        lines += ["", f"top kernel rows (grouped by name, op and shapes; of {len(kernels)} rows):",
                  f"  {'time':>12s} {'share':>6s} {'count':>7s} {'class':13s} {'library':10s} "
                  f"{'TFLOP/s':>8s} {'GB/s':>8s} {'bound':7s} name"]
        total = sum(r["time_us"] for r in doc["classes"]) or 1.0
        for r in kernels[:top]:
            lines.append(
                f"  {fmt_us(r['time_us']):>12s} {100 * r['time_us'] / total:5.1f}% {int(r['count']):7d} "
                f"{_safe(r['class']):13s} {_safe(r['library']):10s} {_num(r['achieved_tflops'], '{:.2f}'):>8s} "
                f"{_num(r['achieved_gbps'], '{:.0f}'):>8s} {_text(r['bound']):7s} {_safe(r['name'], 60)}")
    if doc.get("suggestions"):
        lines += ["", "what to change (estimated saving per step; savings overlap, they do not add up):"]
        for sug in doc["suggestions"][:top]:
            where = f"r{sug['rank']:<3d} " if "rank" in sug else ""
            lines.append(f"  {fmt_us(sug['per_step_us']):>12s} {sug['saving_pct']:5.1f}%  {where}"
                         f"{_safe(sug['id']):18s} {_safe(sug['title'], 90)}")
    steps = doc.get("steps") or []
    if steps and steps[0]["step"] >= 0:
        lines += ["", "steps:", f"  {'rank ' if multi else ''}{'step':>6s} {'phase':8s} {'span':>12s} "
                  f"{'GPU busy':>12s} {'util':>6s} {'kernels':>7s} {'launches':>8s} {'CPU launch':>12s} verdict"]
        for st in steps[:max_steps]:
            util = st["gpu_busy_us"] / st["span_us"] if st["span_us"] > 0 else None
            who = f"{st['rank']:4d} " if multi else ""
            cause = f" ({st['cause']})" if st.get("cause") else ""
            lines.append(f"  {who}{st['step']:6d} {_safe(st.get('phase', '')):8s} {fmt_us(st['span_us']):>12s} "
                         f"{fmt_us(st['gpu_busy_us']):>12s} {_pct(util):>6s} {st['kernels']:7d} "
                         f"{st['launches']:8d} {fmt_us(st['cpu_launch_us']):>12s} {_safe(st['verdict'])}{_safe(cause)}")
        if len(steps) > max_steps:
            lines.append(f"  ... {len(steps) - max_steps} more (see --json)")
    return "\n".join(lines)


def _steps_line(doc: dict[str, Any]) -> str:
    """Which steps the numbers above describe."""
    scopes = {r.get("scope") for r in doc["ranks"]}
    s = doc["summary"]
    total = s.get("steps_total") or len(doc.get("steps") or ())
    used = len(doc.get("steady_steps") or ())
    if scopes == {"trace"}:
        return "steps     none marked: first GPU launch to the end of the last GPU activity"
    how = "inferred from the repeating op sequence" if "inferred" in scopes else "ProfilerStep"
    mode = s["steps_mode"]
    what = {"steady": "steady", "all": "all"}.get(mode, f"selected ({mode})")
    return f"steps     {used} {what} of {total} ({how}); numbers below are per step over these"


def cross_rank_text(doc: dict[str, Any], max_steps: int = 10) -> list[str]:
    """The cross-rank lines of a multi-rank document: verdicts, stragglers, skew per step."""
    groups = "; ".join(f"{g['count']} {_safe(g['verdict'])} ({', '.join(map(str, g['ranks']))})"
                       for g in doc.get("rank_verdicts") or ())
    lines = [f"ranks by verdict: {groups}"]
    if doc["stragglers"]:
        for s in doc["stragglers"]:
            lines.append(f"straggler {_safe(s['evidence'])}; the others wait "
                         f"{fmt_us(s['others_wait_us_per_step'])} per step")
    else:
        counts = sorted(doc.get("late_steps") or (), key=lambda x: -x["steps"])
        top = f" (most often last: rank {counts[0]['rank']}, in {counts[0]['steps']} of {len(doc['skew'])} steps)" \
            if counts and counts[0]["steps"] else ""
        lines.append(f"straggler none: no rank arrives last at the collectives in most steps more often than "
                     f"chance would{top}")
    skew = doc.get("skew") or []
    if skew:
        lines += ["skew per step:", f"  {'step':>6s} {'span min':>10s} {'median':>10s} {'max':>10s} "
                  f"{'slowest':>7s} {'colls':>5s} {'start spread':>12s} {'late':>4s} {'waiting':>10s}"]
        for k in skew[:max_steps]:
            late = "-" if k["late_rank"] is None else str(k["late_rank"])
            lines.append(f"  {k['step']:6d} {fmt_us(k['span_min_us']):>10s} {fmt_us(k['span_median_us']):>10s} "
                         f"{fmt_us(k['span_max_us']):>10s} {k['slowest_rank']:7d} {k['collectives']:5d} "
                         f"{fmt_us(k['start_spread_max_us']) if k['start_spread_max_us'] is not None else '-':>12s} "
                         f"{late:>4s} {fmt_us(k['wait_us']):>10s}")
        if len(skew) > max_steps:
            lines.append(f"  ... {len(skew) - max_steps} more (see --json)")
    return lines


@click.command("analyze", short_help="Print what bounds TRACE (verdict, time by class, top kernels) and what to change.")
@click.argument("traces", nargs=-1, required=True, metavar="TRACE...")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (schema tracekit.analysis/1).")
@click.option("--rank", type=int, default=None, help="Analyze only this rank (default: all ranks).")
@click.option("--tokens-per-step", type=float, default=None,
              help="Tokens generated per profiler step (decode), to report kernels per token.")
@click.option("--top", default=15, show_default=True, help="How many kernel rows to list.")
@steps_option
@max_bytes_option
@capture_option
@scheduler_options
@quiet_option
def command(traces: tuple[str, ...], as_json: bool, rank: int | None, tokens_per_step: float | None, top: int,
            steps: StepSelection, max_bytes: int | None, captures: tuple[str, ...], jobs: int | None,
            scheduler: str | None, quiet: bool) -> None:
    """Classify kernels, measure launch overhead vs GPU time, place kernels on the roofline.

    TRACE is a trace file, a directory of per-rank traces, or a glob ('run/*.json.gz'); several may
    be given. Ranks are analysed in parallel (--jobs) and compared: who holds the job back, and why.
    """
    result = run_for_cli(traces, quiet=quiet, rank=rank, jobs=jobs, scheduler=scheduler,
                         tokens_per_step=tokens_per_step, steps=steps, max_bytes=max_bytes, captures=captures,
                         progress_quiet=quiet or as_json)
    doc = result.to_dict()
    if as_json:
        click.echo(json.dumps(doc, indent=2, allow_nan=False))
    else:
        click.echo(render_text(doc, top=top))
