"""The combined analysis of a trace (classification, launch overhead, costs, roofline) and its JSON."""

from __future__ import annotations

import dataclasses
import importlib
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analyzers import kernels as K
from tracekit.analyzers.gputime import TemporalBreakdown, temporal_breakdown
from tracekit.analyzers.launch import (
    LaunchOverhead,
    LaunchTotals,
    QueueStats,
    launch_overhead,
    step_records,
)
from tracekit.analyzers.timeline import Timeline, timeline
from tracekit.analyzers.tracefacts import TraceFacts, trace_facts

SCHEMA = "tracekit.analysis/1"

# Columns of Analysis.kernels (the JSON `kernels` rows), in output order.
KERNEL_COLUMNS: tuple[str, ...] = (
    "name", "class", "library", "op", "shapes", "dtype", "count", "time_us", "flops", "bytes",
    "intensity", "achieved_tflops", "achieved_gbps", "bound", "roofline_pct",
)
_GROUP_KEYS = ["name", "class", "library", "op", "shapes", "dtype"]
_SUMMED = ["count", "time_us", "flops", "bytes"]


@dataclass(frozen=True)
class RankAnalysis:
    """Everything tracekit computes for one rank."""

    rank: int
    classification: K.KernelClassification
    launch: LaunchOverhead
    temporal: TemporalBreakdown
    costs: Any | None  # tracekit.analyzers.costs.KernelCosts, None when that module is absent
    roofline: Any | None  # tracekit.analyzers.roofline.Roofline, None when that module is absent
    patterns: Any | None = None  # tracekit.analyzers.patterns.Patterns: what the suggestion rules read
    timeline: Timeline | None = None  # binned busy share per stream (None without GPU activity)
    facts: TraceFacts | None = None  # what the file says: platform, GPUs, versions, counts, CPU ops


@dataclass(frozen=True)
class Analysis:
    """A trace's analysis over the selected ranks; `to_dict()` is the `tracekit analyze --json` document.

    `suggestions` is the hook for tracekit.suggestions: None until rules have run (JSON null), else a
    sequence of objects with `to_dict()`; set it with `with_suggestions`.
    """

    path: str
    ranks: tuple[RankAnalysis, ...]
    device: Any | None  # tracekit.analyzers.devices.Device or None
    totals: LaunchTotals  # summed over the selected ranks
    queue: QueueStats  # over all ranks' launched GPU activities inside the steps
    classes: pd.DataFrame  # kernels.SUM_* columns, keyed by class, over the selected ranks
    libraries: pd.DataFrame  # kernels.SUM_* columns, keyed by library
    kernels: pd.DataFrame  # KERNEL_COLUMNS, largest time first
    tokens_per_step: float | None = None
    warnings: tuple[str, ...] = ()
    suggestions: tuple[Any, ...] | None = None

    @property
    def verdict(self) -> str:
        return self.totals.verdict

    @property
    def other_share(self) -> float:
        row = self.classes[self.classes[K.SUM_KEY] == K.OTHER]
        return float(row[K.SUM_SHARE].iloc[0]) if len(row) else 0.0

    @property
    def kernels_per_step_median(self) -> float | None:
        """Median kernels per step over all ranks' steps (robust to a prefill or warm-up step)."""
        counts = [s.kernels for r in self.ranks for s in r.launch.step_totals]
        return float(np.median(counts)) if counts else None

    @property
    def kernels_per_token(self) -> float | None:
        """Median kernels per step / tokens_per_step (None unless the caller gave tokens_per_step)."""
        per_step = self.kernels_per_step_median
        if per_step is None or not self.tokens_per_step:
            return None
        return per_step / self.tokens_per_step

    def with_suggestions(self, suggestions: Any) -> Analysis:
        return dataclasses.replace(self, suggestions=tuple(suggestions))

    def summary_dict(self) -> dict[str, Any]:
        t = self.totals
        scopes = sorted({r.launch.scope for r in self.ranks})
        return {
            **t.to_dict(),
            "scope": scopes[0] if len(scopes) == 1 else "mixed",
            "kernels_per_step_median": self.kernels_per_step_median,
            "tokens_per_step": self.tokens_per_step,
            "kernels_per_token": self.kernels_per_token,
            "queue_p50_us": self.queue.p50_us, "queue_p90_us": self.queue.p90_us,
            "queue_max_us": self.queue.max_us,
            "other_share": self.other_share,
            "verdict": self.verdict,
        }

    def to_dict(self) -> dict[str, Any]:
        device = self.device.to_dict() if self.device is not None else None
        return _clean({
            "schema": SCHEMA,
            "trace": self.path,
            "ranks": [_rank_dict(r) for r in self.ranks],
            "device": device,
            "summary": self.summary_dict(),
            "steps": [rec for r in self.ranks for rec in step_records(r.launch)],
            "classes": K.summary_records(self.classes, "class"),
            "libraries": K.summary_records(self.libraries, "library"),
            "kernels": [dict(zip(KERNEL_COLUMNS, row, strict=True)) for row in
                        self.kernels[list(KERNEL_COLUMNS)].itertuples(index=False, name=None)],
            "warnings": list(self.warnings),
            "suggestions": None if self.suggestions is None else [s.to_dict() for s in self.suggestions],
        })


def _rank_dict(r: RankAnalysis) -> dict[str, Any]:
    launch = r.launch.to_dict()
    return {"rank": r.rank, "scope": r.launch.scope, "verdict": r.launch.verdict,
            "gpu_busy_us": r.launch.totals.gpu_busy_us, "span_us": r.launch.totals.span_us,
            "kernels": r.launch.totals.kernels, "other_share": r.classification.other_share,
            "temporal": r.temporal.to_dict(), "streams": launch["streams"], "apis": launch["apis"]}


def _clean(value: Any) -> Any:
    """JSON-safe: numpy scalars to Python, NaN/inf to None."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is pd.NA or value is pd.NaT:
        return None
    return value


def _optional(module: str):
    """A sibling analyzer module written by another part of the team, or None while it is absent."""
    name = f"tracekit.analyzers.{module}"
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name == name:
            return None
        raise


def _basic_rows(rank, kc: K.KernelClassification) -> pd.DataFrame:
    """Kernel rows without costs: grouped by name, class, library and launching op."""
    gpu = rank.gpu
    ops = rank.ops
    op_pos = gpu["op"].to_numpy()
    names = ops["name"].to_numpy(dtype=object) if len(ops) else np.empty(0, dtype=object)
    frame = pd.DataFrame({
        "name": gpu["name"].to_numpy(dtype=object), "class": kc.table[K.CLASS].to_numpy(dtype=object),
        "library": kc.table[K.LIBRARY].to_numpy(dtype=object),
        "op": [names[i] if i >= 0 else "" for i in op_pos], "dur": gpu["dur"].to_numpy(dtype=float),
    })
    out = frame.groupby(["name", "class", "library", "op"], sort=False)["dur"].agg(["count", "sum"])
    out = out.reset_index().rename(columns={"sum": "time_us"})
    out["op"] = out["op"].replace("", None)
    for col in ("shapes", "dtype", "bound"):
        out[col] = None
    for col in ("flops", "bytes", "intensity", "achieved_tflops", "achieved_gbps", "roofline_pct"):
        out[col] = np.nan
    return out


def _combine_rows(tables: list[pd.DataFrame], roofline_mod, device) -> pd.DataFrame:
    if len(tables) == 1:
        out = tables[0]
    else:
        both = pd.concat(tables, ignore_index=True)
        keys = both[_GROUP_KEYS].astype(object).where(both[_GROUP_KEYS].notna(), "\x00")
        grouped = both[_SUMMED].groupby([keys[k] for k in _GROUP_KEYS], sort=False)
        summed = grouped.sum(min_count=1)
        unknown = both[["flops", "bytes"]].isna().groupby([keys[k] for k in _GROUP_KEYS], sort=False).any()
        summed[["flops", "bytes"]] = summed[["flops", "bytes"]].mask(unknown)
        out = summed.reset_index()
        for k in _GROUP_KEYS:
            col = out[k].astype(object)
            out[k] = col.where(col != "\x00", None)
        if roofline_mod is not None:
            out = roofline_mod.roofline_rows(out, device)
        else:
            for col in ("intensity", "achieved_tflops", "achieved_gbps", "roofline_pct"):
                out[col] = np.nan
            out["bound"] = None
    out = out.sort_values(["time_us", "name"], ascending=[False, True], kind="stable")
    return out.reset_index(drop=True)


def analyze_rank(rank, *, device=None, kernel_wait_us: float | None = None) -> RankAnalysis:
    """All analyzers on one RankTrace."""
    kc = K.classify(rank)
    lo = launch_overhead(rank) if kernel_wait_us is None else launch_overhead(rank, kernel_wait_us=kernel_wait_us)
    tb = temporal_breakdown(rank, kc.table[K.CLASS])
    costs_mod, roof_mod = _optional("costs"), _optional("roofline")
    costs = costs_mod.estimate_costs(rank, kc) if costs_mod is not None else None
    roof = roof_mod.roofline(rank, kc, costs, device) if (roof_mod and costs is not None) else None
    patterns_mod = _optional("patterns")
    patterns = patterns_mod.find_patterns(rank, kc, costs) if patterns_mod is not None else None
    return RankAnalysis(rank=int(rank.rank), classification=kc, launch=lo, temporal=tb, costs=costs,
                        roofline=roof, patterns=patterns,
                        timeline=timeline(rank, lo.steps, kc.table[K.CLASS]), facts=trace_facts(rank))


def analyze(trace, *, rank: int | None = None, tokens_per_step: float | None = None) -> Analysis:
    """Analyze every rank of `trace` (or only `rank`) and combine the results."""
    selected = [trace.rank(rank)] if rank is not None else list(trace.ranks.values())
    devices_mod = _optional("devices")
    device = None
    if devices_mod is not None:
        with_gpu = [r for r in selected if r.has_gpu] or selected
        device = devices_mod.match_device(with_gpu[0].meta)
    results = tuple(analyze_rank(r, device=device) for r in selected)
    totals = sum((r.launch.totals for r in results), LaunchTotals())
    queues = [r.launch.activities["queue_us"].to_numpy()[_in_steps(r.launch)] for r in results]
    all_keys = pd.concat([r.classification.table[K.CLASS] for r in results], ignore_index=True)
    all_libs = pd.concat([r.classification.table[K.LIBRARY] for r in results], ignore_index=True)
    all_dur = pd.concat([s.gpu["dur"].astype(float) for s in selected], ignore_index=True)
    roof_mod = _optional("roofline")
    tables = [r.roofline.table if r.roofline is not None else _basic_rows(s, r.classification)
              for r, s in zip(results, selected, strict=True)]
    warnings = list(trace.warnings)
    for r in results:
        warnings.extend(getattr(r.roofline, "notes", ()) or ())
    return Analysis(
        path=str(trace.path), ranks=results, device=device, totals=totals,
        queue=QueueStats.of(np.concatenate(queues) if queues else np.empty(0)),
        classes=K.summarize(all_keys, all_dur), libraries=K.summarize(all_libs, all_dur),
        kernels=_combine_rows(tables, roof_mod, device), tokens_per_step=tokens_per_step,
        warnings=tuple(dict.fromkeys(warnings)),
    )


def _in_steps(lo: LaunchOverhead) -> np.ndarray:
    steps = lo.activities["step"].to_numpy()
    if lo.scope != "steps":
        return np.ones(len(steps), dtype=bool)
    return np.isin(steps, lo.steps["step"].to_numpy())
