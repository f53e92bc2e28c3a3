"""`tracekit info` as text: the trace, its device, ranks and steps, each rank's counts and top kernels."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.report.names import short_name
from tracekit.report.text import ranks_line
from tracekit.terminal import visible
from tracekit.units import fmt_us, plural

if TYPE_CHECKING:
    from tracekit.analyzers.trace_counts import TraceCounts


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def render_text(counts: TraceCounts) -> str:
    """`tracekit info` as text: the trace, then each rank's counts, then one line per rank's CUDA-graph replays."""
    lines = [f"trace     {visible(counts.path)}",
             f"device    {visible(counts.device_name or 'not named in the trace')} ({counts.ranks[0].platform})",
             ranks_line(counts.ranks),
             f"steps     {counts.steps or 'none marked (whole trace = one step)'}"]
    if counts.cpu_only:
        lines.append("GPU       none: CPU-only trace (no kernels, memcpy or memset)")
    for r in counts.ranks:
        head = f"rank {r.rank}" if len(counts.ranks) > 1 else "counts"
        busy = 100 * r.gpu_busy_us / r.span_us if r.span_us else 0.0
        lines += ["", f"{head}: {r.events:,} events, {r.cpu_ops:,} CPU ops, {plural(r.launches, 'launch', 'launches')}",
                  f"  GPU     {plural(r.kernels, 'kernel')}, {r.memcpy:,} memcpy, {r.memset:,} memset",
                  f"  linked  {_pct(r.kernels_linked_to_launch, r.kernels)} of kernels to a launch,"
                  f" {_pct(r.kernels_linked_to_op, r.kernels)} to an op",
                  f"  time    GPU busy {fmt_us(round(r.gpu_busy_us, 3))} of {fmt_us(round(r.span_us, 3))} recorded, "
                  f"first to last event ({busy:.1f}%; `analyze` and the report measure the profiled steps)"]
        top = list(r.top_kernels.itertuples())
        if top:
            lines.append("  top kernels by name (all calls of a name together; `analyze` also splits by op and shapes):")
            shorts = [short_name(str(k.name)) for k in top]
            for k, short in zip(top, shorts, strict=True):
                name = short if shorts.count(short) == 1 else str(k.name)  # same short name: tell them apart
                name = visible(name if len(name) <= 70 else name[:67] + "...")
                lines.append(f"    {100 * round(float(k.share), 4):5.1f}%  {fmt_us(round(float(k.time_us), 3)):>9s}  "
                             f"{int(k.count):6,d}x  {name}")
    if counts.graphs:
        lines += ["", *(g.line() for g in counts.graphs)]
    return "\n".join(lines)
