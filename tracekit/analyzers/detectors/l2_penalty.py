"""An L2 penalty written into the loss over every parameter tensor (`loss = ce + wd * sum(p.pow(2).sum() for p in params)`): a square, a sum and an add per tensor in the forward, their backward nodes and one more gradient accumulation per tensor, where the optimizer's `weight_decay` does the same in its own step.

Per step, the parameters are the shapes of the step's `torch::autograd::AccumulateGrad` calls (one
per leaf tensor backward reaches, with its gradient's shape). The forward part is a run of one
thread's top-level calls (those that launch nothing are passed over; the optimizer's ranges end a
run) made of squares of a parameter-shaped tensor (SQUARES: `aten::pow` with exponent 2,
`aten::square`, a vector norm, `p * p`) and the scalar ops that sum them (COMPANIONS); any other
launching call ends it, and so does a square of a shape no parameter has (an activation: RMSNorm's
`pow`, LayerNorm's variance). A run counts when it squares ≥ MIN_TENSORS tensors, no shape more often
than the step's AccumulateGrad calls have it, and ends before a backward run of the step starts
(after the last one: a gradient norm, no penalty). The backward part is a run of one thread's
`autograd::engine::evaluate_function: X` calls after it, X a node of those ops (BACKWARD_NODES) whose
gradient inputs are scalars or parameter-shaped, with ≥ MIN_TENSORS square nodes (PowBackward0...);
AccumulateGrad calls inside it are passed over. Each parameter then gets two gradients, summed by an
`aten::add_` directly under the evaluate_function call of the node that delivers the second
(InputBuffer::accumulate): those of the penalty's shapes count too, at most one per penalised tensor.

One row per step with both parts (PENALTY_COLUMNS); per rank.runtime row, a call the penalty issued
(the forward run's, the backward run's and those accumulations')."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.foreach import OPTIMIZER_RANGE
from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.analyzers.detectors.toplevel import TopLevel
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

ACCUMULATE = "torch::autograd::AccumulateGrad"
EVALUATE = "autograd::engine::evaluate_function: "
# ops that square a tensor (the first input's shape); a norm's square follows as a scalar pow
SQUARES = frozenset({"aten::pow", "aten::square", "aten::mul", "aten::norm", "aten::linalg_vector_norm",
                     "aten::frobenius_norm"})
NORMS = frozenset({"aten::norm", "aten::linalg_vector_norm", "aten::frobenius_norm"})
# the scalar arithmetic between the squares: their sums, the running total, the scale, casts
COMPANIONS = frozenset({"aten::sum", "aten::add", "aten::add_", "aten::mul", "aten::mul_", "aten::pow",
                        "aten::square", "aten::to", "aten::_to_copy", "aten::copy_"})
SQUARE_NODES = frozenset({"PowBackward0", "NormBackward0", "NormBackward1", "NormBackward2",
                          "LinalgVectorNormBackward0", "MulBackward0"})
BACKWARD_NODES = SQUARE_NODES | {"SumBackward0", "AddBackward0", "MulBackward1", "ToCopyBackward0"}
BUFFER_ADDS = frozenset({"aten::add_", "aten::add"})
MIN_TENSORS = 16  # squares per run: fewer tensors are a few launches, below any rule's floor

# --- columns of Patterns.l2_penalty (one row per step) ---------------------------------------------
LP_STEP = "step"
LP_THREAD = "thread"  # the forward run's thread
LP_TS = "ts"  # the first forward run's first call
LP_END = "end"  # the last forward run's last call's end
LP_TENSORS = "tensors"  # parameter-shaped tensors squared in the forward runs
LP_PARAMS = "params"  # AccumulateGrad calls of the step (its parameter tensors)
LP_OPS = "ops"  # the forward runs' op names in order of first call, "pow → sum → add"
LP_FORWARD_LAUNCHES = "forward_launches"
LP_BACKWARD_NODES = "backward_nodes"  # evaluate_function calls in the backward runs
LP_BACKWARD_LAUNCHES = "backward_launches"  # theirs and the extra accumulations'
LP_ACCUMULATIONS = "accumulations"  # the second gradient's adds into the penalised tensors
LP_KERNELS = "kernels"  # GPU activities the penalty's calls launched
LP_GPU_US = "gpu_us"
LP_CPU_US = "cpu_us"  # the forward runs' wall + the backward calls' and accumulations' durations
PENALTY_COLUMNS = (LP_STEP, LP_THREAD, LP_TS, LP_END, LP_TENSORS, LP_PARAMS, LP_OPS, LP_FORWARD_LAUNCHES,
                   LP_BACKWARD_NODES, LP_BACKWARD_LAUNCHES, LP_ACCUMULATIONS, LP_KERNELS, LP_GPU_US, LP_CPU_US)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(PENALTY_COLUMNS))


@dataclass(frozen=True)
class L2Penalty:
    table: pd.DataFrame
    calls: np.ndarray  # per rank.runtime row: issued by the penalty (forward, backward, extra accumulation)


Shape = tuple[int, ...]


def _shape(v: object) -> Shape | None:
    if isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return tuple(int(x) for x in v)
    return None


def _exponent_two(concrete: object) -> bool:
    values = concrete if isinstance(concrete, list) else []
    try:
        return len(values) > 1 and float(str(values[1])) == 2.0
    except ValueError:
        return False


def _squared(rank: RankTrace, row: int, name: str) -> Shape | None:
    """The shape a SQUARES call squares (a tensor of ≥ 1 dimension), None when it squares none."""
    inputs = rank.op_inputs(row)
    dims = inputs.get(tables.OP_INPUT_DIMS) or []
    first = _shape(dims[0]) if dims else None
    if not first:
        return None
    if name == "aten::pow":
        return first if _exponent_two(inputs.get(tables.OP_CONCRETE_INPUTS)) else None
    if name == "aten::mul":  # p * p
        return first if len(dims) > 1 and _shape(dims[1]) == first else None
    if name in NORMS:  # the default order, or 2
        concrete = inputs.get(tables.OP_CONCRETE_INPUTS)
        order = str(concrete[1]) if isinstance(concrete, list) and len(concrete) > 1 else ""
        return first if order in ("", "2", "2.", "None") else None
    return first  # aten::square


def _tensor_shapes(rank: RankTrace, row: int) -> list[Shape]:
    dims = rank.op_inputs(row).get(tables.OP_INPUT_DIMS) or []
    return [s for s in (_shape(d) for d in dims) if s is not None]


def _ordered(rows: np.ndarray, ts: np.ndarray, tid: np.ndarray) -> list[tuple[object, np.ndarray]]:
    """`rows` per thread (first seen first), each in time order."""
    out = []
    for thread in pd.unique(tid[rows]):
        mine = rows[tid[rows] == thread]
        out.append((thread, mine[np.argsort(ts[mine], kind="stable")]))
    return out


def _forward_runs(rank: RankTrace, rows: np.ndarray, names: np.ndarray, launching: np.ndarray,
                  excluded: np.ndarray, params: Counter[Shape]) -> list[tuple[list[int], Counter[Shape]]]:
    """The runs of one thread's top-level `rows` (time order) that square parameter-shaped tensors:
    (the run's calls, the shapes it squared)."""
    runs: list[tuple[list[int], Counter[Shape]]] = []
    current: list[int] = []
    squared: Counter[Shape] = Counter()

    def close() -> None:
        nonlocal current, squared
        if sum(squared.values()) >= MIN_TENSORS and all(n <= params[s] for s, n in squared.items()):
            runs.append((current, squared))
        current, squared = [], Counter()

    for row in rows.tolist():
        if not launching[row] and not excluded[row]:
            continue  # a view, a detach: part of no run, ends none
        name = str(names[row])
        shape = _squared(rank, row, name) if name in SQUARES and not excluded[row] else None
        if shape is not None and shape in params:
            current.append(row)
            squared[shape] += 1
        elif current and shape is None and name in COMPANIONS and not excluded[row]:
            current.append(row)
        else:
            close()
    close()
    return runs


def _backward_runs(rank: RankTrace, rows: np.ndarray, names: np.ndarray, nodes: dict[int, int],
                   params: Counter[Shape]) -> list[list[int]]:
    """The runs of one thread's evaluate_function `rows` (time order) of the penalty's backward nodes."""
    runs: list[list[int]] = []
    current: list[int] = []
    count = 0
    for row in rows.tolist():
        node = str(names[row]).removeprefix(EVALUATE)
        if node == ACCUMULATE:
            continue
        child = nodes.get(row, -1)
        shapes = _tensor_shapes(rank, child) if child >= 0 else []
        if node in BACKWARD_NODES and all(not s or s in params for s in shapes):
            current.append(row)
            count += node in SQUARE_NODES
            continue
        if count >= MIN_TENSORS:
            runs.append(current)
        current, count = [], 0
    if count >= MIN_TENSORS:
        runs.append(current)
    return runs


def find_l2_penalty(rank: RankTrace, steps: StepsOf, top: TopLevel | None = None) -> L2Penalty:
    """The steps whose loss sums a square of every parameter tensor (module docstring)."""
    ops, rt, gpu = rank.ops, rank.runtime, rank.gpu
    none = L2Penalty(empty(), np.zeros(len(rt), dtype=bool))
    if not len(ops) or not len(rt):
        return none
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    is_acc = names == ACCUMULATE
    if not is_acc.any() or not np.isin(names, list(SQUARES)).any():
        return none
    top = top if top is not None else TopLevel.of(rank)
    depth = ops[tables.OP_DEPTH].to_numpy()
    parent = ops[tables.OP_PARENT].to_numpy(dtype=np.int64)
    ts, tid = ops[tables.OP_TS].to_numpy(dtype=float), ops[tables.OP_TID].to_numpy()
    ends, durs = ops[tables.OP_END].to_numpy(dtype=float), ops[tables.OP_DUR].to_numpy(dtype=float)
    step_of = steps.ops
    evaluate = pd.Series(names).astype(str).str.startswith(EVALUATE).to_numpy()
    parent_names = np.where(parent >= 0, names[np.maximum(parent, 0)], "")
    # the node call under each evaluate_function call (its gradient inputs' shapes)
    kids = np.flatnonzero((parent >= 0) & evaluate[np.maximum(parent, 0)])
    nodes = {int(parent[k]): int(k) for k in kids
             if str(names[k]) == str(parent_names[k]).removeprefix(EVALUATE)}
    an = rank.annotations
    an_names = an[tables.AN_NAME].astype(str)
    ranges = an[an_names.str.startswith(OPTIMIZER_RANGE).to_numpy() & ~an[tables.AN_GPU].to_numpy(dtype=bool)]
    excluded = np.zeros(len(ops), dtype=bool)
    for start, end, thread in zip(ranges[tables.AN_TS].to_numpy(dtype=float), ranges[tables.AN_END].to_numpy(dtype=float),
                                  ranges[tables.AN_TID].to_numpy(), strict=True):
        excluded |= (tid == thread) & (ts >= start) & (ts <= end) & (depth == 0)
    launching = top.launches > 0
    rt_top, rt_op = top.rt_top, rt[tables.RT_OP].to_numpy(dtype=np.int64)
    gpu_launch = gpu[tables.GPU_LAUNCH].to_numpy(dtype=np.int64)
    gpu_dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    calls = np.zeros(len(rt), dtype=bool)
    recs = []
    for step in np.unique(step_of[is_acc]).tolist():
        if step < 0:
            continue
        in_step = step_of == step
        params = Counter(s for r in np.flatnonzero(in_step & is_acc).tolist()
                         for s in _tensor_shapes(rank, r)[:1])
        bwd = [run for _, rows in _ordered(np.flatnonzero(in_step & (depth == 0) & evaluate), ts, tid)
               for run in _backward_runs(rank, rows, names, nodes, params)]
        if not bwd:
            continue
        last_bwd = max(ts[run[0]] for run in bwd)
        fwd: list[tuple[list[int], Counter[Shape]]] = []
        for _, rows in _ordered(np.flatnonzero(in_step & (depth == 0) & ~evaluate), ts, tid):
            # a run after the step's last penalty backward is differentiated by none (a gradient norm)
            fwd += [(run, sq) for run, sq in _forward_runs(rank, rows, names, launching, excluded, params)
                    if ends[run[-1]] <= last_bwd]
        if not fwd:
            continue
        after = max(ends[run[-1]] for run, _ in fwd)
        bwd = [run for run in bwd if ts[run[0]] > min(ends[r[-1]] for r, _ in fwd)]
        squared: Counter[Shape] = sum((sq for _, sq in fwd), Counter())
        fwd_rows = [r for run, _ in fwd for r in run]
        bwd_rows = [r for run in bwd for r in run]
        in_bwd = set(bwd_rows)
        # the second gradient's adds into the penalised tensors, outside the backward runs
        budget = Counter(squared)
        adds = []
        for r in np.flatnonzero(in_step & np.isin(names, list(BUFFER_ADDS)) & (parent >= 0)).tolist():
            if not evaluate[parent[r]] or nodes.get(int(parent[r])) == r or int(parent[r]) in in_bwd:
                continue
            shapes = _tensor_shapes(rank, r)
            if len(shapes) >= 2 and shapes[0] == shapes[1] and budget[shapes[0]] > 0:
                budget[shapes[0]] -= 1
                adds.append(r)
        fwd_calls = np.isin(rt_top, fwd_rows)
        bwd_calls = np.isin(rt_top, bwd_rows) | np.isin(rt_op, adds)
        mine = fwd_calls | bwd_calls
        calls |= mine
        on_gpu = (gpu_launch >= 0) & mine[np.maximum(gpu_launch, 0)]
        kinds = np.isin(rt[tables.RT_KIND].to_numpy(dtype=object), tables.LAUNCH_KINDS)
        recs.append({
            LP_STEP: int(step), LP_THREAD: int(tid[fwd[0][0][0]]), LP_TS: float(ts[fwd[0][0][0]]), LP_END: float(after),
            LP_TENSORS: int(sum(squared.values())), LP_PARAMS: int((in_step & is_acc).sum()),
            LP_OPS: " → ".join(dict.fromkeys(str(names[r]).removeprefix("aten::") for r in fwd_rows)),
            LP_FORWARD_LAUNCHES: int((fwd_calls & kinds).sum()), LP_BACKWARD_NODES: len(bwd_rows),
            LP_BACKWARD_LAUNCHES: int((bwd_calls & kinds).sum()), LP_ACCUMULATIONS: len(adds),
            LP_KERNELS: int(on_gpu.sum()), LP_GPU_US: float(gpu_dur[on_gpu].sum()),
            LP_CPU_US: float(sum(ends[run[-1]] - ts[run[0]] for run, _ in fwd) + durs[bwd_rows].sum() + durs[adds].sum()),
        })
    if not recs:
        return none
    return L2Penalty(pd.DataFrame(recs, columns=list(PENALTY_COLUMNS)), calls)
