"""The operator view (time by op, module or source line) for the terminal and the report."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tracekit.analyzers.operators import BY_LINE, BY_MODULE, BY_OP, OperatorView
from tracekit.analyzers.rank_views import RankViews
from tracekit.terminal import visible
from tracekit.units import DASH, fmt_int, fmt_pct, fmt_si, fmt_time, plural

TITLES = {BY_OP: "op", BY_MODULE: "module", BY_LINE: "source line"}
MAX_REPORT_ROWS = 60


def _flops(x: float | None, estimated: bool = False) -> str:
    """FLOPs; "~" before a total that holds estimates (costs.estimates)."""
    return DASH if x is None else ("~" if estimated else "") + fmt_si(x)


def operator_lines(views: Sequence[RankViews], by: str, top: int = 25,
                   steps: Mapping[int, int] | None = None) -> list[str]:
    """`tracekit analyze --by BY`: one table per rank, totals over its headline steps (`steps`: per rank)."""
    lines: list[str] = []
    for v in views:
        n = (steps or {}).get(v.rank, 0)
        over = f"totals over the {plural(n, 'headline step')}" if n else "totals"
        g = v.grouping(by)
        head = f"time by {TITLES[by]}" + (f" (rank {v.rank})" if len(views) > 1 else "")
        if g is None or not g.rows:
            lines += ["", f"{head}: none: {g.missing if g is not None else 'not computed'}"]
            continue
        lines += ["", f"{head} ({over}; GPU time of the kernels launched inside it, "
                      f"{fmt_pct(g.attributed_share)} of GPU time placed):",
                  f"  {'GPU time':>10s} {'CPU total':>10s} {'CPU self':>10s} {'calls':>7s} {'launches':>8s} "
                  f"{'FLOPs':>8s}  {TITLES[by]}"]
        for r in g.rows[:top]:
            lines.append(f"  {fmt_time(r.gpu_us):>10s} {fmt_time(r.cpu_total_us):>10s} {fmt_time(r.cpu_self_us):>10s} "
                         f"{r.calls:7d} {r.launches:8d} {_flops(r.flops, r.estimated):>8s}  {visible(r.key[:100])}")
        if len(g.rows) > top:
            lines.append(f"  ... {len(g.rows) - top} more (--top, or --json)")
    return lines


@dataclass(frozen=True)
class OperatorCard:
    """One grouping as the report's sortable table: cells (text, sort value) per row."""

    by: str
    title: str
    rows: tuple[tuple[tuple[str, float | str], ...], ...]  # gpu, cpu total, cpu self, calls, launches, flops, key
    note: str


def operator_cards(views: Sequence[OperatorView]) -> tuple[OperatorCard, ...]:
    """The report's operator cards: each grouping the trace has rows for."""
    cards = []
    for g in views:
        if not g.rows:
            continue
        rows = tuple(((fmt_time(r.gpu_us), r.gpu_us), (fmt_time(r.cpu_total_us), r.cpu_total_us),
                      (fmt_time(r.cpu_self_us), r.cpu_self_us), (fmt_int(r.calls), float(r.calls)),
                      (fmt_int(r.launches), float(r.launches)), (_flops(r.flops, r.estimated), r.flops if r.flops is not None else -1.0),
                      (r.key, r.key.lower()))
                     for r in g.rows[:MAX_REPORT_ROWS])
        more = f" Showing {MAX_REPORT_ROWS} of {len(g.rows)}." if len(g.rows) > MAX_REPORT_ROWS else ""
        cards.append(OperatorCard(g.by, TITLES[g.by], rows,
                                  f"{fmt_pct(g.attributed_share)} of the GPU time launched inside a {TITLES[g.by]}.{more}"))
    return tuple(cards)
