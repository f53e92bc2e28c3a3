"""The parts of a step that `tracekit diff` names: GPU idle by cause, and the part each suggestion targets.

All values are µs per step of the analysis's own step selection (its steady steps: `analysis.totals`,
`launch.steady_steps`). GPU idle is split as `tracekit.analyzers.idle` splits it (the totals'
`*_wait_us` / `*_gap_us` fields, which add up to the idle time); the pattern tables (chains, loops,
attention) already cover only the selected steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tracekit.analyzers import kernels
from tracekit.analyzers.detectors import sequences

IDLE_TOTAL = "gpu_idle"
IDLE_OTHER = "other"  # what the parts below leave unexplained (rounding; nothing by construction)
# part name -> LaunchTotals field (tracekit.analyzers.idle), in the order shown
IDLE_PARTS: dict[str, str] = {
    "data_loading": "data_wait_us",  # the main thread is in the DataLoader
    "sync": "sync_wait_us",  # from a host sync until the CPU launched again
    "copies": "copy_wait_us",  # the CPU is blocked in a synchronous or pageable copy call
    "launch_gaps": "launch_gap_us",  # short CPU-late gaps: the eager launch path
    "cpu_work": "cpu_wait_us",  # longer CPU-late gaps: Python or CPU ops between launches
    "gpu_gaps": "gpu_gap_us",  # the next activity was already launched: a GPU-side wait
}


@dataclass(frozen=True)
class Selection:
    """The steps an analysis describes: their number and totals (all ranks), the step numbers per rank."""

    steps: int
    totals: Any  # LaunchTotals
    by_rank: dict[int, frozenset[int]]


def steady(analysis: Any) -> Selection:
    """The analysis's step selection: `launch.steady_steps` per rank, totals from `analysis.totals`."""
    by_rank = {r.rank: frozenset(int(s) for s in r.launch.steady_steps) for r in analysis.ranks}
    return Selection(int(analysis.totals.steps), analysis.totals, by_rank)


def _patterns_total(analysis: Any, table: str, column: str) -> float:
    total = 0.0
    for r in analysis.ranks:
        t = getattr(r.patterns, table, None) if r.patterns is not None else None
        if t is not None and len(t):
            total += float(np.nansum(t[column].to_numpy(dtype=float)))
    return total


def per_step(total: float, n: int) -> float:
    return total / max(n, 1)


def class_time(analysis: Any, sel: Selection, *classes: str) -> float:
    """Kernel time of the given classes, µs per step."""
    c = analysis.classes
    return per_step(float(c.loc[c[kernels.SUM_KEY].isin(classes), kernels.SUM_TIME].sum()), sel.steps)


def total(field: str) -> Callable[[Any, Selection], float]:
    """A LaunchTotals field of the selection, per step."""
    return lambda analysis, sel: per_step(float(getattr(sel.totals, field)), sel.steps)


def copies(analysis: Any, sel: Selection) -> float:
    """Copy GPU time plus GPU idle while the CPU was blocked in copy calls (what pinned memory cuts)."""
    return class_time(analysis, sel, kernels.MEMCPY) + per_step(sel.totals.copy_wait_us, sel.steps)


def gpu_idle(analysis: Any, sel: Selection) -> float:
    return per_step(sel.totals.gpu_idle_us, sel.steps)


def attention_chain(analysis: Any, sel: Selection) -> float:
    """Unfused attention chains (scores GEMM → softmax → GEMM) plus fused attention kernels, per step."""
    chains = per_step(_patterns_total(analysis, "attention", sequences.AT_TIME_US), sel.steps)
    return chains + class_time(analysis, sel, kernels.ATTENTION)


def gemm_loop(analysis: Any, sel: Selection) -> float:
    """Wall time of same-shape GEMM loops plus the GEMM time outside them, per step."""
    wall = per_step(_patterns_total(analysis, "loops", sequences.LP_WALL_US), sel.steps)
    busy = per_step(_patterns_total(analysis, "loops", sequences.LP_BUSY_US), sel.steps)
    return wall + max(class_time(analysis, sel, kernels.GEMM) - busy, 0.0)


def step_span(analysis: Any, sel: Selection) -> float:
    return per_step(sel.totals.span_us, sel.steps)


# suggestion id -> (the part it targets, in words; how to measure it per step)
TARGETS: dict[str, tuple[str, Callable[[Any, Selection], float]]] = {
    "cuda_graphs": ("GPU idle time (launch gaps)", gpu_idle),
    "use_sdpa": ("the attention chain (scores GEMM → softmax → GEMM, or the fused kernel)", attention_chain),
    "lower_precision": ("GEMM time", lambda a, s: class_time(a, s, kernels.GEMM)),
    "fuse_elementwise": ("elementwise + normalization time",
                         lambda a, s: class_time(a, s, kernels.ELEMENTWISE, kernels.NORMALIZATION)),
    "batch_bmm": ("the same-shape GEMM loop", gemm_loop),
    "dataloader_workers": ("GPU idle while the main thread loads data", total("data_wait_us")),
    "avoid_sync": ("GPU idle after host syncs", total("sync_wait_us")),
    "pinned_memory": ("copy time + GPU idle while the CPU is blocked in copies", copies),
    "overlap_comm": ("exposed communication", total("comm_exposed_us")),
}
DEFAULT_TARGET = ("the step span", step_span)


def target(suggestion_id: str) -> tuple[str, Callable[[Any, Selection], float]]:
    """What a suggestion targets and how to measure it (the step span for rules not listed)."""
    return TARGETS.get(suggestion_id, DEFAULT_TARGET)


def idle_parts(analysis: Any, sel: Selection) -> dict[str, float]:
    """GPU idle per step, then its parts (IDLE_PARTS, which add up to it), then what is left."""
    idle = gpu_idle(analysis, sel)
    parts = {name: per_step(float(getattr(sel.totals, field)), sel.steps) for name, field in IDLE_PARTS.items()}
    other = idle - sum(parts.values())
    return {IDLE_TOTAL: idle, **parts, IDLE_OTHER: 0.0 if abs(other) < 1e-6 * max(idle, 1.0) else other}
