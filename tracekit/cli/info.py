"""`tracekit info TRACE... [--json] [--jobs N]`: a one-screen summary of a trace."""

from __future__ import annotations

import json

import click

from tracekit.cli.common import (
    capture_option,
    fmt_us,
    max_bytes_option,
    quiet_option,
    scheduler_options,
)
from tracekit.report.names import short_name
from tracekit.terminal import visible
from tracekit.trace.summary import RankSummary
from tracekit.units import plural

INFO_SCHEMA = "tracekit.info/1"
COUNT_KEYS = ("events", "kernels", "memcpy", "memset", "cpu_ops", "launches",
              "kernels_linked_to_launch", "kernels_linked_to_op")


def info_dict(path: str, summaries: list[RankSummary], warnings: tuple[str, ...],
              device: str | None = None) -> dict:
    """The `info --json` object: totals over ranks at the top, one entry per rank below.

    `device` is the one device name every command shows (tracefacts.device_label); without it, the
    name the trace gives."""
    out: dict = {"schema": INFO_SCHEMA, "path": path, "ranks": [s.rank for s in summaries],
                 "device": device or next((s.device for s in summaries if s.device), None),
                 "platform": summaries[0].platform}
    for key in COUNT_KEYS:
        out[key] = sum(getattr(s, key) for s in summaries)
    out["gpu_busy_us"] = round(sum(s.gpu_busy_us for s in summaries), 3)
    out["span_us"] = round(max(s.span_us for s in summaries), 3)
    out["steps"] = max(s.steps for s in summaries)
    out["cpu_only"] = all(s.kernels + s.memcpy + s.memset == 0 for s in summaries)
    out["skipped_events"] = sum(s.skipped for s in summaries)
    out["per_rank"] = [_rank_dict(s) for s in summaries]
    out["warnings"] = list(warnings)
    return out


def _rank_dict(s: RankSummary) -> dict:
    d = {"rank": s.rank, "path": s.path, "device": s.device, "platform": s.platform}
    d.update({k: getattr(s, k) for k in COUNT_KEYS})
    d.update(gpu_busy_us=round(s.gpu_busy_us, 3), span_us=round(s.span_us, 3), steps=s.steps,
             top_kernels=[{"name": r.name, "count": int(r.count), "time_us": round(float(r.time_us), 3),
                           "share": round(float(r.share), 4)} for r in s.top_kernels.itertuples()])
    return d


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def render_text(info: dict) -> str:
    lines = [f"trace     {visible(info['path'])}",
             f"device    {visible(info['device'] or 'not named in the trace')} ({info['platform']})",
             f"ranks     {', '.join(map(str, info['ranks']))}",
             f"steps     {info['steps'] or 'none marked (whole trace = one step)'}"]
    if info["cpu_only"]:
        lines.append("GPU       none: CPU-only trace (no kernels, memcpy or memset)")
    for r in info["per_rank"]:
        head = f"rank {r['rank']}" if len(info["per_rank"]) > 1 else "counts"
        busy = 100 * r["gpu_busy_us"] / r["span_us"] if r["span_us"] else 0.0
        lines += ["", f"{head}: {r['events']:,} events, {r['cpu_ops']:,} CPU ops, {plural(r['launches'], 'launch', 'launches')}",
                  f"  GPU     {plural(r['kernels'], 'kernel')}, {r['memcpy']:,} memcpy, {r['memset']:,} memset",
                  f"  linked  {_pct(r['kernels_linked_to_launch'], r['kernels'])} of kernels to a launch,"
                  f" {_pct(r['kernels_linked_to_op'], r['kernels'])} to an op",
                  f"  time    GPU busy {fmt_us(r['gpu_busy_us'])} of {fmt_us(r['span_us'])} recorded, first to last "
                  f"event ({busy:.1f}%; `analyze` and the report measure the profiled steps)"]
        if r["top_kernels"]:
            lines.append("  top kernels by name (all calls of a name together; `analyze` also splits by op and shapes):")
            shorts = [short_name(k["name"]) for k in r["top_kernels"]]
            for k, short in zip(r["top_kernels"], shorts, strict=True):
                name = short if shorts.count(short) == 1 else k["name"]  # same short name: tell them apart
                name = visible(name if len(name) <= 70 else name[:67] + "...")
                lines.append(f"    {100 * k['share']:5.1f}%  {fmt_us(k['time_us']):>9s}  {k['count']:6,d}x  {name}")
    return "\n".join(lines)


@click.command("info", short_help="Summarize TRACE: device, counts, GPU busy time, top kernels by name.")
@click.argument("traces", nargs=-1, required=True, metavar="TRACE...")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (schema tracekit.info/1).")
@click.option("--top", default=10, show_default=True, help="How many top kernels to list.")
@max_bytes_option
@capture_option
@scheduler_options
@quiet_option
def command(traces: tuple[str, ...], as_json: bool, top: int, max_bytes: int | None, captures: tuple[str, ...],
            jobs: int | None, scheduler: str | None, quiet: bool) -> None:
    """Summarize TRACE (a .json/.json.gz file, a directory of per-rank traces, a glob; several may be
    given). Files are read in parallel (--jobs, or a Dask --scheduler)."""
    from tracekit.executor import progress_bar, scheduler_from_env
    from tracekit.pipeline import display_path
    from tracekit.pipeline.info import summaries

    found, warnings, replays = summaries(list(traces), top=top, jobs=jobs, scheduler=scheduler_from_env(scheduler),
                                         max_bytes=max_bytes, captures=captures,
                                         progress=progress_bar(quiet or as_json))
    if not (quiet or as_json):
        for warning in warnings:
            click.echo(f"tracekit: warning: {visible(warning)}", err=True)
    info = info_dict(display_path(list(traces)), found, warnings)
    info["graphs"] = [g for g, _ in replays]
    text = render_text(info)
    if replays:
        text += "\n\n" + "\n".join(line for _, line in replays)
    click.echo(json.dumps(info, indent=2) if as_json else text)
