"""`tracekit analyze TRACE [--json] [--rank N]`: kernel classes, launch overhead, roofline rows."""

from __future__ import annotations

import json
from collections.abc import Sequence

import click

from tracekit.analyzers.analysis import Analysis
from tracekit.cli.common import (
    analyze_for_cli,
    capture_option,
    fmt_us,
    load_for_cli,
    max_bytes_option,
    quiet_option,
    steps_option,
)
from tracekit.suggestions import Suggestion, analysis_document, suggest
from tracekit.terminal import visible


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


def render_text(a: Analysis, suggestions: Sequence[Suggestion] = (), top: int = 15,
                max_steps: int = 10) -> str:
    """A compact, human-readable rendering of an Analysis."""
    s = a.summary_dict()
    ranks = ", ".join(str(r.rank) for r in a.ranks)
    device = a.device.name if a.device is not None else None
    verdict = s["verdict"] + (f" ({s['cause']})" if s.get("cause") else "")
    lines = [f"trace     {_safe(a.path)}", f"ranks     {ranks}",
             f"device    {_safe(device) if device else 'unknown (no roofline)'}",
             f"verdict   {verdict}", f"          {_safe(a.evidence)}", _steps_line(a)]
    for ex in a.excluded_steps()[:max_steps]:
        rank = f"rank {ex['rank']} " if len(a.ranks) > 1 else ""
        lines.append(f"          {rank}step {ex['step']} ({ex['phase']}, {fmt_us(ex['span_us'])}): {_safe(ex['reason'], 110)}")
    if s["verdict"] != "cpu-only":
        per_step = _num(s["kernels_per_step_median"])
        lines += [
            f"GPU       busy {fmt_us(s['gpu_busy_us'])} of {fmt_us(s['span_us'])} span "
            f"({_pct(s['gpu_util'])}), idle {fmt_us(s['gpu_idle_us'])}",
            f"CPU       {s['launches']} launches, {fmt_us(s['cpu_launch_us'])} in launch calls; "
            f"{s['syncs']} syncs, {fmt_us(s['sync_us'])}",
            f"kernels   {s['kernels']} in {s['steps']} step(s) (median {per_step}/step"
            + (f", {_num(s['kernels_per_token'])}/token" if s["kernels_per_token"] is not None else "")
            + f"), {s['short_kernels']} shorter than their launch call",
            f"queue     delay p50 {_num(s['queue_p50_us'])} µs, p90 {_num(s['queue_p90_us'])} µs, "
            f"max {_num(s['queue_max_us'])} µs",
            f"idle      per stream: host wait {fmt_us(s['host_wait_us'])}, kernel wait "
            f"{fmt_us(s['kernel_wait_us'])}, other {fmt_us(s['other_idle_us'])}",
            "", "time by class:",
        ]
        for r in a.classes.itertuples(index=False):
            lines.append(f"  {r.key:14s} {fmt_us(r.time_us):>12s} {100 * r.share:6.1f}% {r.count:8d}x")
        lines += ["", f"top kernels (of {len(a.kernels)} rows):",
                  f"  {'time':>12s} {'share':>6s} {'count':>7s} {'class':13s} {'library':10s} "
                  f"{'TFLOP/s':>8s} {'GB/s':>8s} {'bound':7s} name"]
        total = a.classes["time_us"].sum() or 1.0
        for r in a.kernels.head(top).to_dict("records"):
            lines.append(
                f"  {fmt_us(r['time_us']):>12s} {100 * r['time_us'] / total:5.1f}% {int(r['count']):7d} "
                f"{_safe(r['class']):13s} {_safe(r['library']):10s} {_num(r['achieved_tflops'], '{:.2f}'):>8s} "
                f"{_num(r['achieved_gbps'], '{:.0f}'):>8s} {_text(r['bound']):7s} {_safe(r['name'], 60)}")
    graph_lines = [_safe(r.graphs.line()) for r in a.ranks if r.graphs is not None]
    lines += ["", *graph_lines] if graph_lines else []
    if suggestions:
        lines += ["", "what to change (estimated saving per step; savings overlap, they do not add up):"]
        for sug in suggestions[:top]:
            lines.append(f"  {fmt_us(sug.per_step_us):>12s} {sug.saving_pct:5.1f}%  {sug.id:18s} {_safe(sug.title, 90)}")
    steps = [rec for r in a.ranks for rec in r.launch.steps.to_dict("records")]
    if steps and steps[0]["step"] >= 0:
        lines += ["", "steps:", f"  {'step':>6s} {'phase':8s} {'span':>12s} {'GPU busy':>12s} {'util':>6s} "
                  f"{'kernels':>7s} {'launches':>8s} {'CPU launch':>12s} verdict"]
        for st in steps[:max_steps]:
            util = st["gpu_busy_us"] / st["span_us"] if st["span_us"] > 0 else None
            cause = f" ({st['cause']})" if st.get("cause") else ""
            lines.append(f"  {st['step']:6d} {st['phase']:8s} {fmt_us(st['span_us']):>12s} "
                         f"{fmt_us(st['gpu_busy_us']):>12s} {_pct(util):>6s} {st['kernels']:7d} "
                         f"{st['launches']:8d} {fmt_us(st['cpu_launch_us']):>12s} {st['verdict']}{cause}")
        if len(steps) > max_steps:
            lines.append(f"  ... {len(steps) - max_steps} more (see --json)")
    return "\n".join(lines)


def _steps_line(a: Analysis) -> str:
    """Which steps the numbers above describe."""
    scopes = {r.launch.scope for r in a.ranks}
    total = sum(len(r.launch.step_totals) for r in a.ranks)
    used = sum(len(r.launch.steady_steps) for r in a.ranks)
    if scopes == {"trace"}:
        return "steps     none marked: first GPU launch to the end of the last GPU activity"
    how = "inferred from the repeating op sequence" if "inferred" in scopes else "ProfilerStep"
    what = {"steady": "steady", "all": "all"}.get(a.steps_mode, f"selected ({a.steps_mode})")
    return f"steps     {used} {what} of {total} ({how}); numbers below are per step over these"


@click.command("analyze")
@click.argument("trace", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (schema tracekit.analysis/1).")
@click.option("--rank", type=int, default=None, help="Analyze only this rank (default: all ranks).")
@click.option("--tokens-per-step", type=float, default=None,
              help="Tokens generated per profiler step (decode), to report kernels per token.")
@click.option("--top", default=15, show_default=True, help="How many kernel rows to list.")
@steps_option
@max_bytes_option
@capture_option
@quiet_option
def command(trace: str, as_json: bool, rank: int | None, tokens_per_step: float | None, top: int,
            steps: str, max_bytes: int | None, captures: tuple[str, ...], quiet: bool) -> None:
    """Classify kernels, measure launch overhead vs GPU time, place kernels on the roofline."""
    loaded = load_for_cli(trace, quiet=quiet or as_json, max_bytes=max_bytes, captures=captures)
    result = analyze_for_cli(loaded, rank=rank, tokens_per_step=tokens_per_step, steps=steps)
    found = suggest(result)
    if as_json:
        click.echo(json.dumps(analysis_document(result, found), indent=2, allow_nan=False))
    else:
        click.echo(render_text(result, found, top=top))
