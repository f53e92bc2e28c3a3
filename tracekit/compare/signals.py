"""Signals a change leaves in a trace: how each is measured on an Analysis (per steady step, summed over ranks), how it must move, and how its values are written."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analyzers import kernels, step_parts
from tracekit.analyzers.analysis import Analysis
from tracekit.analyzers.detectors import (
    accumulation,
    compiled,
    hostside,
    optimizer,
    triton_launch,
)
from tracekit.analyzers.kernels import SUM_COUNT, SUM_KEY, SUM_TIME
from tracekit.units import fmt_us

Value = float | str | None
Measure = Callable[[Analysis], Value]

# How a signal's value must move between BEFORE and AFTER for the change to count as made.
FALLS = "falls"  # after <= (1 - amount) x before, before > 0
GROWS = "grows"  # after > 0 and after >= amount x before (appears when before is 0)
BECOMES = "becomes"  # after == target != before (a kind, a precision)
CHANGES = "changes"  # after != before, both known

# How its values are written.
COUNT, TIME, SHARE, WORD = "count", "time", "share", "word"


@dataclass(frozen=True)
class Signal:
    """One thing the trace shows about a change: what it is in words, how it is measured on an
    Analysis (None: the trace cannot tell), how it must move, and how its values are written."""

    what: str
    measure: Measure
    test: str
    amount: float = 0.0
    target: str = ""
    unit: str = COUNT
    # signals that must fire too for this one to count (a fall of eager kernels is torch.compile's only
    # where generated kernels appear: a foreach rewrite or a batched loop cuts eager kernels as well)
    requires: tuple[Signal, ...] = ()

    def fired(self, before: Value, after: Value) -> bool | None:
        """Whether before → after is the move `test` names (None: a value is unknown)."""
        if before is None or after is None:
            return None
        if self.test in (BECOMES, CHANGES):
            return before != after and (self.test == CHANGES or after == self.target)
        b, a = float(before), float(after)
        if self.test == FALLS:
            return b > 0 and a <= (1.0 - self.amount) * b
        return a > 0 and a >= self.amount * b

    def expected(self) -> str:
        if self.test == FALLS:
            if self.amount >= 1:
                return "to vanish"
            return "a fall to ¼ or less" if self.amount == 0.75 else f"a fall of ≥ {100 * self.amount:.0f} %"
        if self.test == GROWS:
            return "to appear" if self.amount <= 1 else f"to appear or grow ≥ {self.amount:g}×"
        return f"to become {self.target}" if self.test == BECOMES else "to change"

    def words(self, before: Value, after: Value) -> str:
        return f"{self.what} {fmt_value(before, self.unit)} → {fmt_value(after, self.unit)}"


@dataclass(frozen=True)
class Applied:
    """Whether the change was made (None: tracekit has no check for it, or the traces cannot tell) and
    one short sentence with the numbers that say so ('host syncs per steady step 1.0 → 0.0')."""

    applied: bool | None
    evidence: str


def fmt_value(v: Value, unit: str) -> str:
    if v is None:
        return "unknown"
    if isinstance(v, str):
        return v
    if unit == TIME:
        return fmt_us(v)
    return f"{100 * v:.0f} %" if unit == SHARE else f"{v:.1f}"


# --- measures: per steady step (the analysis's own selection), summed over its ranks --------------

def steps_of(a: Analysis) -> int:
    return max(int(a.totals.steps), 1)


def totals_field(name: str) -> Measure:
    return lambda a: float(getattr(a.totals, name)) / steps_of(a)


def class_count(*classes: str) -> Measure:
    def measure(a: Analysis) -> float:
        c = a.classes
        return float(c.loc[c[SUM_KEY].isin(classes), SUM_COUNT].sum()) / steps_of(a)
    return measure


def library_count(*libraries: str) -> Measure:
    def measure(a: Analysis) -> float:
        c = a.libraries
        return float(c.loc[c[SUM_KEY].isin(libraries), SUM_COUNT].sum()) / steps_of(a)
    return measure


def class_time(*classes: str) -> Measure:
    def measure(a: Analysis) -> float:
        c = a.classes
        return float(c.loc[c[SUM_KEY].isin(classes), SUM_TIME].sum()) / steps_of(a)
    return measure


def pattern_sum(table: str, column: str) -> Measure:
    """A column of a pattern table (they cover the selected steps only), per step."""
    def measure(a: Analysis) -> float:
        total = 0.0
        for r in a.ranks:
            t = getattr(r.patterns, table, None) if r.patterns is not None else None
            if t is not None and len(t):
                total += float(np.nansum(t[column].to_numpy(dtype=float)))
        return total / steps_of(a)
    return measure


def in_steps(a: Analysis, rank: int, table: pd.DataFrame, column: str) -> pd.DataFrame:
    """The rows of a per-step table that fall in the rank's selected steps."""
    r = next(x for x in a.ranks if x.rank == rank)
    return table[table[column].isin([int(s) for s in r.launch.steady_steps])]


def single_process_loads(a: Analysis) -> float:
    """Selected steps that load data with a single-process DataLoader (num_workers=0), per step."""
    n = 0
    for r in a.ranks:
        t = r.patterns.dataloader if r.patterns is not None else None
        if t is not None and len(t):
            n += int(in_steps(a, r.rank, t, hostside.DL_STEP)[hostside.DL_SINGLE].astype(bool).sum())
    return n / steps_of(a)


def steps_sum(table: str, step: str, column: str | None = None) -> Measure:
    """Rows (or a column's sum) of a per-step pattern table in the selected steps, per step."""
    def measure(a: Analysis) -> float:
        n = 0.0
        for r in a.ranks:
            t = getattr(r.patterns, table, None) if r.patterns is not None else None
            if t is not None and len(t):
                rows = in_steps(a, r.rank, t, step)
                n += len(rows) if column is None else float(rows[column].sum())
        return n / steps_of(a)
    return measure


# torch.compile graph breaks (detectors/compiled.py) in the selected steps, per step
graph_breaks_per_step = steps_sum("graph_breaks", compiled.GB_STEP)


def micro_batches_per_step(a: Analysis) -> float | None:
    """Forward+backward passes per optimizer step (patterns.accumulation, the mean over the selected steps
    that accumulate; 1 in a training trace without accumulation; None outside training)."""
    rows = [in_steps(a, r.rank, r.patterns.accumulation, accumulation.AC_STEP) for r in a.ranks
            if r.patterns is not None and len(r.patterns.accumulation)]
    rows = [t for t in rows if len(t)]
    if rows:
        return float(np.mean(np.concatenate([t[accumulation.AC_MICRO_BATCHES].to_numpy(dtype=float) for t in rows])))
    return 1.0 if any(r.patterns is not None and r.patterns.training for r in a.ranks) else None


def graph_share(a: Analysis) -> float:
    """Share of the GPU activities (every step of every rank) replayed from CUDA/HIP graphs."""
    replayed = total = 0
    for r in a.ranks:
        total += len(r.classification.table)
        replayed += r.graphs.activities if r.graphs is not None else 0
    return replayed / total if total else 0.0


def optimizer_rows(a: Analysis) -> pd.DataFrame | None:
    """The Optimizer.step ranges of the selected steps (all of them when none falls in one); None: no range."""
    tables = []
    for r in a.ranks:
        t = r.patterns.optimizer if r.patterns is not None else None
        if t is not None and len(t):
            mine = in_steps(a, r.rank, t, optimizer.OS_STEP)
            tables.append(mine if len(mine) else t)
    return pd.concat(tables, ignore_index=True) if tables else None


def optimizer_kernels(a: Analysis) -> float | None:
    """GPU activities launched per optimizer step (mean over its ranges)."""
    rows = optimizer_rows(a)
    return None if rows is None else float(rows[optimizer.OS_KERNELS].astype(float).mean())


def optimizer_kind(a: Analysis) -> str | None:
    """How most optimizer steps update their parameters (optimizer.PER_PARAMETER / MULTI_TENSOR_KIND / FUSED_KIND)."""
    rows = optimizer_rows(a)
    return None if rows is None else str(rows[optimizer.OS_KIND].astype(str).mode().iloc[0])


_NAME_PRECISION = ((re.compile(r"tf32", re.I), "tf32"), (re.compile(r"e4m3|e5m2|fp8|f8f8", re.I), "fp8"),
                   (re.compile(r"bf16", re.I), "bf16"), (re.compile(r"fp16|f16f16|hgemm", re.I), "fp16"))


def gemm_precision(a: Analysis) -> str | None:
    """The precision most GEMM time runs at: from the kernel name (tf32, fp8, bf16, fp16 tags: TF32 is a
    math mode, its inputs stay float) else the op's input dtype; None without GEMM kernels."""
    k = a.kernels
    gemm = k[k["class"].astype(str) == kernels.GEMM]
    if not len(gemm):
        return None
    time: dict[str, float] = {}
    for name, dtype, us in zip(gemm["name"].astype(str), gemm["dtype"], gemm["time_us"].astype(float), strict=True):
        tag = next((p for rx, p in _NAME_PRECISION if rx.search(name)), None)
        key = tag or (str(dtype) if isinstance(dtype, str) and dtype else "unknown")
        time[key] = time.get(key, 0.0) + us
    return max(time.items(), key=lambda kv: kv[1])[0]


def triton_launch_config(a: Analysis) -> str | None:
    """The launch configuration (constexprs, warps, stages) most user Triton kernel time runs with
    (patterns.triton_launches); None without user Triton launches."""
    time: dict[str, float] = {}
    for r in a.ranks:
        t = r.patterns.triton_launches if r.patterns is not None else None
        for rec in (t.to_dict("records") if t is not None and len(t) else []):
            key = (f"{rec[triton_launch.TL_KERNEL]}: {rec[triton_launch.TL_CONSTEXPRS] or 'no constexprs'}, "
                   f"{rec[triton_launch.TL_WARPS]:g} warps, {rec[triton_launch.TL_STAGES]:g} stages")
            time[key] = time.get(key, 0.0) + float(rec[triton_launch.TL_TIME_US])
    return max(time.items(), key=lambda kv: kv[1])[0] if time else None


def layout_transpose_time(a: Analysis) -> float:
    """cuDNN NCHW <-> NHWC transpose kernel time (step_parts.layout_transposes), per step."""
    return step_parts.layout_transposes(a, step_parts.steady(a))


# --- one row per rule id: the signals that show its change was made (any one suffices) ------------
