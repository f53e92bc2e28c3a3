"""View of suggestions for the report: cards with title, saving, formula, evidence table and snippet."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tracekit.report.format import (
    fmt_bytes,
    fmt_flops,
    fmt_int,
    fmt_pct,
    fmt_ratio,
    fmt_time,
    is_num,
    num,
)

MAX_EVIDENCE_ROWS = 8


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
    rows: tuple[tuple[str, ...], ...]
    more_rows: int


def _field(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _as_dict(obj: Any) -> Any:
    to_dict = getattr(obj, "to_dict", None)
    return to_dict() if callable(to_dict) else obj


def fmt_value(key: str, value: Any) -> str:
    """A value formatted by what its key says it is: *_us times, *bytes, *flops, *pct, *share."""
    if value is None:
        return "–"
    k = key.lower()
    if is_num(value) or (num(value) is not None and not isinstance(value, str)):
        v = float(value)
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


def evidence_table(
    evidence: Any,
) -> tuple[tuple[str, ...], tuple[bool, ...], tuple[tuple[str, ...], ...], int]:
    """(column labels, numeric flags, formatted rows, rows left off) from dicts, tuples or a DataFrame."""
    records = getattr(evidence, "to_dict", None)
    if records is not None and hasattr(evidence, "columns"):  # a DataFrame
        evidence = evidence.to_dict("records")
    evidence = list(evidence or ())
    if not evidence:
        return (), (), (), 0
    shown = evidence[:MAX_EVIDENCE_ROWS]
    more = len(evidence) - len(shown)
    shown = [_as_dict(r) for r in shown]
    if all(isinstance(r, Mapping) for r in shown):
        keys: list[str] = []
        for r in shown:
            keys.extend(k for k in r if k not in keys)
        rows = tuple(tuple(fmt_value(k, r.get(k)) for k in keys) for r in shown)
        numeric = tuple(all(r.get(k) is None or num(r.get(k)) is not None for r in shown) for k in keys)
        return tuple(_label(k) for k in keys), numeric, rows, more
    rows = tuple(
        tuple(fmt_value("", x) for x in r) if isinstance(r, (list, tuple)) else (str(r),) for r in shown
    )
    return (), (), rows, more


def _pct_text(pct: float | None) -> str:
    """saving_pct is a percent of the step (0..100)."""
    return fmt_pct(pct, fraction=False)


def suggestion_views(suggestions: Sequence[Any] | None) -> list[SuggestionView]:
    """Cards for the suggestions, ranked by estimated saving (largest first); [] for none."""
    items = [_as_dict(s) for s in (suggestions or ())]
    items.sort(key=lambda s: -(num(_field(s, "saving_us")) or 0.0))
    top = max((num(_field(s, "saving_us")) or 0.0 for s in items), default=0.0) or 1.0
    out = []
    for i, s in enumerate(items, 1):
        saving = num(_field(s, "saving_us"))
        per_step = num(_field(s, "per_step_us"))
        cols, numeric, rows, more = evidence_table(_field(s, "evidence"))
        out.append(
            SuggestionView(
                rank=i,
                id=str(_field(s, "id", "")),
                title=str(_field(s, "title", "")),
                saving=f"{fmt_time(per_step)} per step" if per_step is not None else fmt_time(saving),
                saving_pct=_pct_text(num(_field(s, "saving_pct"))),
                saving_w=round(100 * (saving or 0.0) / top, 2),
                formula=str(_field(s, "formula", "") or ""),
                per_step=f"{fmt_time(per_step)} per step" if per_step is not None else "",
                basis=str(_field(s, "basis", "") or ""),
                snippet=str(_field(s, "snippet", "") or "").strip("\n"),
                columns=cols,
                numeric=numeric,
                rows=rows,
                more_rows=more,
            )
        )
    return out
