"""Shared pieces of the rules: the analysed window, thresholds, number formatting, GEMM dimensions."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analyzers.analysis import Analysis, RankAnalysis
from tracekit.analyzers.costs.op_args import Shapes
from tracekit.analyzers.step_selection import STEADY_STEPS
from tracekit.suggestions.model import Suggestion
from tracekit.units import fmt_bytes, fmt_us  # noqa: F401  (re-exported for the rule modules)

# A rule stays silent below both of these (per rank, over the analysed window).
MIN_SAVING_PCT = 0.5  # percent of the span
# What a user sees: a change that saves less than this share of the step (the projected unprofiled
# step where the model projects, else the traced one) is not worth their time (issue 20). The checks
# use MIN_SAVING_PCT of the traced span, which the profiler inflates; suggest() applies this after.
SILENT_BELOW_PCT = 2.0
MIN_SAVING_US = 1.0


@dataclass(frozen=True)
class Scope:
    """The analysed window per rank: span (sum of the headline steps' spans) and number of steps."""

    span_us: float
    steps: float
    ranks: int
    mode: str = STEADY_STEPS.mode  # Analysis.steps_mode: steady, all or N-M

    @classmethod
    def of(cls, analysis: Analysis) -> Scope:
        n = max(len(analysis.ranks), 1)
        t = analysis.totals
        return cls(span_us=t.span_us / n, steps=max(t.steps / n, 1.0), ranks=n,
                   mode=analysis.steps_mode)

    def pct(self, saving_us: float) -> float:
        return 100.0 * saving_us / self.span_us if self.span_us > 0 else 0.0

    @property
    def basis(self) -> str:
        steps = round(self.steps)
        kind = {"steady": "steady ", "all": "profiled "}.get(self.mode, "")
        what = f"{steps} {kind}step{'s' if steps != 1 else ''}"
        if self.mode not in ("steady", "all"):
            what += f" ({self.mode})"
        per = f", per rank (mean of {self.ranks} ranks)" if self.ranks > 1 else ""
        return f"span of {what} ({fmt_us(self.span_us)}){per}"


def suggestion(rule_id: str, title: str, saving_us: float, scope: Scope, formula: str,
               evidence: Iterable[Mapping[str, Any]], *, min_pct: float = MIN_SAVING_PCT) -> Suggestion | None:
    """A Suggestion, or None when there is no evidence or the saving is below the thresholds. Its
    snippet is empty: the rule's row (tracekit.suggestions.rules.Rule.run) gives it the row's."""
    rows = tuple(evidence)
    if scope.ranks == 1:  # one rank: the rank column says nothing
        rows = tuple({k: v for k, v in row.items() if k != "rank"} for row in rows)
    if not rows or not (saving_us >= MIN_SAVING_US) or scope.pct(saving_us) < min_pct:
        return None
    if scope.span_us > 0 and saving_us > scope.span_us:  # a change cannot save more than the steps take
        formula += f"; capped at the steps' span ({fmt_us(scope.span_us)}): the estimate above counted time outside them"
        saving_us = scope.span_us
    return Suggestion(id=rule_id, title=title, saving_us=float(saving_us),
                      saving_pct=float(scope.pct(saving_us)), formula=formula,
                      snippet="", evidence=rows,
                      per_step_us=float(saving_us / scope.steps), basis=scope.basis)


def _is_dims(v: object) -> bool:
    return isinstance(v, tuple) and len(v) >= 1 and all(isinstance(x, int) for x in v)


def gemm_dims(op: str | None, shapes: Shapes | None) -> tuple[int, int, int] | None:
    """(M, N, K) of a GEMM kernel row from its launching op and shapes (M folds batch/leading dims
    for linear/matmul; bmm's batch is left out). None when the op is not a matrix product."""
    dims = [d for d in (shapes or ()) if _is_dims(d)]
    name = str(op or "").removeprefix("aten::")
    if name in ("addmm", "baddbmm", "addmv", "addbmm") and len(dims) >= 3:
        dims = dims[1:]
    elif name == "linear" and len(dims) >= 2:
        x, w = dims[0], dims[1]
        return (math.prod(x[:-1]), w[0], x[-1]) if len(w) == 2 else None
    elif name not in ("mm", "bmm", "matmul", "mv", "_scaled_mm") or len(dims) < 2:
        return None
    a, b = dims[0], dims[1]
    if len(b) == 1:  # matrix @ vector
        return (math.prod(a[:-1]), 1, a[-1]) if a[-1] == b[0] else None
    if a[-1] != b[-2]:
        return None
    m = a[-2] if len(a) >= 2 else 1
    if name == "matmul" and len(b) == 2:
        m = math.prod(a[:-1])
    return m, b[-1], a[-1]


def in_headline(r: RankAnalysis, steps: np.ndarray) -> np.ndarray:
    """Rows of a per-call table (by their step number) inside the rank's headline steps — the
    steady ones unless --steps said otherwise; a trace without steps is one pseudo-step -1."""
    return np.isin(np.asarray(steps), np.array(r.launch.steady_steps))


def rank_tables(analysis: Analysis, name: str) -> list[tuple[RankAnalysis, pd.DataFrame]]:
    """(rank analysis, its patterns.<name> table) for every rank (`name`: a Patterns table)."""
    return [(r, getattr(r.patterns, name)) for r in analysis.ranks]


def every_step_tables(analysis: Analysis, name: str, step: str) -> list[tuple[RankAnalysis, pd.DataFrame, int]]:
    """(rank analysis, the rows of its patterns.<name> table in the headline steps, how many steps they
    are in) for every rank where they are in every headline step (`step`: the table's step column)."""
    out: list[tuple[RankAnalysis, pd.DataFrame, int]] = []
    for r, table in rank_tables(analysis, name):
        if table is None or not len(table):
            continue
        t = table[in_headline(r, table[step].to_numpy())]
        n = int(t[step].nunique())
        if n and n >= len(r.launch.steady_steps):
            out.append((r, t, n))
    return out
