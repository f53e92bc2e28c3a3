"""The step plan of a rank, computed before the other analyzers: windows, phases, the selected steps and their rows."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracekit.analyzers.steady import StepPhase, classify_steps
from tracekit.analyzers.step_selection import EVERY, STEADY_STEPS, StepSelection, StepsError
from tracekit.analyzers.windows import SCOPE_TRACE, StepWindows, step_windows
from tracekit.trace import tables
from tracekit.trace.model import RankTrace


@dataclass(frozen=True, eq=False)
class StepPlan:
    """The steps of one rank and which of them the headline covers.

    `windows` gives each step's window and each row's step position; `phases` says what each step
    is (tracekit.analyzers.steady); `selected` (bool per step) is what `selection` keeps;
    `gpu_rows` / `runtime_rows` (bool per rank.gpu / rank.runtime row) are the rows that fall in a
    selected step (every GPU row when the trace is one pseudo-step)."""

    selection: StepSelection
    windows: StepWindows
    phases: tuple[StepPhase, ...]
    selected: np.ndarray
    gpu_rows: np.ndarray
    runtime_rows: np.ndarray

    def __len__(self) -> int:
        return len(self.windows)

    @property
    def scope(self) -> str:
        return self.windows.scope

    @property
    def span_us(self) -> np.ndarray:
        """Length of each step's window."""
        return self.windows.end - self.windows.ts


def per_step(positions: np.ndarray, mask: np.ndarray, steps: int, weights: np.ndarray | None = None) -> np.ndarray:
    """Count (or sum `weights`) of the rows in `mask` per step position; rows in no step (-1) left out."""
    keep = mask & (positions >= 0)
    return np.bincount(positions[keep], weights=None if weights is None else weights[keep], minlength=steps)


def step_mask(step_positions: np.ndarray, selected: np.ndarray) -> np.ndarray:
    """Rows (by step position, -1 for none) that fall in a selected step."""
    if not len(selected):
        return np.zeros(len(step_positions), dtype=bool)
    inside = step_positions >= 0
    out = np.zeros(len(step_positions), dtype=bool)
    out[inside] = selected[step_positions[inside]]
    return out


def selected_steps(phases: tuple[StepPhase, ...], selection: StepSelection) -> np.ndarray:
    """Which steps (bool per step) `selection` keeps: the steady ones, every one, or a range of numbers."""
    if selection.kind == EVERY or not phases:
        return np.ones(len(phases), dtype=bool)
    if selection.span is not None:
        numbers = np.array([p.step for p in phases])
        return (numbers >= selection.span[0]) & (numbers <= selection.span[1])
    return np.array([p.steady for p in phases], dtype=bool)


def plan_steps(rank: RankTrace, selection: StepSelection = STEADY_STEPS) -> StepPlan:
    """The rank's step windows (tracekit.analyzers.windows), the phase of each step from its span,
    kernels and launches (tracekit.analyzers.steady.classify_steps), and the steps and rows that
    `selection` keeps. StepsError when it keeps no step of this rank."""
    windows = step_windows(rank)
    steps = len(windows)
    gpu, runtime = rank.gpu, rank.runtime
    gpu_kind = gpu[tables.GPU_KIND].to_numpy(dtype=object)
    runtime_kind = runtime[tables.RT_KIND].to_numpy(dtype=object) if len(runtime) else np.empty(0, dtype=object)
    kernels = per_step(windows.gpu_pos, gpu_kind == tables.KIND_KERNEL, steps)
    launches = per_step(windows.rt_pos, np.isin(runtime_kind, tables.LAUNCH_KINDS), steps)
    phases = classify_steps(rank, windows, windows.end - windows.ts, kernels, launches)
    selected = selected_steps(phases, selection)
    if not selected.any():
        numbers = [p.step for p in phases]
        raise StepsError(f"{selection} selects no step of rank {rank.rank} "
                         f"(its steps: {numbers[0]}–{numbers[-1]})")
    gpu_rows = (np.ones(len(gpu), dtype=bool) if windows.scope == SCOPE_TRACE
                else step_mask(windows.gpu_pos, selected))
    return StepPlan(selection=selection, windows=windows, phases=phases, selected=selected,
                    gpu_rows=gpu_rows, runtime_rows=step_mask(windows.rt_pos, selected))
