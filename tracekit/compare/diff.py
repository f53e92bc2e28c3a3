"""Two analyses compared over their steady steps: the unprofiled step, per-step metrics, classes, ops, kernels, idle, suggestions.

`diff(before, after, suggestions)` takes two `Analysis` results and BEFORE's suggestions and returns a
`TraceDiff`. The step it judges (`TraceDiff.headline`) is the unprofiled one: measured when both traces
carry it, else as tracekit.model projects it (both sides projected), else as traced. Each suggestion
is credited only when AFTER shows its change was made (compare/applied.py); then its prediction is
compared with the change of that step, the part of the step its rule row targets (`Rule.target`)
kept as evidence. Every time is µs per steady step (summed over ranks, divided by the steady steps of
all ranks). Work is matched by what it is: by kernel class, by the launching op and its input shapes,
and by kernel name where names match (new and vanished kernels are listed).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from tracekit.analyzers import step_parts
from tracekit.analyzers.analysis import Analysis
from tracekit.analyzers.kernels import SUM_COUNT, SUM_KEY, SUM_TIME
from tracekit.analyzers.totals import LaunchTotals
from tracekit.analyzers.unprofiled import Unprofiled
from tracekit.compare.checks import (
    Change,
    SuggestionCheck,
    check,
    direction,
    setup_warnings,
    target,
)
from tracekit.jsonsafe import plain
from tracekit.suggestions.model import Suggestion
from tracekit.units import fmt_us

__all__ = ["Change", "SuggestionCheck", "TraceDiff", "diff", "direction", "target"]

SCHEMA = "tracekit.diff/2"
# What the headline step is (TraceDiff.headline_kind).
MEASURED = "measured unprofiled"
PROJECTED = "projected unprofiled"
TRACED = "as traced"
MOVED_ROWS = 10
_TRANSFERS = ("Memcpy", "Memset")  # activity names shared by unrelated ops: not a kernel match

# --- columns of the per-step tables (classes, ops, kernels, idle, attribution) -------------------
BEFORE = "before_us_per_step"
AFTER = "after_us_per_step"
DELTA = "delta_us_per_step"  # after - before (negative: faster)
C_CLASS = "class"
C_BEFORE_N = "before_count_per_step"
C_AFTER_N = "after_count_per_step"
O_OP = "op"
O_SHAPES = "shapes"
O_KERNELS_BEFORE = "kernels_before"
O_KERNELS_AFTER = "kernels_after"
MATCH = "match"  # ops: "op+shapes", "op" (other shapes), "kernel" (same kernels, other op), "new", "vanished";
# kernels: "name", "new", "vanished"
K_NAME = "name"
K_CLASS = "class"
I_PART = "part"  # idle: "gpu_idle" (total) and its named parts, "other" last
A_PART = "part"  # attribution: "class:gemm", "idle:data_loading"...

# summary metrics: (name, LaunchTotals attribute or property, per step?)
METRICS: tuple[tuple[str, str], ...] = (
    ("span_us", "span_us"), ("gpu_busy_us", "gpu_busy_us"), ("gpu_idle_us", "gpu_idle_us"),
    ("kernels", "kernels"), ("launches", "launches"), ("cpu_launch_us", "cpu_launch_us"),
    ("syncs", "syncs"), ("sync_us", "sync_us"), ("host_wait_us", "host_wait_us"),
)


@dataclass(frozen=True)
class TraceDiff:
    """BEFORE vs AFTER over steady steps; `to_dict()` is the `tracekit diff --json` document."""

    before_path: str
    after_path: str
    before_steps: int  # steady steps (all ranks)
    after_steps: int
    metrics: tuple[Change, ...]
    verdict: tuple[str, str]
    cause: tuple[str | None, str | None]
    classes: pd.DataFrame  # C_CLASS, BEFORE, AFTER, DELTA, C_BEFORE_N, C_AFTER_N; largest |delta| first
    idle: pd.DataFrame  # I_PART, BEFORE, AFTER, DELTA: "gpu_idle" then its parts
    ops: pd.DataFrame  # O_OP, O_SHAPES, BEFORE, AFTER, DELTA, MATCH, O_KERNELS_BEFORE/AFTER
    kernels: pd.DataFrame  # K_NAME, K_CLASS, BEFORE, AFTER, DELTA, MATCH
    attribution: pd.DataFrame  # A_PART, DELTA: named parts of the step change
    suggestions: tuple[SuggestionCheck, ...]
    warnings: tuple[str, ...] = field(default=())
    projected: Change | None = None  # the projected unprofiled step (None unless the model projects both)
    measured: Change | None = None  # the measured unprofiled step (None unless both traces carry one)

    def metric(self, name: str) -> Change:
        return next(m for m in self.metrics if m.name == name)

    @property
    def step(self) -> Change:
        """The steady step span as traced, before → after."""
        return self.metric("span_us")

    @property
    def headline(self) -> Change:
        """The step the diff's verdict reads: measured unprofiled, else projected, else as traced."""
        return self.measured or self.projected or self.step

    @property
    def headline_kind(self) -> str:
        return MEASURED if self.measured else PROJECTED if self.projected else TRACED

    @property
    def disagreement(self) -> str | None:
        """One line when the traced step moved the other way than the headline step."""
        traced, head = direction(self.step), direction(self.headline)
        if self.headline_kind == TRACED or {traced, head} != {"faster", "slower"}:
            return None
        return f"as traced it looks {traced}: the profiler's overhead changed"

    @property
    def attributed_share(self) -> float | None:
        """Share of the step change that the named parts account for: 1 - |change - Σ parts| / |change|."""
        d = self.step.delta
        if d is None or d == 0:
            return None
        named = float(self.attribution[DELTA].sum()) if len(self.attribution) else 0.0
        return max(0.0, 1.0 - abs(d - named) / abs(d))

    @property
    def moved(self) -> pd.DataFrame:
        """The op rows whose per-step time moved most (either way)."""
        if not len(self.ops):
            return self.ops
        order = self.ops[DELTA].abs().sort_values(ascending=False, kind="stable").index
        return self.ops.loc[order].head(MOVED_ROWS)

    def grew_most(self) -> str | None:
        """The class whose time grew most (None if none grew)."""
        grew = self.classes[self.classes[DELTA] > 0]
        return None if not len(grew) else str(grew.sort_values(DELTA, ascending=False)[C_CLASS].iloc[0])

    def to_dict(self) -> dict[str, Any]:
        step, head = self.step, self.headline
        return plain({
            "schema": SCHEMA, "before": self.before_path, "after": self.after_path,
            "steps": {"before": self.before_steps, "after": self.after_steps},
            "headline": {**head.to_dict(), "kind": self.headline_kind, "direction": direction(head),
                         "disagreement": self.disagreement},
            "step": {**step.to_dict(), "attributed_share": self.attributed_share},
            "projected": None if self.projected is None else self.projected.to_dict(),
            "measured": None if self.measured is None else self.measured.to_dict(),
            "verdict": {"before": self.verdict[0], "after": self.verdict[1]},
            "cause": {"before": self.cause[0], "after": self.cause[1]},
            "metrics": [m.to_dict() for m in self.metrics],
            "classes": self.classes.to_dict("records"),
            "idle": self.idle.to_dict("records"),
            "attribution": self.attribution.to_dict("records"),
            "ops": self.ops.to_dict("records"),
            "moved": self.moved.to_dict("records"),
            "kernels": self.kernels.to_dict("records"),
            "suggestions": [s.to_dict() for s in self.suggestions],
            "warnings": list(self.warnings),
        })


def _outer(before: pd.DataFrame, after: pd.DataFrame, keys: list[str], nb: int, na: int) -> pd.DataFrame:
    """Outer join of two keyed time tables (column 'time_us'), as µs per step, with the delta."""
    b = before.set_index(keys)["time_us"] / max(nb, 1)
    a = after.set_index(keys)["time_us"] / max(na, 1)
    out = pd.concat([b.rename(BEFORE), a.rename(AFTER)], axis=1).fillna(0.0)
    out[DELTA] = out[AFTER] - out[BEFORE]
    return out.reset_index()


def _classes(before: Analysis, after: Analysis, nb: int, na: int) -> pd.DataFrame:
    def table(a: Analysis) -> pd.DataFrame:
        return a.classes.rename(columns={SUM_KEY: C_CLASS})[[C_CLASS, SUM_TIME, SUM_COUNT]]
    b, a = table(before), table(after)
    out = _outer(b, a, [C_CLASS], nb, na)
    counts_b = b.set_index(C_CLASS)[SUM_COUNT] / max(nb, 1)
    counts_a = a.set_index(C_CLASS)[SUM_COUNT] / max(na, 1)
    out[C_BEFORE_N] = out[C_CLASS].map(counts_b).fillna(0.0).astype(float)
    out[C_AFTER_N] = out[C_CLASS].map(counts_a).fillna(0.0).astype(float)
    return _by_delta(out)


def _by_delta(out: pd.DataFrame) -> pd.DataFrame:
    order = out[DELTA].abs().sort_values(ascending=False, kind="stable").index
    return out.loc[order].reset_index(drop=True)


def _op_table(a: Analysis) -> pd.DataFrame:
    k = a.kernels
    frame = pd.DataFrame({O_OP: k["op"].fillna("(no op)").astype(str),
                          O_SHAPES: k["shapes"].fillna("").astype(str),
                          "name": k["name"].astype(str), "time_us": k["time_us"].astype(float)})
    grouped = frame.groupby([O_OP, O_SHAPES], sort=False)
    out = grouped["time_us"].sum().to_frame()
    out["names"] = grouped["name"].agg(lambda s: tuple(dict.fromkeys(s)))
    return out.reset_index()


def _ops(before: Analysis, after: Analysis, nb: int, na: int) -> pd.DataFrame:
    b, a = _op_table(before), _op_table(after)
    out = _outer(b[[O_OP, O_SHAPES, "time_us"]], a[[O_OP, O_SHAPES, "time_us"]], [O_OP, O_SHAPES], nb, na)
    names_b = {(r[0], r[1]): r[2] for r in b[[O_OP, O_SHAPES, "names"]].itertuples(index=False)}
    names_a = {(r[0], r[1]): r[2] for r in a[[O_OP, O_SHAPES, "names"]].itertuples(index=False)}
    keys = list(zip(out[O_OP], out[O_SHAPES], strict=True))
    out[O_KERNELS_BEFORE] = [", ".join(names_b.get(k, ())) for k in keys]
    out[O_KERNELS_AFTER] = [", ".join(names_a.get(k, ())) for k in keys]
    ops_b, ops_a = set(b[O_OP]), set(a[O_OP])
    kernels_b = {n for names in names_b.values() for n in names if not n.startswith(_TRANSFERS)}
    kernels_a = {n for names in names_a.values() for n in names if not n.startswith(_TRANSFERS)}

    def match(k: tuple[str, str]) -> str:
        if k in names_b and k in names_a:
            return "op+shapes"
        if k[0] in ops_b and k[0] in ops_a:
            return "op"  # the same op with other shapes on the other side
        mine, theirs = (names_b.get(k, ()), kernels_a) if k in names_b else (names_a.get(k, ()), kernels_b)
        if set(mine) & theirs:
            return "kernel"  # the same kernels, launched from another op (e.g. a CUDA graph replay)
        return "vanished" if k in names_b else "new"

    out[MATCH] = [match(k) for k in keys]
    return _by_delta(out)


def _kernels(before: Analysis, after: Analysis, nb: int, na: int) -> pd.DataFrame:
    def table(a: Analysis) -> pd.DataFrame:
        k = a.kernels
        return pd.DataFrame({K_NAME: k["name"].astype(str), "class": k["class"].astype(str),
                             "time_us": k["time_us"].astype(float)}).groupby(K_NAME, sort=False).agg(
            time_us=("time_us", "sum"), cls=("class", "first")).reset_index()
    b, a = table(before), table(after)
    out = _outer(b[[K_NAME, "time_us"]], a[[K_NAME, "time_us"]], [K_NAME], nb, na)
    cls = {**dict(zip(a[K_NAME], a["cls"], strict=True)), **dict(zip(b[K_NAME], b["cls"], strict=True))}
    out.insert(1, K_CLASS, out[K_NAME].map(cls))
    in_b, in_a = set(b[K_NAME]), set(a[K_NAME])
    out[MATCH] = ["name" if n in in_b and n in in_a else ("vanished" if n in in_b else "new")
                  for n in out[K_NAME]]
    return _by_delta(out)


def _attribution(classes: pd.DataFrame, idle: pd.DataFrame) -> pd.DataFrame:
    rows = [(f"class:{c}", d) for c, d in zip(classes[C_CLASS], classes[DELTA], strict=True)]
    rows += [(f"idle:{p}", d) for p, d in zip(idle[I_PART], idle[DELTA], strict=True)
             if p not in (step_parts.IDLE_TOTAL, step_parts.IDLE_OTHER)]
    out = pd.DataFrame(rows, columns=[A_PART, DELTA])
    return _by_delta(out)


def _unprofiled(before: Analysis, after: Analysis) -> tuple[Change | None, Change | None, list[str]]:
    """(projected, measured) unprofiled step changes, and why the projection is left out."""
    ub, ua = before.unprofiled, after.unprofiled
    projected = measured = None
    notes = []
    if ub is not None and ua is not None:
        if ub.trusted and ua.trusted and ub.step_us is not None and ua.step_us is not None:
            projected = Change("projected_step_us", ub.step_us, ua.step_us)
        else:
            notes += [f"the execution model abstains on {side} ({_reason(u)}): no projected unprofiled step"
                      for side, u in (("BEFORE", ub), ("AFTER", ua)) if not u.trusted]
        if ub.measured_us is not None and ua.measured_us is not None:
            measured = Change("measured_step_us", ub.measured_us, ua.measured_us)
            notes += [f"{side}'s measured unprofiled steps range {fmt_us(r[0])}–{fmt_us(r[1])}: the machine's speed "
                      "changed during that run, so the measured change is only as certain as that spread"
                      for side, u in (("BEFORE", ub), ("AFTER", ua))
                      if u.measured_noisy and (r := u.measured_range_us) is not None]
    return projected, measured, notes


def _reason(u: Unprofiled) -> str:
    return u.abstained[0][1] if u.abstained else "no rank projected"


def diff(before: Analysis, after: Analysis, suggestions: Sequence[Suggestion] = ()) -> TraceDiff:
    """Compare two `Analysis` results over their steady steps (see the module docstring);
    `suggestions` (BEFORE's, from tracekit.suggestions.suggest) are checked against what changed."""
    sb, sa = step_parts.steady(before), step_parts.steady(after)
    nb, na = sb.steps, sa.steps
    metrics = tuple(Change(name, _per(sb.totals, attr, nb), _per(sa.totals, attr, na))
                    for name, attr in METRICS)
    classes = _classes(before, after, nb, na)
    idle_b, idle_a = step_parts.idle_parts(before, sb), step_parts.idle_parts(after, sa)
    idle = pd.DataFrame({I_PART: list(idle_b), BEFORE: list(idle_b.values()),
                         AFTER: [idle_a[k] for k in idle_b]})
    idle[DELTA] = idle[AFTER] - idle[BEFORE]
    projected, measured, warnings = _unprofiled(before, after)
    shell = TraceDiff(
        before_path=str(before.path), after_path=str(after.path), before_steps=nb, after_steps=na,
        metrics=metrics, verdict=(before.verdict, after.verdict),
        cause=(before.cause, after.cause),
        classes=classes, idle=idle, ops=_ops(before, after, nb, na),
        kernels=_kernels(before, after, nb, na), attribution=_attribution(classes, idle),
        suggestions=(), projected=projected, measured=measured,
    )
    warnings += setup_warnings(before, after)
    if not nb or not na:
        warnings.append("a trace has no steady steps: per-step numbers are over the whole trace")
    checks = tuple(check(s, before, after, sb, sa, shell.headline, shell.headline_kind) for s in suggestions)
    made = [c.id for c in checks if c.applied]
    if len(made) > 1:
        warnings.append(f"AFTER shows the changes of {len(made)} suggestions ({', '.join(made)}): each is compared "
                        "with the whole step change, which they share")
    return dataclasses.replace(shell, suggestions=checks, warnings=tuple(warnings))


def _per(totals: LaunchTotals, attr: str, n: int) -> float | None:
    value = getattr(totals, attr)
    return None if value is None else float(value) / max(n, 1)
