"""Rules about the optimizer step: a per-parameter (or multi-tensor) optimizer that a fused one would replace; parameters the optimizer does not train left requiring grad; an L2 penalty over every parameter in the loss that the optimizer's weight_decay does in its step; gradients zeroed where they could be freed."""

from __future__ import annotations

import math
from typing import Any

from tracekit.analyzers.analysis import Analysis, RankAnalysis
from tracekit.analyzers.detectors import frozen_grads as fg
from tracekit.analyzers.detectors import l2_penalty as lp
from tracekit.analyzers.detectors import offload, optimizer
from tracekit.analyzers.detectors import zeroed_grads as zg
from tracekit.model.outlook import Transform
from tracekit.model.whatif import remove_calls
from tracekit.suggestions.common import (
    SILENT_BELOW_PCT,
    Scope,
    every_step_tables,
    fmt_us,
    in_headline,
    rank_tables,
    suggestion,
)
from tracekit.suggestions.model import Suggestion
from tracekit.suggestions.rules_host import calls_gone
from tracekit.units import plural

# Like every rule until the execution model lands (issue 19), the saving is on the profiled timeline
# the other rules' savings are ranked on: the range as recorded − a fused step's time. The profiler
# slows this CPU path (recorded ops and launch calls); the unprofiled projection scales the range by
# the slowdown of its launch calls, their mean duration / the ~3 µs an unprofiled cudaLaunchKernel
# costs (docs/design.md, "Launch cost under the profiler"; never up), and is shown beside it.
UNPROFILED_LAUNCH_US = 3.0
# Tensors one fused launch updates: PyTorch's multi_tensor_apply takes at most 36 tensors per list at
# depth 4 (param, grad, exp_avg, exp_avg_sq); more chunks add a few launches, which stay µs.
TENSORS_PER_LAUNCH = 36
# Words a fused update moves per parameter element (compulsory traffic): Adam/AdamW read the param,
# the grad and both moments and write the param and both moments (7); SGD with momentum and the
# one-state optimizers read param, grad, state and write param and state (5).
WORDS_PER_ELEMENT = {"SGD": 5, "Adagrad": 5, "RMSprop": 5}
ADAM_WORDS = 7
FUSED_MIN_PCT = 2.0  # silent below 2 % of the step
# torch.optim classes with a fused=True implementation (torch >= 2.4); others (Shampoo...) have none.
HAS_FUSED = frozenset({"Adam", "AdamW", "SGD", "Adagrad"})


def _fused_us(row: dict[str, Any], bandwidth: float | None, launch_us: float) -> tuple[float, str]:
    """Time of the fused update of the row's tensors with launches of `launch_us`: compulsory bytes /
    HBM bandwidth or its launches, whichever is larger; unknown sizes: the row's own GPU time."""
    tensors, elements, itemsize = row[optimizer.OS_TENSORS], row[optimizer.OS_ELEMENTS], row[optimizer.OS_ITEMSIZE]
    launches = math.ceil(tensors / TENSORS_PER_LAUNCH) if not math.isnan(tensors) else 1
    words = WORDS_PER_ELEMENT.get(row[optimizer.OS_OPTIMIZER], ADAM_WORDS)
    if bandwidth and not math.isnan(elements) and not math.isnan(itemsize):
        gpu_us = elements * itemsize * words / bandwidth * 1e6
        how = f"{elements:.0f} elements × {words} × {itemsize:.0f} B / HBM bandwidth = {fmt_us(gpu_us)}"
    else:
        gpu_us, how = row[optimizer.OS_GPU_US], f"its GPU time now ({fmt_us(row[optimizer.OS_GPU_US])})"
    return max(gpu_us, launches * launch_us), f"max({how}, {launches} launches × {fmt_us(launch_us)})"


def step_times(row: dict[str, Any], bandwidth: float | None) -> dict[str, float]:
    """One optimizer step's time now and fused, as profiled and projected unprofiled (µs), and the
    profiler's launch slowdown."""
    launch_mean = row[optimizer.OS_LAUNCH_US]
    slowdown = 1.0 if math.isnan(launch_mean) else max(launch_mean / UNPROFILED_LAUNCH_US, 1.0)
    kernels, gpu_us, cpu_us = row[optimizer.OS_KERNELS], row[optimizer.OS_GPU_US], row[optimizer.OS_CPU_US]
    fused, _ = _fused_us(row, bandwidth, UNPROFILED_LAUNCH_US * slowdown)
    fused_bare, _ = _fused_us(row, bandwidth, UNPROFILED_LAUNCH_US)
    if row[optimizer.OS_KIND] == optimizer.MULTI_TENSOR_KIND:
        # a few launches per op already: fusing removes the extra launches (its Python stays), or
        # the extra traffic, whichever is larger
        gpu_saving = max(gpu_us - min(fused, gpu_us), 0.0)
        extra = max(kernels - 1, 0)
        saving = max(extra * UNPROFILED_LAUNCH_US * slowdown, gpu_saving)
        bare_saving = max(extra * UNPROFILED_LAUNCH_US, gpu_saving)
        return {"slowdown": slowdown, "fused_us": fused, "saving_us": saving, "unprofiled_saving_us": bare_saving}
    now = max(cpu_us, gpu_us)
    bare = max(cpu_us / slowdown, kernels * UNPROFILED_LAUNCH_US, gpu_us)
    return {"slowdown": slowdown, "fused_us": fused, "saving_us": max(now - fused, 0.0),
            "unprofiled_saving_us": max(bare - fused_bare, 0.0)}


def fused_optimizer(analysis: Analysis) -> Suggestion | None:
    """Optimizer steps that are not fused: their unprofiled time − a fused step's, per step."""
    scope = Scope.of(analysis)
    bandwidth = analysis.device.memory_bandwidth if analysis.device is not None else None
    rows: list[dict[str, Any]] = []
    total, bare_total, names, how = 0.0, 0.0, set(), ""
    for r in analysis.ranks:
        table = r.patterns.optimizer if r.patterns is not None else None
        if table is None or not len(table):
            continue
        picked = table[in_headline(r, table[optimizer.OS_STEP].to_numpy())]
        hosted = r.patterns.offload if r.patterns is not None else None
        on_host = set() if hosted is None else set(zip(hosted[offload.OF_STEP], hosted[offload.OF_OP], strict=True))
        for row in picked.to_dict("records"):
            if (row[optimizer.OS_KIND] == optimizer.FUSED_KIND or row[optimizer.OS_KERNELS] == 0
                    or row[optimizer.OS_OPTIMIZER] not in HAS_FUSED
                    or (row[optimizer.OS_STEP], row[optimizer.OS_OP]) in on_host):
                continue  # fused already, nothing on the GPU, or a host step (optimizer_on_gpu's)
            times = step_times(row, bandwidth)
            if times["saving_us"] <= 0:
                continue
            total += times["saving_us"]
            bare_total += times["unprofiled_saving_us"]
            names.add(row[optimizer.OS_OPTIMIZER])
            _, fused_how = _fused_us(row, bandwidth, UNPROFILED_LAUNCH_US * times["slowdown"])
            if row[optimizer.OS_KIND] == optimizer.MULTI_TENSOR_KIND:
                how = (f"{row[optimizer.OS_KERNELS]} multi-tensor launches − 1 fused, × "
                       f"{row[optimizer.OS_LAUNCH_US]:.1f} µs each (at least the extra GPU traffic); "
                       f"unprofiled × {UNPROFILED_LAUNCH_US:.0f} µs (assumed) = {fmt_us(times['unprofiled_saving_us'])}")
            else:
                how = (f"max(CPU {fmt_us(row[optimizer.OS_CPU_US])}, GPU {fmt_us(row[optimizer.OS_GPU_US])}) − "
                       f"fused {fused_how}; unprofiled: CPU / {times['slowdown']:.2f} (launch calls "
                       f"{row[optimizer.OS_LAUNCH_US]:.1f} µs here vs ~{UNPROFILED_LAUNCH_US:.0f} µs, assumed), "
                       f"at least {row[optimizer.OS_KERNELS]} kernels × {UNPROFILED_LAUNCH_US:.0f} µs, − fused = "
                       f"{fmt_us(times['unprofiled_saving_us'])}")
            rows.append({"rank": r.rank, "step": int(row[optimizer.OS_STEP]), "op": row[optimizer.OS_OP],
                         "kind": row[optimizer.OS_KIND], "kernels": int(row[optimizer.OS_KERNELS]),
                         "tensors": row[optimizer.OS_TENSORS], "gpu_us": row[optimizer.OS_GPU_US],
                         "cpu_us": row[optimizer.OS_CPU_US], "cpu_events": int(row[optimizer.OS_CPU_EVENTS]),
                         "fused_us": times["fused_us"], "saving_us": times["saving_us"],
                         "unprofiled_saving_us": times["unprofiled_saving_us"]})
    if not rows or scope.pct(bare_total / scope.ranks) < FUSED_MIN_PCT:
        return None  # silent unless the saving holds without the profiler too (≥ 2 % of the step)
    saving = total / scope.ranks
    kernels = sum(x["kernels"] for x in rows) / (scope.steps * scope.ranks)
    kinds = sorted({x["kind"] for x in rows})
    formula = (f"per optimizer step, its time − a fused step's: {how} (last step shown); summed over "
               f"{plural(len(rows), 'step')} = {fmt_us(saving)} as profiled, {fmt_us(bare_total / scope.ranks)} unprofiled")
    title = (f"Use the fused {'/'.join(sorted(names))} (fused=True): its step launches {kernels:.0f} "
             f"{'/'.join(kinds)} kernels per step, one fused kernel per group of tensors does the same update")
    return suggestion("fused_optimizer", title, saving, scope, formula, rows, min_pct=FUSED_MIN_PCT)


def freeze_params(analysis: Analysis) -> Suggestion | None:
    """Training steps whose backward accumulates gradients into ≥ MIN_UNREAD tensors the optimizer does
    not update (patterns.frozen_grads), all after the last trainable one: the GPU work backward
    launches after that last trainable accumulation. Interleaved ones are not priced (silent)."""
    scope = Scope.of(analysis)
    rows, total = [], 0.0
    for r, table in rank_tables(analysis, "frozen_grads"):
        t = table[in_headline(r, table[fg.FG_STEP].to_numpy())]
        t = t[t[fg.FG_PREFIX].astype(bool)]
        for rec in t.to_dict("records"):
            total += float(rec[fg.FG_CUT_US])
            rows.append({"rank": r.rank, "step": int(rec[fg.FG_STEP]), "accumulated": int(rec[fg.FG_ACCUMULATED]),
                         "updated": int(rec[fg.FG_UPDATED]), "unread": int(rec[fg.FG_UNREAD]),
                         "cut_backward_us": float(rec[fg.FG_CUT_US]), "saving_us": float(rec[fg.FG_CUT_US])})
    if not rows:
        return None
    saving = total / scope.ranks
    top = rows[0]
    formula = (f"the GPU work backward launches after the last gradient the optimizer reads (the {top['unread']} "
               f"unread ones all come after it: a prefix of the network) = {fmt_us(saving)} "
               f"({fmt_us(saving / scope.steps)} per step)")
    title = (f"Freeze what the optimizer does not train (requires_grad_(False)): each step's backward accumulates "
             f"{top['accumulated']} gradients and the optimizer updates {top['updated']} tensors; the other "
             f"{top['unread']} are computed for nothing, and backward runs through their layers")
    return suggestion("freeze_params", title, saving, scope, formula, rows)


def freeze_transform(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """The launches of the backward work past the last trainable gradient (patterns.frozen_calls) removed."""
    p = r.patterns
    if p is None or not len(p.frozen_calls) or not p.frozen_calls.any():
        return None
    return remove_calls(p.frozen_calls)


def weight_decay(analysis: Analysis) -> Suggestion | None:
    """Training steps whose loss sums a square of every parameter tensor (patterns.l2_penalty): the
    penalty's host time (its forward run's wall, its backward calls and the extra gradient
    accumulations), or its GPU time if longer, per step; the what-if removes those calls and kernels."""
    scope = Scope.of(analysis)
    rows, total = [], 0.0
    for r, table in rank_tables(analysis, "l2_penalty"):
        t = table[in_headline(r, table[lp.LP_STEP].to_numpy())]
        for rec in t.to_dict("records"):
            saving = max(float(rec[lp.LP_CPU_US]), float(rec[lp.LP_GPU_US]))
            total += saving
            launches = int(rec[lp.LP_FORWARD_LAUNCHES]) + int(rec[lp.LP_BACKWARD_LAUNCHES])
            rows.append({"rank": r.rank, "step": int(rec[lp.LP_STEP]), "tensors": int(rec[lp.LP_TENSORS]),
                         "params": int(rec[lp.LP_PARAMS]), "ops": str(rec[lp.LP_OPS]),
                         "forward_launches": int(rec[lp.LP_FORWARD_LAUNCHES]),
                         "backward_nodes": int(rec[lp.LP_BACKWARD_NODES]),
                         "backward_launches": int(rec[lp.LP_BACKWARD_LAUNCHES]),
                         "accumulations": int(rec[lp.LP_ACCUMULATIONS]), "launches": launches,
                         "kernels": int(rec[lp.LP_KERNELS]), "gpu_us": float(rec[lp.LP_GPU_US]),
                         "cpu_us": float(rec[lp.LP_CPU_US]), "saving_us": saving})
    if not rows:
        return None
    saving = total / scope.ranks
    top = rows[0]
    formula = (f"per step, max(the penalty's host time {fmt_us(top['cpu_us'])}: its forward calls' wall, its "
               f"{top['backward_nodes']} backward calls and {top['accumulations']} extra gradient accumulations; "
               f"its GPU time {fmt_us(top['gpu_us'])}) (first step shown); summed over "
               f"{plural(len(rows), 'step')} = {fmt_us(saving)}")
    title = (f"Move the L2 penalty into the optimizer (weight_decay=): the loss squares and sums "
             f"{top['tensors']} of the {top['params']} parameter tensors one by one ({top['ops']}), "
             f"{top['kernels']} kernels from {top['launches']} launches per step with their backward "
             f"({fmt_us(top['gpu_us'])} of GPU time, {fmt_us(top['cpu_us'])} of host time as traced)")
    return suggestion("weight_decay", title, saving, scope, formula, rows)


def weight_decay_transform(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """The penalty's calls (patterns.l2_penalty_calls: forward, backward, extra accumulations) and
    their kernels removed, with the host gaps before them (the ops' Python and dispatch)."""
    p = r.patterns
    if p is None or not len(p.l2_penalty_calls) or not p.l2_penalty_calls.any():
        return None
    return remove_calls(p.l2_penalty_calls)


def grads_to_none(analysis: Analysis) -> Suggestion | None:
    """zero_grad ranges that write zeros into the gradients (patterns.zeroed_grads), in every headline
    step: the zeroing kernels and the in-place accumulations into those zeros that follow (what
    set_to_none=True does without). The what-if removes their calls and kernels. Silent below
    SILENT_BELOW_PCT."""
    scope = Scope.of(analysis)
    rows: list[dict[str, object]] = []
    total = 0.0
    for r, t, n in every_step_tables(analysis, "zeroed_grads", zg.ZG_STEP):
        gpu = float(t[zg.ZG_GPU_US].sum())
        total += gpu
        rows.append({"rank": r.rank, "op": str(t[zg.ZG_OP].iat[0]), "zeroed_per_step": float(t[zg.ZG_ZEROED].sum()) / n,
                     "adds_per_step": float(t[zg.ZG_ADDS].sum()) / n,
                     "zero_gpu_us_per_step": float(t[zg.ZG_ZERO_GPU_US].sum()) / n,
                     "add_gpu_us_per_step": float(t[zg.ZG_ADD_GPU_US].sum()) / n,
                     "calls_per_step": float(t[zg.ZG_CALLS].sum()) / n, "saving_us": gpu})
    if not rows:
        return None
    x = rows[0]
    zeroed, adds = round(float(str(x["zeroed_per_step"]))), round(float(str(x["adds_per_step"])))
    title = (f"Free the gradients instead of zeroing them (zero_grad(set_to_none=True), the default): {x['op']} writes "
             f"zeros into {zeroed} gradients per step ({fmt_us(float(str(x['zero_gpu_us_per_step'])))}) and backward "
             f"then adds {adds} new gradients into those zeros ({fmt_us(float(str(x['add_gpu_us_per_step'])))}), "
             "where it would keep them as they are")
    formula = ("Σ per step of the zeroing kernels under Optimizer.zero_grad and the kernels of the first in-place "
               "accumulations (AccumulateGrad → aten::add_) after it, one per zeroed gradient")
    return suggestion("grads_to_none", title, total / scope.ranks, scope, formula, rows, min_pct=SILENT_BELOW_PCT)


grads_to_none_transform = calls_gone("zeroed_grad_calls")  # the zeroing and the accumulations into the zeros gone
