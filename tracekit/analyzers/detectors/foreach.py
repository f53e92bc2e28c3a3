"""Per-tensor Python loops outside the optimizer: the same small ops called once per tensor (a hand-written gradient clip, an EMA of the weights), each call its own launch, that one torch._foreach_* op per list would do."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.analyzers.detectors.toplevel import TopLevel
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

# aten op -> the multi-tensor op that does it for a list of tensors in a few launches (torch._foreach_*,
# torch/_foreach docs; torch.nn.utils.clip_grad_norm_(foreach=True) uses _foreach_norm and _foreach_mul_).
FOREACH_OPS: dict[str, str] = {
    "aten::linalg_vector_norm": "torch._foreach_norm", "aten::norm": "torch._foreach_norm",
    "aten::mul_": "torch._foreach_mul_", "aten::add_": "torch._foreach_add_", "aten::sub_": "torch._foreach_sub_",
    "aten::div_": "torch._foreach_div_", "aten::lerp_": "torch._foreach_lerp_", "aten::copy_": "torch._foreach_copy_",
    "aten::addcmul_": "torch._foreach_addcmul_", "aten::addcdiv_": "torch._foreach_addcdiv_",
    "aten::zero_": "torch._foreach_zero_", "aten::sqrt_": "torch._foreach_sqrt_", "aten::abs_": "torch._foreach_abs_",
    "aten::neg_": "torch._foreach_neg_", "aten::exp_": "torch._foreach_exp_", "aten::clamp_min_": "torch._foreach_clamp_min_",
    "aten::clamp_max_": "torch._foreach_clamp_max_", "aten::pow_": "torch._foreach_pow_",
    "aten::maximum": "torch._foreach_maximum", "aten::minimum": "torch._foreach_minimum",
    # out-of-place forms (a hand-written optimizer's `v.sqrt() / c`: a temporary per tensor, one op per list
    # with the torch._foreach_* form); alone between other ops, as in a forward, they make no run
    "aten::sqrt": "torch._foreach_sqrt", "aten::div": "torch._foreach_div", "aten::mul": "torch._foreach_mul",
    "aten::add": "torch._foreach_add", "aten::sub": "torch._foreach_sub", "aten::addcmul": "torch._foreach_addcmul",
    "aten::addcdiv": "torch._foreach_addcdiv",
}
# Loops whose ops name what they are (the run's ops in order, without aten::) -> the one call that does
# them: a hand-written gradient clip (torch.nn.utils.clip_grad_norm_'s own foreach path: _foreach_norm,
# then _foreach_mul_ by a coefficient kept on the GPU) and a weight EMA (e.mul_(d).add_(p, alpha=1 - d)
# is e.lerp_(p, 1 - d): torch._foreach_lerp_; torch.optim.swa_utils.AveragedModel uses it).
KNOWN_LOOPS: dict[str, str] = {
    "linalg_vector_norm → mul_": "torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)",
    "norm → mul_": "torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)",
    "mul_ → add_": "torch._foreach_lerp_(ema, params, 1 - decay)",
    "lerp_": "torch._foreach_lerp_(ema, params, 1 - decay)",
}
# Loops that are a hand-written optimizer update: every op of the set in the run (any order, others
# besides) -> the torch.optim class that does it in a few multi-tensor launches. Adam/AdamW: the second
# moment by addcmul_ (v·β2 + (1 − β2)·g²) and the update by addcdiv_ (p − lr·m / (√v + ε)), as
# torch/optim/adam.py `_single_tensor_adam` writes them.
OPTIMIZER_LOOPS: tuple[tuple[frozenset[str], str], ...] = (
    (frozenset({"addcmul_", "addcdiv_"}),
     "torch.optim.AdamW(params, foreach=True) (or fused=True): the hand-written Adam/AdamW loop as multi-tensor kernels"),
)
# Syncs a loop body may hold (`.item()` of each tensor's norm, `if norm != 0:` on a tensor): they stay
# inside the run and are counted.
LOOP_SYNC_OPS = frozenset({"aten::item", "aten::_local_scalar_dense", "aten::cpu", "aten::is_nonzero"})
# Comparisons a loop body makes of a per-tensor value for its Python `if` / `min` (apex LARC's
# `if param_norm != 0 and grad_norm != 0`, `min(adaptive_lr, 1)`; heldout7 lars_loop): inside a run
# they join it, and the rewrite decides on the stacked values with torch.where / clamp instead.
LOOP_DECISION_OPS = frozenset({"aten::ne", "aten::eq", "aten::gt", "aten::lt", "aten::ge", "aten::le"})
DECIDE_ON_GPU = "per-tensor decisions by torch.where / torch.clamp on torch.stack(torch._foreach_norm(...))"
# A loop: at least this many calls of one of its ops in one run (one per tensor). Below, a few tensors
# save a few launches: the rules' 2 % floor would silence them anyway.
MIN_TENSORS = 16
# PyTorch's multi_tensor_apply (aten/src/ATen/native/cuda/MultiTensorApply.cuh): a launch takes at most
# depth_to_max_tensors[depth - 1] tensors per list and depth_to_max_blocks (320) chunks of kChunkSize
# (65536) elements; depth = the tensor lists the op reads and writes.
MAX_TENSORS = (110, 64, 48, 36, 30)
MAX_BLOCKS = 320
CHUNK_ELEMENTS = 65536
# Ranges that are the optimizer's own loop (fused_optimizer's rule), not the user's.
OPTIMIZER_RANGE = ("Optimizer.step#", "Optimizer.zero_grad#")

# --- columns of Patterns.foreach_loops (one row per run of per-tensor calls in a step) ----------------
FL_STEP = "step"
FL_THREAD = "thread"
FL_TS = "ts"
FL_END = "end"
FL_OPS = "ops"  # the run's op names in order of first call, "a → b"
FL_TENSORS = "tensors"  # the loop's iterations: one per tensor (_iterations)
FL_CALLS = "calls"  # per-tensor op calls
FL_LAUNCHES = "launches"  # kernel launch calls under them
FL_SYNCS = "syncs"  # sync calls inside the run (`.item()` per tensor)
FL_FOREACH_LAUNCHES = "foreach_launches"  # multi-tensor launches doing the same work (MAX_TENSORS, MAX_BLOCKS)
FL_GPU_US = "gpu_us"  # GPU time of the activities the run launched
FL_REPLACE = "replace"  # the torch._foreach_* ops that replace it, "a, b"
FOREACH_COLUMNS = (FL_STEP, FL_THREAD, FL_TS, FL_END, FL_OPS, FL_TENSORS, FL_CALLS, FL_LAUNCHES, FL_SYNCS,
                   FL_FOREACH_LAUNCHES, FL_GPU_US, FL_REPLACE)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(FOREACH_COLUMNS))


def _in_ranges(rank: RankTrace, ts: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """Per (ts, tid): inside an optimizer step / zero_grad range on its thread."""
    an = rank.annotations
    names = an[tables.AN_NAME].astype(str)
    sel = an[names.str.startswith(OPTIMIZER_RANGE).to_numpy() & ~an[tables.AN_GPU].to_numpy(dtype=bool)]
    out = np.zeros(len(ts), dtype=bool)
    for start, end, thread in zip(sel[tables.AN_TS].to_numpy(dtype=float), sel[tables.AN_END].to_numpy(dtype=float),
                                  sel[tables.AN_TID].to_numpy(), strict=True):
        out |= (tid == thread) & (ts >= start) & (ts <= end)
    return out


def _tensor_inputs(rank: RankTrace, row: int) -> tuple[int, int]:
    """(tensor inputs, elements of the first) of an op call from its recorded shapes; (1, 0) unknown."""
    dims = rank.op_inputs(row).get(tables.OP_INPUT_DIMS) or []
    tensors = [d for d in dims if isinstance(d, list) and d and all(isinstance(x, int) for x in d)]
    return max(len(tensors), 1), (math.prod(tensors[0]) if tensors else 0)


def _foreach_launches(rank: RankTrace, rows: list[int]) -> int:
    """Multi-tensor launches of one op over the tensors of `rows` (its per-tensor calls)."""
    depth, chunks = 1, 0
    for row in rows:
        d, elements = _tensor_inputs(rank, row)
        depth = max(depth, d)
        chunks += max(math.ceil(elements / CHUNK_ELEMENTS), 1)
    per_launch = MAX_TENSORS[min(depth, len(MAX_TENSORS)) - 1]
    return max(math.ceil(len(rows) / per_launch), math.ceil(chunks / MAX_BLOCKS), 1)


def _replacement(ops: list[str], foreach_ops: list[str]) -> str:
    """What replaces a run of `ops` (names without aten::, in order of first call): a known loop's one
    call, an optimizer's class (OPTIMIZER_LOOPS), else the multi-tensor ops one by one."""
    known = KNOWN_LOOPS.get(" → ".join(ops))
    if known:
        return known
    found = next((what for need, what in OPTIMIZER_LOOPS if need <= set(ops)), None)
    return found or ", ".join(dict.fromkeys(foreach_ops))


def optimizer_rows(rank: RankTrace, loops: pd.DataFrame, call_loop: np.ndarray) -> np.ndarray:
    """Per rank.gpu row: launched by a run that a CUDA graph of the model leaves out, like the kernels of
    an Optimizer.step range: a hand-written optimizer update (OPTIMIZER_LOOPS), or any run that reads
    values back per tensor (FL_SYNCS > 0: apex LARC's `if norm != 0`, a clip's `.item()`; a sync cannot be
    captured, so such a loop stays eager until its decisions move to the GPU: heldout7 lars_loop)."""
    gpu_launch = rank.gpu[tables.GPU_LAUNCH].to_numpy(dtype=np.int64)
    picked = {what for _, what in OPTIMIZER_LOOPS}
    left_out = (loops[FL_REPLACE].isin(picked) | (loops[FL_SYNCS] > 0)).to_numpy() if len(loops) else np.zeros(0, dtype=bool)
    runs = np.flatnonzero(left_out)
    if not len(runs) or not len(call_loop):
        return np.zeros(len(gpu_launch), dtype=bool)
    mine = np.isin(call_loop, runs)
    return (gpu_launch >= 0) & mine[np.clip(gpu_launch, 0, len(mine) - 1)]


def _iterations(run: list[str], counts: list[int]) -> int:
    """The iterations of a loop whose calls are `run` (op names in order; `counts`: the calls of each of
    its per-tensor ops). Where the body interleaves ops (`for p in params: norm(p), norm(p.grad), …`), the
    blocks of consecutive calls of its first op, at most the calls of its least called op (an op that
    recurs in the body, as a hand-written Adam's `mul_`, starts more than one block an iteration); else
    (one list comprehension per op: `[norm(g) for g in grads]`, then `[g.mul_(c) for g in grads]`) the
    calls of its most called op."""
    first = run[0]
    blocks = sum(1 for i, name in enumerate(run) if name == first and (i == 0 or run[i - 1] != first))
    return min(blocks, min(counts)) if blocks > 1 else max(counts)


def _trimmed(run: list[int], names: np.ndarray) -> list[int]:
    """`run` without the calls at its ends whose op the run calls fewer than MIN_TENSORS times: a
    neighbouring statement's op (a loss accumulated by `total += loss` right after a weight EMA's
    loop, heldout14 effnet_ema_loop), not a per-tensor call, that would otherwise cap the loop's
    iterations at its one call."""
    counts: dict[str, int] = {}
    for row in run:
        counts[str(names[row])] = counts.get(str(names[row]), 0) + 1
    lo, hi = 0, len(run)
    while lo < hi and counts[str(names[run[lo]])] < MIN_TENSORS:
        lo += 1
    while hi > lo and counts[str(names[run[hi - 1]])] < MIN_TENSORS:
        hi -= 1
    return run[lo:hi]


def _by_thread_then_time(ts: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """The order of rows by thread id, then time; thread ids that do not compare (a string and a
    number, a null: a hostile trace) are taken in order of first appearance instead."""
    try:
        return np.lexsort((ts, tid))
    except TypeError:
        return np.lexsort((ts, pd.factorize(tid, use_na_sentinel=False)[0]))


def find_foreach_loops(rank: RankTrace, steps: StepsOf, top: TopLevel | None = None) -> tuple[pd.DataFrame, np.ndarray]:
    """One row per run of per-tensor calls (FOREACH_COLUMNS) and, per rank.runtime row, the index of
    the run whose op issued it (-1: none). A run is a thread's consecutive top-level FOREACH_OPS calls
    that launch kernels, with the LOOP_SYNC_OPS between them; calls that launch nothing (a detach, a
    view) are passed over, any other call ends it, and so do the step's end and the optimizer's ranges. `top` is
    TopLevel.of(rank), computed here when not given."""
    ops, rt, gpu = rank.ops, rank.runtime, rank.gpu
    call_loop = np.full(len(rt), -1, dtype=np.int64)
    if not len(ops) or not len(rt):
        return empty(), call_loop
    top = top if top is not None else TopLevel.of(rank)
    rt_top, launches, syncs = top.rt_top, top.launches, top.syncs
    depth0 = np.flatnonzero(ops[tables.OP_DEPTH].to_numpy() == 0)
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    ts, tid = ops[tables.OP_TS].to_numpy(dtype=float), ops[tables.OP_TID].to_numpy()
    depth0 = depth0[_by_thread_then_time(ts[depth0], tid[depth0])] if len(depth0) else depth0
    excluded = _in_ranges(rank, ts[depth0], tid[depth0])
    runs: list[list[int]] = []
    current: list[int] = []
    # a call that launches nothing (and is not excluded) is part of no run and ends none: passed over
    seen = excluded | (launches[depth0] != 0) | (syncs[depth0] != 0)
    rows = depth0[seen]
    thread = step = None  # of the current run's first call
    for row, out, name, launching, row_tid, row_step in zip(
            rows.tolist(), excluded[seen].tolist(), names[rows].tolist(), (launches[rows] > 0).tolist(),
            tid[rows].tolist(), steps.ops[rows].tolist(), strict=True):
        joins = not out and ((name in FOREACH_OPS and launching)
                             or ((name in LOOP_SYNC_OPS or name in LOOP_DECISION_OPS) and bool(current)))
        if current and (not joins or row_tid != thread or row_step != step):
            runs.append(current)
            current = []
        if joins and (current or name in FOREACH_OPS):  # a per-tensor op, or a sync/decision inside a run
            if not current:  # (a sync or decision whose run just ended, at a new thread or step, starts none)
                thread, step = row_tid, row_step
            current.append(row)
    if current:
        runs.append(current)
    gpu_launch = gpu[tables.GPU_LAUNCH].to_numpy(dtype=np.int64)
    gpu_dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    ends = ops[tables.OP_END].to_numpy(dtype=float)
    out_rows: list[dict[str, object]] = []
    for run in (_trimmed(r, names) for r in runs):
        if not run:
            continue
        by_name: dict[str, list[int]] = {}
        for row in run:
            if names[row] in FOREACH_OPS:
                by_name.setdefault(str(names[row]), []).append(row)
        tensors = _iterations([str(names[row]) for row in run], [len(v) for v in by_name.values()])
        if tensors < MIN_TENSORS:
            continue
        index = len(out_rows)
        mine = np.isin(rt_top, run)
        call_loop[mine] = index
        on_gpu = (gpu_launch >= 0) & mine[np.maximum(gpu_launch, 0)]
        out_rows.append({
            FL_STEP: int(steps.ops[run[0]]), FL_THREAD: int(tid[run[0]]), FL_TS: float(ts[run[0]]),
            FL_END: float(ends[run[-1]]), FL_OPS: " → ".join(n.removeprefix("aten::") for n in by_name),
            FL_TENSORS: tensors, FL_CALLS: sum(len(v) for v in by_name.values()),
            FL_LAUNCHES: int(launches[run].sum()), FL_SYNCS: int(syncs[run].sum()),
            FL_FOREACH_LAUNCHES: sum(_foreach_launches(rank, v) for v in by_name.values()),
            FL_GPU_US: float(gpu_dur[on_gpu].sum()),
            FL_REPLACE: _replacement([n.removeprefix("aten::") for n in by_name], [FOREACH_OPS[n] for n in by_name])
            + (f"; {DECIDE_ON_GPU}" if any(names[row] in LOOP_DECISION_OPS for row in run) else ""),
        })
    return pd.DataFrame(out_rows, columns=list(FOREACH_COLUMNS)), call_loop
