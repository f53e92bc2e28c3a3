"""`tracekit diff` as text (the unprofiled step first, tables per steady step, BEFORE's suggestions checked) and the CI gate's reason."""

from __future__ import annotations

from collections.abc import Callable

from tracekit.compare.diff import (
    AFTER,
    BEFORE,
    DELTA,
    MEASURED,
    PROJECTED,
    TRACED,
    Change,
    TraceDiff,
    direction,
)
from tracekit.report.names import MAX_TITLE, short_name
from tracekit.report.text import safe
from tracekit.units import fmt_us

_LABELS = {
    "span_us": "step span", "gpu_busy_us": "GPU busy", "gpu_idle_us": "GPU idle", "kernels": "kernels",
    "launches": "launches", "cpu_launch_us": "CPU launch time", "syncs": "syncs", "sync_us": "sync time",
    "host_wait_us": "host-wait gaps",
}
_COUNTS = {"kernels", "launches", "syncs"}
APPLIED_WORDS = {True: "applied", False: "not seen", None: "cannot tell"}


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


def _step(c: Change | None, arrow: str, fmt: Callable[[float], str], dash: str) -> str:
    if c is None or c.before is None or c.after is None:
        return dash
    return f"{fmt(c.before)} {arrow} {fmt(c.after)}"


def headline_lines(d: TraceDiff, arrow: str = "->", fmt: Callable[[float], str] = fmt_us,
                   dash: str = "-") -> list[str]:
    """The step the diff judges, with its kind, direction and change, the other two steps beside it
    ('step 57.0 ms -> 22.2 ms projected unprofiled (-61.1%, faster); as traced 71.3 ms -> 32.3 ms;
    measured unprofiled -: not in both traces'), then the disagreement line when the traced step moved
    the other way."""
    head, kind = d.headline, d.headline_kind
    way = direction(head)
    pct = "" if head.pct is None else f"{head.pct:+.1f}%, "
    lines = [f"step {_step(head, arrow, fmt, dash)} {kind}" + (f" ({pct}{way})" if way else "")]
    others = {TRACED: d.step, PROJECTED: d.projected, MEASURED: d.measured}
    missing = {PROJECTED: f"{dash}: the model abstains on a side", MEASURED: f"{dash}: not in both traces"}
    for name, c in others.items():
        if name == kind:
            continue
        lines[0] += f"; {name} " + (_step(c, arrow, fmt, dash) if c is not None else missing[name])
    if d.disagreement:
        lines.append(d.disagreement)
    return lines


def split_names(text: str) -> list[str]:
    """The kernel names of a ", "-joined list (commas inside <...> or (...) belong to a name)."""
    names, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth = max(depth - 1, 0)
        elif ch == "," and depth == 0 and text.startswith(", ", i):
            names.append(text[start:i])
            start = i + 2
    if text[start:]:
        names.append(text[start:])
    return names


def collapsed(text: str) -> tuple[str, str]:
    """(the first kernel's short name and how many more, the full list for the hover) of a kernel list."""
    names = split_names(text)
    if not names:
        return "-", ""
    shown = short_name(names[0]) + (f" +{len(names) - 1} more" if len(names) > 1 else "")
    full = "\n".join(names)
    return shown, full if len(full) <= MAX_TITLE * 4 else full[: MAX_TITLE * 4 - 1] + "…"


def render_text(d: TraceDiff, top: int = 10) -> str:
    """The diff as text: step metrics, classes, idle, ops that moved, new/vanished kernels, suggestions."""
    lines = [f"before  {safe(d.before_path)}  ({d.before_steps} steps, {d.verdict[0]}"
             + (f", {d.cause[0]}" if d.cause[0] else "") + ")",
             f"after   {safe(d.after_path)}  ({d.after_steps} steps, {d.verdict[1]}"
             + (f", {d.cause[1]}" if d.cause[1] else "") + ")", "", *headline_lines(d), "",
             f"{'per step, traced':18s} {'before':>10s} {'after':>10s} {'change':>10s}"]
    for m in d.metrics:
        lines.append(f"{_LABELS.get(m.name, m.name):18s} {_value(m.name, m.before):>10s} "
                     f"{_value(m.name, m.after):>10s} {_change(m)}")
    lines.append(f"{'verdict':18s} {d.verdict[0]} -> {d.verdict[1]}")
    share = d.attributed_share
    if share is not None:
        lines.append(f"named parts account for {100 * share:.0f}% of the traced step change "
                     "(classes and GPU idle by cause)")
    lines += ["", f"{'time by class':18s} {'before':>10s} {'after':>10s} {'change':>10s}"]
    for r in d.classes.head(top).to_dict("records"):
        lines.append(f"  {safe(r['class']):16s} {fmt_us(r[BEFORE]):>10s} {fmt_us(r[AFTER]):>10s} "
                     f"{_signed(r[DELTA]):>10s}")
    lines += ["", f"{'GPU idle':18s} {'before':>10s} {'after':>10s} {'change':>10s}"]
    for r in d.idle.to_dict("records"):
        lines.append(f"  {r['part']:16s} {fmt_us(r[BEFORE]):>10s} {fmt_us(r[AFTER]):>10s} {_signed(r[DELTA]):>10s}")
    lines += ["", "ops that moved most (matched by launching op and input shapes):"]
    for r in d.moved.head(top).to_dict("records"):
        kb, ka = collapsed(str(r["kernels_before"]))[0], collapsed(str(r["kernels_after"]))[0]
        kernels = kb if kb == ka else f"{kb} => {ka}"
        lines.append(f"  {_signed(r[DELTA]):>10s} {fmt_us(r[BEFORE]):>10s} -> {fmt_us(r[AFTER]):>10s} "
                     f"{r['match']:9s} {safe(r['op'], 32)} {safe(r['shapes'], 40)}  [{safe(kernels, 90)}]")
    for label, status in (("new kernels", "new"), ("vanished kernels", "vanished")):
        rows = d.kernels[d.kernels["match"] == status]
        if len(rows):
            lines += ["", f"{label} ({len(rows)}):"]
            for r in rows.head(5).to_dict("records"):
                t = r[AFTER] if status == "new" else r[BEFORE]
                lines.append(f"  {fmt_us(t):>10s}  {safe(r['class']):13s} {safe(short_name(str(r['name'])), 90)}")
    if d.suggestions:
        lines += ["", f"suggestions on BEFORE: credited only where AFTER shows the change; predicted saving per "
                      f"step vs the saving of the step ({d.headline_kind}; saved time is positive)"]
        for s in d.suggestions:
            pred = "-" if s.predicted_us_per_step is None else fmt_us(s.predicted_us_per_step)
            real = "-" if s.realised_us_per_step is None else fmt_us(s.realised_us_per_step)
            verdict = s.outcome or "-"
            part = "" if s.before_part_us is None or s.after_part_us is None else \
                f"  ({s.target}: {fmt_us(s.before_part_us)} -> {fmt_us(s.after_part_us)})"
            lines.append(f"  {s.id:18s} predicted saving {pred:>10s}  saved {real:>10s}  {verdict}")
            lines.append(f"  {'':18s} {APPLIED_WORDS[s.applied]}: {safe(s.applied_evidence)}{part}")
    for w in d.warnings:
        lines.append(f"note: {w}")
    return "\n".join(lines)


def slower_message(d: TraceDiff, pct: float) -> str | None:
    """Why the CI gate fails (None when the headline step did not get slower by more than pct %)."""
    step = d.headline
    if step.pct is None or step.pct <= pct:
        return None
    grew = d.grew_most()
    which = ""
    if grew is not None:
        row = d.classes[d.classes["class"] == grew].iloc[0]
        which = f"; {grew} grew most ({_signed(float(row[DELTA]))} per step)"
    return (f"the steady step ({d.headline_kind}) got {step.pct:.1f}% slower ({fmt_us(step.before or 0)} -> "
            f"{fmt_us(step.after or 0)}), more than {pct:g}%{which}")
