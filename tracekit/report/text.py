"""The analysis as terminal text (`tracekit analyze`), from the typed summary, suggestions and cross-rank view."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tracekit.analyzers.per_step import PER_STEP_FIELDS
from tracekit.analyzers.steady import excluded_lines
from tracekit.jsonsafe import plain
from tracekit.report.memory_view import memory_lines
from tracekit.report.meta import d2h_words, noisy_words
from tracekit.report.names import demangle, short_name
from tracekit.report.tables import fmt_shapes
from tracekit.terminal import visible
from tracekit.units import fmt_us, plural

if TYPE_CHECKING:
    from tracekit.analyzers.ranks import CrossRank
    from tracekit.analyzers.summary import AnalysisSummary
    from tracekit.suggestions.document import RankedSuggestion


def _integrity_line(summary: AnalysisSummary) -> str:
    """One line: what the trace can support (tracekit.analyzers.integrity)."""
    audit = summary.integrity
    return f"integrity {safe(audit.line if audit is not None else 'not audited', 600)}"


def safe(text: object, width: int | None = None) -> str:
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
    return "-" if x is None or (isinstance(x, float) and x != x) or x == "" else safe(x)


def render_text(summary: AnalysisSummary, suggestions: Sequence[RankedSuggestion] | None,
                cross: CrossRank | None = None, *, path: str | None = None, top: int = 15,
                max_steps: int = 10) -> str:
    """A compact, human-readable rendering of an analysis (one rank, or several added up); `path`
    names the input as the user gave it (default: the summary's)."""
    t = summary.totals
    head = summary.headline
    multi = len(summary.ranks) > 1
    device = summary.device.name if summary.device is not None else None
    verdict = head.verdict + (f" ({head.cause})" if head.cause else "")
    lines = [f"trace     {safe(summary.path if path is None else path)}", ranks_line(summary.ranks),
             f"device    {safe(device) if device else 'unknown (no roofline)'}",
             f"verdict   {safe(verdict)}", f"          {safe(head.evidence or '')}",
             *unprofiled_lines(summary), _integrity_line(summary), _steps_line(summary)]
    for line in excluded_lines(summary.excluded, multi=multi)[:max_steps]:
        lines.append(f"          {safe(line, 140)}")
    if cross is not None:
        lines += ["", *cross_rank_text(cross), ""]
    if t.verdict != "cpu-only":
        lines += _numbers(summary)
        lines += memory_lines([v.memory for v in summary.views if v.memory is not None], multi=multi,
                              verdict=summary.verdict)
        lines += _kernel_rows(summary, top)
    if suggestions:
        modelled = any(s.combined_us is not None for _, s in suggestions)
        lines += ["", "what to change (saving per step, what-if replay of the unprofiled step; 'with above': "
                      "this change and those above it together):" if modelled else
                  "what to change (estimated saving per step; savings overlap, they do not add up):"]
        steps = max(summary.headline.steps / max(len(summary.ranks), 1), 1.0)
        for rank, sug in suggestions[:top]:
            where = f"r{rank:<3d} " if multi and rank is not None else ""
            together = (f"  [with above {fmt_us(sug.combined_us / steps)}]"
                        if sug.combined_us is not None and sug.combined_us != sug.saving_us else "")
            lines.append(f"  {fmt_us(plain(sug.per_step_us)):>12s} {plain(sug.saving_pct):5.1f}%  {where}"
                         f"{safe(sug.id):18s} {safe(sug.title, 90)}{together}")
            if sug.where:
                lines.append(f"  {'':12s} {'':6s}  {'':18s} where: {safe(sug.where, 220)}")
    lines += _step_rows(summary, max_steps)
    return "\n".join(lines)


def ranks_line(ranks: Sequence[object]) -> str:
    """'ranks     1 (rank 0)', 'ranks     2 (0, 1)'."""
    numbers = [str(getattr(r, "rank", r)) for r in ranks]
    which = f"rank {numbers[0]}" if len(numbers) == 1 else ", ".join(numbers)
    return f"ranks     {len(numbers)} ({which})"


def unprofiled_lines(summary: AnalysisSummary) -> list[str]:
    """The model's line: the step as traced and as projected without the profiler, and where the
    correction came from; or why the model abstains."""
    u = summary.unprofiled
    if u is None or u.traced.gpu_ops == 0:
        return []
    lines = []
    if u.trusted:
        n = max(u.projected.steps, 1)
        measured = f"; measured unprofiled {fmt_us(u.measured_us)}{noisy_words(u, fmt_us)}" if u.measured_us is not None else ""
        lines.append(f"step      {fmt_us(u.traced_step_us)} as traced, {fmt_us(u.step_us)} projected without the profiler "
                     f"({fmt_us(u.low.span_us / n)}–{fmt_us(u.high.span_us / n)}){measured}"
                     + ("" if summary.headline.undetermined else f"; {safe(u.label)}"))  # no verdict beside undetermined
        lines.append(f"          profiler cost removed: {u.per_event_us:.1f} µs per recorded CPU event and the launch "
                     f"calls' excess, from {safe(u.source_words)}{d2h_words(u)}")
    for rank, why in u.abstained[:3]:
        who = f"rank {rank}: " if len(summary.ranks) > 1 else ""
        lines.append(f"          model abstains ({who}{safe(why, 160)}): numbers as traced")
    return lines


def _numbers(summary: AnalysisSummary) -> list[str]:
    """The traced step's numbers: per steady step when the trace has steps (the JSON's `per_step`),
    else over the whole trace; the class table's times are totals, and say so."""
    t = summary.totals
    per = summary.per_step_dict()
    unit = " per step" if per is not None else " in total"
    v = per if per is not None else {name: float(getattr(t, name)) for name in PER_STEP_FIELDS}
    per_token = summary.kernels_per_token
    q = summary.queue.stats
    cpu_late = v["launch_gap_us"] + v["data_wait_us"] + v["sync_wait_us"] + v["copy_wait_us"] + v["cpu_wait_us"]
    over = f"the {plural(t.steps, 'steady step')}" if per is not None else "the whole trace"
    return [
        f"GPU       busy {fmt_us(v['gpu_busy_us'])} of {fmt_us(v['span_us'])}{unit} "
        f"({_pct(t.gpu_util)}), idle {fmt_us(v['gpu_idle_us'])}{unit}",
        f"CPU       {_count(v['launches'])} {'launch' if v['launches'] == 1 else 'launches'}{unit}, "
        f"{fmt_us(v['cpu_launch_us'])} in launch calls{unit}; {_count(v['syncs'])} "
        f"{'sync' if v['syncs'] == 1 else 'syncs'}, {fmt_us(v['sync_us'])}{unit}",
        f"kernels   {_count(v['kernels'])}{unit} (median {_num(summary.kernels_per_step_median)}/step"
        + (f", {_num(per_token)}/token" if per_token is not None else "")
        + f"), {_count(v['short_kernels'])}{unit} shorter than their launch call",
        f"queue     delay p50 {fmt_us(q.p50_us)}, p90 {fmt_us(q.p90_us)}, max {fmt_us(q.max_us)} (per kernel)",
        f"idle      {fmt_us(v['gpu_idle_us'])}{unit} with no GPU activity on any stream: waiting for launches "
        f"{fmt_us(v['launch_gap_us'])}, for other CPU work {fmt_us(cpu_late - v['launch_gap_us'])}, "
        f"on the GPU itself {fmt_us(v['gpu_gap_us'])}",
        "", f"time by class (total over {over}):",
        *(f"  {safe(r.key):14s} {fmt_us(r.time_us):>12s} {100 * r.share:6.1f}% {r.count:8d}x"
          for r in summary.classes.rows),
    ]


def _count(x: float) -> str:
    """A count per step: an integer when whole, else one decimal."""
    return f"{x:.0f}" if float(x).is_integer() else f"{x:.1f}"


def _tflops(row: dict) -> str:
    """Achieved TFLOP/s; "~" before an estimate (costs.estimates: from the kernels' names and grids)."""
    text = _num(row['achieved_tflops'], '{:.2f}')
    return "~" + text if row.get("estimated") is True and text != _num(None, '{:.2f}') else text


def _kernel_rows(summary: AnalysisSummary, top: int) -> list[str]:
    kernels = summary.kernels
    over = f"the {plural(summary.totals.steps, 'steady step')}" if summary.scope != "trace" else "the whole trace"
    lines = ["", f"top kernel rows (grouped by name, op and shapes; of {len(kernels)} rows; totals over {over}):",
             f"  {'time':>12s} {'share':>6s} {'count':>7s} {'class':13s} {'library':10s} "
             f"{'TFLOP/s':>8s} {'GB/s':>8s} {'bound':7s} {'name':40s} {'op':22s} shapes"]
    total = sum(r.time_us for r in summary.classes.rows) or 1.0
    for r in kernels.head(top).to_dict("records"):
        row = {k: plain(v) for k, v in r.items()}
        lines.append(
            f"  {fmt_us(row['time_us']):>12s} {100 * row['time_us'] / total:5.1f}% {int(row['count']):7d} "
            f"{safe(row['class']):13s} {safe(row['library']):10s} {_tflops(row):>8s} "
            f"{_num(row['achieved_gbps'], '{:.0f}'):>8s} {_text(row['bound']):7s} "
            f"{safe(short_name(demangle(str(row['name']))), 40):40s} {safe(_text(row.get('op')), 22):22s} "
            f"{safe(fmt_shapes(row.get('shapes')), 48)}")
    return lines


def _step_rows(summary: AnalysisSummary, max_steps: int) -> list[str]:
    steps = summary.steps
    if not steps or steps[0].step < 0:
        return []
    multi = len(summary.ranks) > 1
    lines = ["", "steps:", f"  {'rank ' if multi else ''}{'step':>6s} {'phase':8s} {'span':>12s} "
             f"{'GPU busy':>12s} {'util':>6s} {'kernels':>7s} {'launches':>8s} {'CPU launch':>12s} verdict"]
    for st in steps[:max_steps]:
        t = st.totals
        util = t.gpu_busy_us / t.span_us if t.span_us > 0 else None
        who = f"{st.rank:4d} " if multi else ""
        cause = f" ({t.cause})" if t.cause else ""
        lines.append(f"  {who}{st.step:6d} {safe(st.phase):8s} {fmt_us(t.span_us):>12s} "
                     f"{fmt_us(t.gpu_busy_us):>12s} {_pct(util):>6s} {t.kernels:7d} "
                     f"{t.launches:8d} {fmt_us(t.cpu_launch_us):>12s} {safe(t.verdict)}{safe(cause)}")
    if len(steps) > max_steps:
        lines.append(f"  ... {len(steps) - max_steps} more (see --json)")
    return lines


def _steps_line(summary: AnalysisSummary) -> str:
    """Which steps the numbers above describe."""
    scopes = {r.scope for r in summary.ranks}
    total = summary.steps_total or len(summary.steps)
    used = len(summary.steady_steps)
    if scopes == {"trace"}:
        return "steps     none marked: first GPU launch to the end of the last GPU activity"
    how = "inferred from the repeating op sequence" if "inferred" in scopes else "ProfilerStep"
    mode = summary.steps_mode
    what = {"steady": "steady", "all": "all"}.get(mode, f"selected ({mode})")
    return f"steps     {used} {what} of {total} ({how}); the numbers below say per step or total"


def cross_rank_text(cross: CrossRank, max_steps: int = 10) -> list[str]:
    """The cross-rank lines: verdicts, stragglers, skew per step."""
    groups = "; ".join(f"{len(ranks)} {safe(verdict)} ({', '.join(map(str, ranks))})"
                       for verdict, ranks in cross.verdicts)
    lines = [f"ranks by verdict: {groups}"]
    if cross.stragglers:
        for s in cross.stragglers:
            lines.append(f"straggler {safe(s.evidence)}; the others wait "
                         f"{fmt_us(s.others_wait_us_per_step)} per step")
    else:
        counts = sorted(cross.late_steps, key=lambda x: -x[1])
        top = f" (most often last: rank {counts[0][0]}, in {counts[0][1]} of {len(cross.skew)} steps)" \
            if counts and counts[0][1] else ""
        lines.append(f"straggler none: no rank arrives last at the collectives in most steps more often than "
                     f"chance would{top}")
    if cross.skew:
        lines += ["skew per step:", f"  {'step':>6s} {'span min':>10s} {'median':>10s} {'max':>10s} "
                  f"{'slowest':>7s} {'colls':>5s} {'start spread':>12s} {'late':>4s} {'waiting':>10s}"]
        for k in cross.skew[:max_steps]:
            late = "-" if k.late_rank is None else str(k.late_rank)
            spread = fmt_us(k.start_spread_max_us) if k.start_spread_max_us is not None else "-"
            lines.append(f"  {k.step:6d} {fmt_us(k.span_min_us):>10s} {fmt_us(k.span_median_us):>10s} "
                         f"{fmt_us(k.span_max_us):>10s} {k.slowest_rank:7d} {k.collectives:5d} "
                         f"{spread:>12s} {late:>4s} {fmt_us(k.wait_us):>10s}")
        if len(cross.skew) > max_steps:
            lines.append(f"  ... {len(cross.skew) - max_steps} more (see --json)")
    return lines
