"""`tracekit info` as text: the trace, its device, ranks and steps, each rank's counts and top kernels."""

from __future__ import annotations

from collections.abc import Sequence

from tracekit.report.names import short_name
from tracekit.terminal import visible
from tracekit.units import fmt_us, plural


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def render_text(info: dict, replays: Sequence[str] = ()) -> str:
    """The text of an info document (`info --json`'s object), then one line per rank's CUDA-graph replays."""
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
    if replays:
        lines += ["", *replays]
    return "\n".join(lines)
