"""The parts of a step that `tracekit diff` names: GPU idle by cause, and the part each suggestion targets.

All values are µs per step of the analysis's own step selection (its steady steps; `analysis.totals`).
Per-step tables of the patterns (DataLoader, syncs, copies, communication) are restricted to those
steps. Chain, loop and attention tables are totals over every step of the trace: they are divided by
the trace's step count (the same work repeats each step, so that is its per-step time).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analyzers import hostside as H
from tracekit.analyzers import kernels as K
from tracekit.analyzers import sequences as S

IDLE_TOTAL = "gpu_idle"
IDLE_DATA = "data_loading"  # GPU idle inside DataLoader ops on the main thread
IDLE_SYNC = "sync"  # GPU idle after host syncs (until the next GPU work)
IDLE_COPIES = "pageable_copies"  # CPU blocked in pageable host-to-device copies (capped by the idle left)
IDLE_HOST = "host_wait"  # the rest of the host-wait gaps: the GPU waits for the CPU (launches, CPU work)
IDLE_KERNEL = "kernel_gaps"  # short gaps between already-launched kernels
IDLE_OTHER = "other"


@dataclass(frozen=True)
class Selection:
    """The steps an analysis describes: their number and totals (all ranks), the step numbers per rank."""

    steps: int
    totals: Any  # LaunchTotals
    by_rank: dict[int, frozenset[int]]
    all_steps: int  # every step of every rank (what chain/loop/attention totals cover)


def steady(analysis: Any) -> Selection:
    """The analysis's step selection: `launch.steady_steps` per rank, totals from `analysis.totals`."""
    by_rank: dict[int, frozenset[int]] = {}
    all_steps = 0
    for r in analysis.ranks:
        lo = r.launch
        numbers = getattr(lo, "steady_steps", None)
        if numbers is None:
            numbers = lo.steps["step"].tolist()
        by_rank[r.rank] = frozenset(int(s) for s in numbers)
        all_steps += len(lo.steps)
    totals = analysis.totals
    return Selection(int(totals.steps), totals, by_rank, all_steps)


def _sum_selected(analysis: Any, sel: Selection, table: str, step_col: str,
                  value: Callable[[pd.DataFrame], np.ndarray]) -> float:
    total = 0.0
    for r in analysis.ranks:
        t = getattr(r.patterns, table, None) if r.patterns is not None else None
        if t is None or not len(t):
            continue
        keep = t[step_col].isin(sel.by_rank.get(r.rank, frozenset())).to_numpy()
        total += float(np.nansum(value(t[keep])))
    return total


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
    return per_step(float(c.loc[c[K.SUM_KEY].isin(classes), K.SUM_TIME].sum()), sel.steps)


def dataloader_idle(analysis: Any, sel: Selection) -> float:
    return per_step(_sum_selected(analysis, sel, "dataloader", H.DL_STEP,
                                  lambda t: t[H.DL_GPU_IDLE_US].to_numpy(dtype=float)), sel.steps)


def sync_idle(analysis: Any, sel: Selection) -> float:
    """Σ min(CPU wait in the sync, GPU idle after it) per step (what `avoid_sync` estimates)."""
    return per_step(_sum_selected(analysis, sel, "syncs", H.SY_STEP, lambda t: np.minimum(
        t[H.SY_WAIT_US].to_numpy(dtype=float), t[H.SY_BUBBLE_US].to_numpy(dtype=float))), sel.steps)


def pageable_copy_block(analysis: Any, sel: Selection) -> float:
    return per_step(_sum_selected(analysis, sel, "copies", H.CP_STEP,
                                  lambda t: t[H.CP_CALL_US].to_numpy(dtype=float)), sel.steps)


def exposed_comm(analysis: Any, sel: Selection) -> float:
    return per_step(_sum_selected(analysis, sel, "comm", H.CM_STEP,
                                  lambda t: t[H.CM_EXPOSED_US].to_numpy(dtype=float)), sel.steps)


def gpu_idle(analysis: Any, sel: Selection) -> float:
    return per_step(sel.totals.gpu_idle_us, sel.steps)


def attention_chain(analysis: Any, sel: Selection) -> float:
    """Unfused attention chains (scores GEMM → softmax → GEMM) plus fused attention kernels, per step."""
    chains = per_step(_patterns_total(analysis, "attention", S.AT_TIME_US), sel.all_steps)
    return chains + class_time(analysis, sel, K.ATTENTION)


def gemm_loop(analysis: Any, sel: Selection) -> float:
    """Wall time of same-shape GEMM loops plus the GEMM time outside them, per step."""
    wall = per_step(_patterns_total(analysis, "loops", S.LP_WALL_US), sel.all_steps)
    busy = per_step(_patterns_total(analysis, "loops", S.LP_BUSY_US), sel.all_steps)
    return wall + max(class_time(analysis, sel, K.GEMM) - busy, 0.0)


def step_span(analysis: Any, sel: Selection) -> float:
    return per_step(sel.totals.span_us, sel.steps)


# suggestion id -> (the part it targets, in words; how to measure it per step)
TARGETS: dict[str, tuple[str, Callable[[Any, Selection], float]]] = {
    "cuda_graphs": ("GPU idle time (launch gaps)", gpu_idle),
    "use_sdpa": ("the attention chain (scores GEMM → softmax → GEMM, or the fused kernel)", attention_chain),
    "lower_precision": ("GEMM time", lambda a, s: class_time(a, s, K.GEMM)),
    "fuse_elementwise": ("elementwise + normalization time",
                         lambda a, s: class_time(a, s, K.ELEMENTWISE, K.NORMALIZATION)),
    "batch_bmm": ("the same-shape GEMM loop", gemm_loop),
    "dataloader_workers": ("GPU idle inside DataLoader calls", dataloader_idle),
    "avoid_sync": ("GPU idle after host syncs", sync_idle),
    "pinned_memory": ("CPU time blocked in pageable host-to-device copies", pageable_copy_block),
    "overlap_comm": ("exposed communication", exposed_comm),
}
DEFAULT_TARGET = ("the step span", step_span)


def target(suggestion_id: str) -> tuple[str, Callable[[Any, Selection], float]]:
    """What a suggestion targets and how to measure it (the step span for rules not listed)."""
    return TARGETS.get(suggestion_id, DEFAULT_TARGET)


def idle_parts(analysis: Any, sel: Selection) -> dict[str, float]:
    """GPU idle per step and its parts, in order: data loading, syncs, pageable copies, other host-wait
    gaps, kernel gaps, other (each part capped by the idle time the earlier parts left)."""
    total = gpu_idle(analysis, sel)
    left = total
    parts: dict[str, float] = {IDLE_TOTAL: total}
    data = min(dataloader_idle(analysis, sel), left)
    left -= data
    sync = min(sync_idle(analysis, sel), left)
    left -= sync
    copies = min(pageable_copy_block(analysis, sel), left)
    left -= copies
    host_rest = max(per_step(sel.totals.host_wait_us, sel.steps) - data - sync, 0.0)
    host = min(host_rest, left)
    left -= host
    kernel = min(per_step(sel.totals.kernel_wait_us, sel.steps), left)
    left -= kernel
    parts.update({IDLE_DATA: data, IDLE_SYNC: sync, IDLE_COPIES: copies, IDLE_HOST: host,
                  IDLE_KERNEL: kernel, IDLE_OTHER: max(left, 0.0)})
    return parts
