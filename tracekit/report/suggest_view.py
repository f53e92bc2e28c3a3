"""View of suggestions for the report: cards with title, saving, formula, evidence table and snippet."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tracekit.analyzers.launch import LaunchTotals
from tracekit.report.names import hover_name, short_name
from tracekit.suggestions.model import EvidenceValue, Suggestion
from tracekit.suggestions.whatif import NO_REPLAY
from tracekit.units import (
    DASH,
    fmt_bytes,
    fmt_flops,
    fmt_int,
    fmt_pct,
    fmt_ratio,
    fmt_time,
    num,
)

MAX_EVIDENCE_ROWS = 8
MAX_CELL = 48  # characters of a text cell before it is clipped (the full text is the hover title)
NAME_KEYS = ("kernel", "name")  # evidence columns holding a kernel name: shortened, full name on hover
LAUNCH_RULES = frozenset({"cuda_graphs", "batch_bmm"})  # savings that come from removing CPU launch time
# What one kernel launch call costs without a profiler attached: 2-4 µs for cudaLaunchKernel on
# current NVIDIA drivers (docs/design.md, "Launch cost under the profiler"); we take the middle.
UNPROFILED_LAUNCH_US = 3.0


@dataclass(frozen=True)
class EvidenceCell:
    text: str
    title: str = ""


@dataclass(frozen=True)
class SuggestionView:
    rank: int
    id: str
    title: str
    saving: str  # '1.23 ms'
    saving_pct: str  # '41.0%'
    saving_w: float  # 0..100 bar width relative to the largest saving
    formula: str
    snippet: str
    per_step: str  # '1.52 ms per step', or ''
    basis: str  # what saving_pct is a percent of, in words
    columns: tuple[str, ...]
    numeric: tuple[bool, ...]  # right-align these evidence columns
    rows: tuple[tuple[EvidenceCell, ...], ...]
    more_rows: int
    note: str = ""  # how far to trust the estimate (profiler overhead on launch-bound savings)
    whatif: str = ""  # how the saving was obtained (the execution model's what-if replay), with the rule's traced estimate
    combined: str = ""  # the saving of this change together with those ranked above it, per step
    saving_per_step_us: float | None = None  # the numbers behind `saving` and `combined` (overlap_note adds them)
    combined_per_step_us: float | None = None
    where: str = ""  # the source line or module that launched most of the evidence's kernels


def fmt_value(key: str, value: EvidenceValue) -> str:
    """A value formatted by what its key says it is: *_us times, *bytes, *flops, *pct, *share."""
    if value is None:
        return DASH
    k = key.lower()
    v = num(value)
    if v is not None and not isinstance(value, str):
        if k.endswith("_us") or k in ("time", "dur", "duration"):
            return fmt_time(v)
        if k.endswith("bytes"):
            return fmt_bytes(v)
        if k.endswith("flops"):
            return fmt_flops(v)
        if k.endswith(("pct", "percent")):
            return fmt_pct(v, fraction=False)
        if k.endswith(("share", "frac", "fraction")):
            return fmt_pct(v)
        if float(v).is_integer():
            return fmt_int(v)
        return fmt_ratio(v)
    if isinstance(value, (list, tuple)):
        return ", ".join(str(x) for x in value)
    return str(value)


def _label(key: str) -> str:
    k = key[:-3] if key.endswith("_us") else key
    return k.replace("_", " ")


def _cell(key: str, value: EvidenceValue) -> EvidenceCell:
    if key in NAME_KEYS and isinstance(value, str):
        short = short_name(value)
        return EvidenceCell(short, hover_name(value) if short != value else "")
    text = fmt_value(key, value)
    if len(text) > MAX_CELL:
        return EvidenceCell(text[: MAX_CELL - 1] + "…", text)
    return EvidenceCell(text, text if isinstance(value, str) and len(text) > 12 else "")  # may be clipped


def evidence_table(
    evidence: Sequence[Mapping[str, Any]],
) -> tuple[tuple[str, ...], tuple[bool, ...], tuple[tuple[EvidenceCell, ...], ...], int]:
    """(column labels, numeric flags, rows, rows left off): the name first, then numbers, then other text."""
    if not evidence:
        return (), (), (), 0
    shown = list(evidence[:MAX_EVIDENCE_ROWS])
    more = len(evidence) - len(shown)
    keys: list[str] = []
    for r in shown:
        keys.extend(k for k in r if k not in keys)
    numeric = {k: all(r.get(k) is None or (num(r.get(k)) is not None and not isinstance(r.get(k), str))
                      for r in shown) for k in keys}
    first = [k for k in keys if k in NAME_KEYS][:1] or [k for k in keys if not numeric[k]][:1]
    ordered = first + [k for k in keys if numeric[k] and k not in first] + [
        k for k in keys if not numeric[k] and k not in first]
    rows = tuple(tuple(_cell(k, r.get(k)) for k in ordered) for r in shown)
    return tuple(_label(k) for k in ordered), tuple(numeric[k] for k in ordered), rows, more


def profiler_note(totals: LaunchTotals) -> str:
    """How much the profiler slows the CPU side, from this trace's launch calls, for launch-bound savings."""
    if not totals.launches:
        return "The profiler slows the CPU side of a run; this trace has no launch calls to measure by how much."
    each = totals.cpu_launch_us / totals.launches
    ratio = each / UNPROFILED_LAUNCH_US
    if ratio <= 1.2:
        return (f"Measured on the profiled run: launch calls took {fmt_time(each)} each here, close to the "
                f"~{fmt_time(UNPROFILED_LAUNCH_US)} they cost without a profiler, so the estimate should hold.")
    return (f"Measured on the profiled run, which slows the CPU side: launch calls took {fmt_time(each)} each "
            f"here against ~{fmt_time(UNPROFILED_LAUNCH_US)} without a profiler ({ratio:.1f}× slower), so an "
            "unprofiled run saves less than this.")


def _steps_of(s: Suggestion) -> float:
    """The steps its per-step saving is over (saving_us / per_step_us; 1 when it has none)."""
    return s.saving_us / s.per_step_us if s.per_step_us else 1.0


def whatif_line(s: Suggestion, steps: float) -> str:
    """Where the card's saving comes from, when the execution model priced it: the what-if replay on
    the projected unprofiled step and, when it reads differently, the rule's estimate on the traced
    timeline; or that the change was not replayed."""
    if s.traced_saving_us is None:
        return ""
    traced = fmt_time(s.traced_saving_us / steps)
    if s.whatif == NO_REPLAY:
        return (f"The rule's estimate on the traced timeline ({traced} per step), at most the projected unprofiled "
                "step: the model does not replay this change.")
    replayed = fmt_time(s.saving_us / steps)
    line = f"What-if replay on the unprofiled step: {replayed} per step"
    if traced != replayed:
        return f"{line}; on the traced timeline the rule estimated {traced}."
    return f"{line}, as the rule estimated on the traced timeline."


def suggestion_views(suggestions: Sequence[Suggestion] | None, totals: LaunchTotals | None = None,
                     steps: float | None = None) -> list[SuggestionView]:
    """Cards for the suggestions, ranked by estimated saving (largest first); [] for none. `steps`:
    the steady steps per rank the savings are over (the what-if and combined lines per step;
    default: each suggestion's saving_us / per_step_us)."""
    items = sorted(suggestions or (), key=lambda s: -s.saving_us)
    top = max((s.saving_us for s in items), default=0.0) or 1.0
    note = profiler_note(totals) if totals is not None else ""
    out = []
    for i, s in enumerate(items, 1):
        cols, numeric, rows, more = evidence_table(s.evidence)
        n = steps if steps else _steps_of(s)
        together = s.combined_us / n if s.combined_us is not None else None
        combined = (f"With the change{'s' if i > 2 else ''} above: {fmt_time(together)} per step (replayed together)."
                    if together is not None and i > 1 and s.combined_us != s.saving_us else "")
        out.append(
            SuggestionView(
                rank=i,
                id=s.id,
                title=s.title,
                saving=f"{fmt_time(s.per_step_us)} per step" if s.per_step_us is not None else fmt_time(s.saving_us),
                saving_pct=fmt_pct(s.saving_pct, fraction=False),
                saving_w=round(100 * s.saving_us / top, 2),
                formula=s.formula,
                per_step=f"{fmt_time(s.per_step_us)} per step" if s.per_step_us is not None else "",
                basis=s.basis,
                snippet=s.snippet.strip("\n"),
                columns=cols,
                numeric=numeric,
                rows=rows,
                more_rows=more,
                note=note if s.id in LAUNCH_RULES and (s.traced_saving_us is None or s.whatif == NO_REPLAY) else "",
                whatif=whatif_line(s, n),
                combined=combined,
                saving_per_step_us=s.saving_us / n,
                combined_per_step_us=together,
                where=s.where,
            )
        )
    return out


def overlap_note(views: Sequence[SuggestionView]) -> str:
    """Said above the cards when there are several: savings are each estimated alone and overlap."""
    if len(views) < 2:
        return ""
    together = [v for v in views if v.combined_per_step_us is not None]
    if len(together) >= 2:
        last = together[-1]
        alone = sum(v.saving_per_step_us or 0.0 for v in together)
        ranks = [str(v.rank) for v in together]
        which = f"{', '.join(ranks[:-1])} and {ranks[-1]}"
        return (f"Each saving is a what-if replay of that change alone on the projected unprofiled steps. They "
                f"overlap: replayed together, changes {which} save {fmt_time(last.combined_per_step_us)} per step, "
                f"not the {fmt_time(alone)} their savings add up to.")
    return ("Each saving is estimated as if only that change were made. They overlap (removing launch gaps and "
            "fusing kernels can save the same idle time), so do not add them up.")
