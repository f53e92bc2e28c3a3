"""What-if transform of an optimizer step brought back from the host to the GPU: the host step, the parameter and gradient copies and their waits gone, one fused step launched instead."""

from __future__ import annotations

import dataclasses

import numpy as np

from tracekit.model.outlook import StepModel, Transform
from tracekit.model.replay import ReplayCosts
from tracekit.model.whatif import LONG_GAP_US, Breaks, merge_breaks, node_mask, step_costs


def optimizer_to_gpu(host_steps: Breaks, copy_rows: np.ndarray, copy_calls: np.ndarray, fused_us: float,
                     launch_us: float) -> Transform:
    """The optimizer's host step and its copies replaced by a fused step on the GPU:

    - the host steps' stretches (`host_steps`: the Optimizer.step ranges on their thread) removed as
      merge_breaks removes a break: calls inside cost 0 and wait for nothing, host gaps lose the part
      inside;
    - the parameter and gradient copies (`copy_rows`, per rank.gpu row) take no GPU time; the calls of
      their ops (`copy_calls`, per rank.runtime row: the copy launches and the syncs they issue) cost 0
      and wait for nothing, with the host gaps before them (the copy loop's Python, dispatch and host
      allocations) where what is left of a gap is ≤ LONG_GAP_US (a longer one is other work);
    - the first of those calls launches the fused step instead: it keeps its gap, costs `launch_us`,
      and its first copy node takes `fused_us` (after the backward kernels in stream order, as the
      gradient copy it replaces did)."""
    drop_steps = merge_breaks(host_steps)

    def apply(step: StepModel) -> ReplayCosts:
        g = step.graph
        costs = drop_steps(step)
        current = dataclasses.replace(step, costs=costs)
        mine = node_mask(step, copy_rows)
        calls = copy_calls[g.call_row] if len(copy_calls) else np.zeros(g.n_calls, dtype=bool)
        if not calls.any() and not mine.any():
            return costs
        gap, dur, g_dur, _ = step_costs(current)
        order = np.flatnonzero(calls)
        first = int(order[0]) if len(order) else -1
        inner = calls.copy()
        if first >= 0:
            inner[first] = False
        gap = np.where(inner & (gap <= LONG_GAP_US), 0.0, gap)
        dur = np.where(calls, 0.0, dur)
        g_dur = np.where(mine, 0.0, g_dur)
        if first >= 0:
            dur[first] = launch_us
        launched = mine & (g.gpu_launch == first) if first >= 0 else mine
        if not launched.any():  # the first call launched none of them: the first copy node runs the step
            launched = mine
        if launched.any():
            g_dur[int(np.flatnonzero(launched)[0])] = fused_us
        before = costs.call_nowait
        nowait = calls & g.call_waits
        return dataclasses.replace(costs, call_gap_us=gap, call_dur_us=dur, gpu_dur_us=g_dur,
                                   call_nowait=nowait | before if before is not None else nowait)

    return apply
