"""Time by aten op, by nn.Module and by source line: CPU total/self time, GPU time of the kernels launched, launches, FLOPs."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analyzers.costs.attribution import FLOPS, SOURCE, SOURCE_ESTIMATE, KernelCosts
from tracekit.analyzers.step_plan import StepPlan
from tracekit.analyzers.windows import SCOPE_INFERRED, StepWindows
from tracekit.trace import tables
from tracekit.trace.link import step_of
from tracekit.trace.model import RankTrace
from tracekit.trace.nesting import depth_of, enclosing, group_codes

BY_OP, BY_MODULE, BY_LINE = "op", "module", "line"
GROUPINGS = (BY_OP, BY_MODULE, BY_LINE)
MODULE_PREFIX = "nn.Module: "
FRAME = re.compile(r"^(?P<file>[^()<>]+\.py)\((?P<line>\d+)\): (?P<func>.+)$")  # 'model.py(88): forward'
# frames of library code (PyTorch, its dependencies, the standard library): a source line is the innermost
# frame outside them, i.e. the user's code that called into the library
LIBRARY = re.compile(r"(^|/)(torch|torchvision|torchaudio|transformers|accelerate|triton|numpy|tracekit|"
                     r"site-packages|dist-packages|python3\.\d+|importlib|threading\.py|runpy\.py|"
                     r"contextlib\.py|functools\.py|dataclasses\.py|inspect\.py|typing\.py|tqdm)(/|\(|$)")
UNPLACED = ""  # OperatorView.kernels key of GPU time launched under no key of the grouping
INSTANCE = re.compile(r"_\d+$")  # the instance number the profiler appends to a module's class name
MAX_ROWS = 200  # rows kept per grouping (largest GPU time, then CPU time, first)
CLIMB_PASSES = 64  # levels climbed in vectorised passes before _under_same_key walks the forest instead


@dataclass(frozen=True)
class OperatorRow:
    """One op, module or source line over the headline steps (times summed over them)."""

    key: str
    calls: int  # occurrences (ops or Python frames) in the headline steps
    cpu_total_us: float  # wall time of those occurrences (nested occurrences of the same key counted once)
    cpu_self_us: float  # less the time of the ops / frames of the same kind inside them
    gpu_us: float  # GPU time of the kernels, copies and memsets launched inside it
    launches: int  # GPU activities launched inside it
    flops: float | None  # estimated FLOPs of those activities (None: none known)
    estimated: bool = False  # some of them from the kernels' names and grids (costs.estimates)

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "calls": self.calls, "cpu_total_us": self.cpu_total_us,
                "cpu_self_us": self.cpu_self_us, "gpu_us": self.gpu_us, "launches": self.launches,
                "flops": self.flops, **({"estimated": True} if self.estimated else {})}


@dataclass(frozen=True)
class OperatorView:
    """The rows of one grouping, with how much of the GPU time they explain."""

    by: str  # BY_OP | BY_MODULE | BY_LINE
    rows: tuple[OperatorRow, ...]  # largest GPU time first, then CPU total (at most MAX_ROWS)
    gpu_total_us: float  # GPU time of the headline steps
    attributed_gpu_us: float  # of it, launched inside some row's key (innermost one)
    missing: str = ""  # why there are no rows: what the trace lacks ('' when it has rows)
    # (kernel name, innermost key it was launched under, GPU µs): where each kernel name's time comes from;
    # key UNPLACED: launched under no key (backward on the autograd thread, no user frame around it)
    kernels: tuple[tuple[str, str, float], ...] = ()
    launching_ops: tuple[tuple[str, str, float], ...] = ()  # the same by the op that launched them

    @property
    def attributed_share(self) -> float:
        return self.attributed_gpu_us / self.gpu_total_us if self.gpu_total_us > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"by": self.by, "gpu_total_us": self.gpu_total_us, "attributed_gpu_us": self.attributed_gpu_us,
                "missing": self.missing, "rows": [r.to_dict() for r in self.rows]}


def _innermost(ts: np.ndarray, end: np.ndarray, thread: np.ndarray, q_ts: np.ndarray, q_thread: np.ndarray) -> np.ndarray:
    """For each query (time, thread), the index of the innermost interval on that thread containing it
    (-1: none); intervals nest on each thread, given sorted by start (longer first at equal starts)."""
    out = np.full(len(q_ts), -1, dtype=np.int64)
    by_thread: dict[object, list[int]] = defaultdict(list)
    for i, t in enumerate(thread.tolist()):
        by_thread[t].append(i)
    queries: dict[object, list[int]] = defaultdict(list)
    for j, t in enumerate(q_thread.tolist()):
        queries[t].append(j)
    ts_, end_, q_ts_ = ts.tolist(), end.tolist(), q_ts.tolist()
    for t, qs in queries.items():
        rows = by_thread.get(t)
        if not rows:
            continue
        qs.sort(key=q_ts_.__getitem__)
        stack: list[int] = []
        k = 0
        for j in qs:
            x = q_ts_[j]
            while k < len(rows) and ts_[rows[k]] <= x:
                while stack and end_[stack[-1]] < ts_[rows[k]]:
                    stack.pop()
                stack.append(rows[k])
                k += 1
            while stack and end_[stack[-1]] < x:
                stack.pop()
            out[j] = stack[-1] if stack else -1
    return out


def _parents(ts: np.ndarray, end: np.ndarray, thread: np.ndarray) -> np.ndarray:
    """Enclosing interval of each (-1: top level), as one stack sweep per thread finds it (the sweep
    pops the intervals that ended before the next start); vectorised (trace.nesting) where starts are
    in order on each thread."""
    found = enclosing(ts, end, group_codes(thread))
    return found if found is not None else _parents_sweep(ts, end, thread)


def _parents_sweep(ts: np.ndarray, end: np.ndarray, thread: np.ndarray) -> np.ndarray:
    """_parents by the stack sweep itself."""
    out = [-1] * len(ts)
    stacks: dict[object, list[int]] = defaultdict(list)
    ts_, end_ = ts.tolist(), end.tolist()
    for i, t in enumerate(thread.tolist()):
        stack = stacks[t]
        x = ts_[i]
        while stack and end_[stack[-1]] < x:
            stack.pop()
        if stack:
            out[i] = stack[-1]
        stack.append(i)
    return np.array(out, dtype=np.int64)


def _under_same_key(codes: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Per interval: an enclosing interval has the same key code (climbing all intervals one level per
    pass, each until it finds its key or the top); where that takes more than CLIMB_PASSES passes (a
    deep chain of distinct keys: one pass per level), one walk of the whole forest instead."""
    out = np.zeros(len(parent), dtype=bool)
    rows = np.flatnonzero(parent >= 0)
    up = parent[rows]
    for _ in range(CLIMB_PASSES):
        if not len(rows):
            return out
        hit = codes[up] == codes[rows]
        out[rows[hit]] = True
        up = parent[up[~hit]]
        rows = rows[~hit]
        more = up >= 0
        rows, up = rows[more], up[more]
    return out if not len(rows) else _under_same_key_walk(codes, parent)


def _under_same_key_walk(codes: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """_under_same_key by one depth-first walk of the forest that counts each key on the path from the
    root down to the interval: linear in the intervals whatever the depth."""
    n = len(parent)
    order = np.argsort(parent, kind="stable")  # children grouped by parent, in row order
    first = np.searchsorted(parent[order], np.arange(n), side="left").tolist()
    last = np.searchsorted(parent[order], np.arange(n), side="right").tolist()
    kids, code = order.tolist(), codes.tolist()
    on_path: defaultdict[int, int] = defaultdict(int)  # per key code (-1 included): intervals on the path
    out = [False] * n
    todo = [(int(r), False) for r in np.flatnonzero(parent < 0)[::-1]]
    while todo:
        node, leaving = todo.pop()
        c = code[node]
        if leaving:
            on_path[c] -= 1
            continue
        out[node] = on_path[c] > 0
        on_path[c] += 1
        todo.append((node, True))
        todo.extend((child, False) for child in reversed(kids[first[node]:last[node]]))
    return np.array(out, dtype=bool)


def _sum_up(parent: np.ndarray, depth: np.ndarray, columns: Sequence[np.ndarray]) -> None:
    """Add every interval's values to its parent's, deepest first, in place: the same additions in the
    same order as one pass from the last interval to the first (children come after their parents)."""
    order = np.lexsort((-np.arange(len(parent)), -depth))  # deepest level first, later rows first within it
    levels = depth[order]
    bounds = np.flatnonzero(np.diff(levels)) + 1
    for chunk in np.split(order, bounds):
        chunk = chunk[parent[chunk] >= 0]
        if not len(chunk):
            continue
        to = parent[chunk]
        for col in columns:
            np.add.at(col, to, col[chunk])  # unbuffered: in `chunk` order, repeated parents included


def _rows(keys: Sequence[str], ts: np.ndarray, end: np.ndarray, thread: np.ndarray, in_steps: np.ndarray,
          gpu_of: np.ndarray, gpu_us: np.ndarray, gpu_flops: np.ndarray, inclusive: bool,
          gpu_est: np.ndarray | None = None) -> tuple[list[OperatorRow], float]:
    """Rows of the intervals `keys` (per interval) from the GPU activities each launched (`gpu_of`: the
    innermost interval of each activity, -1 none): inclusive gives an activity to every enclosing key."""
    parent = _parents(ts, end, thread)
    dur = end - ts
    child = np.zeros(len(ts))
    np.add.at(child, parent[parent >= 0], dur[parent >= 0])
    self_us = np.maximum(dur - child, 0.0)
    codes, names = pd.factorize(np.array(keys, dtype=object), sort=False)
    codes = codes.astype(np.int64)
    k = len(names)
    # per key, summed in interval order (bincount adds sequentially, like a loop over the rows)
    picked = np.flatnonzero(in_steps)
    pc = codes[picked]
    pp = parent[picked]
    nested = (pp >= 0) & (codes[np.maximum(pp, 0)] == pc)  # a nested occurrence of the same key is inside the outer one
    calls = np.bincount(pc, minlength=k)
    cpu_total = np.bincount(pc[~nested], weights=dur[picked][~nested], minlength=k)
    cpu_self = np.bincount(pc, weights=self_us[picked], minlength=k)
    # each activity's time, count and FLOPs on the interval that launched it, then (inclusive) summed up
    # the tree
    n = len(ts)
    own = np.flatnonzero(gpu_of >= 0)
    owner = gpu_of[own].astype(np.int64)
    attributed = float(sum(gpu_us[own].tolist()))  # in activity order, as the total it is compared with
    sub_us, sub_n = np.zeros(n), np.zeros(n, dtype=np.int64)
    sub_fl, sub_fn = np.zeros(n), np.zeros(n, dtype=np.int64)
    np.add.at(sub_us, owner, gpu_us[own])
    np.add.at(sub_n, owner, 1)
    fl = gpu_flops[own]
    known = fl == fl
    np.add.at(sub_fl, owner[known], fl[known])
    np.add.at(sub_fn, owner[known], 1)
    sub_est = np.zeros(n, dtype=np.int64)
    if gpu_est is not None:
        np.add.at(sub_est, owner, gpu_est[own])
    counted = np.ones(n, dtype=bool)
    if inclusive:
        _sum_up(parent, depth_of(parent), (sub_us, sub_n, sub_fl, sub_fn) + ((sub_est,) if gpu_est is not None else ()))
        counted = ~_under_same_key(codes, parent)  # an activity counts once per key on its ancestor chain
    got = np.flatnonzero(counted & (sub_n > 0))
    gc = codes[got]
    gpu_total = np.bincount(gc, weights=sub_us[got], minlength=k)
    launches = np.zeros(k, dtype=np.int64)
    np.add.at(launches, gc, sub_n[got])
    flops = np.bincount(gc, weights=sub_fl[got], minlength=k)
    known_n = np.zeros(k, dtype=np.int64)
    np.add.at(known_n, gc, sub_fn[got])
    est_n = np.bincount(gc, weights=sub_est[got], minlength=k)
    present = (calls > 0) | (np.bincount(gc, minlength=k) > 0)
    rows = [OperatorRow(str(names[c]), int(calls[c]), float(cpu_total[c]), float(cpu_self[c]), float(gpu_total[c]),
                        int(launches[c]), float(flops[c]) if known_n[c] else None, bool(est_n[c] > 0))
            for c in np.flatnonzero(present).tolist()]
    rows.sort(key=lambda r: (-r.gpu_us, -r.cpu_total_us, r.key))
    return rows[:MAX_ROWS], attributed


def where_launched(views: Sequence[OperatorView], kernels: Sequence[str], ops: Sequence[str] = (),
                   groupings: Sequence[str] = (BY_LINE, BY_MODULE)) -> tuple[str, float] | None:
    """(the source line, else the module, that launched most of the GPU time of `kernels` (by name) or
    of the kernels the `ops` launched, its share of that time) from the first of `groupings` that holds
    them; None when the trace has neither or they hold none of them."""
    wanted, wanted_ops = set(kernels), set(ops) - {""}
    for by in groupings:
        view = next((v for v in views if v.by == by), None)
        if view is None or not view.kernels:
            continue
        per: dict[str, float] = defaultdict(float)
        pairs = view.kernels if wanted else view.launching_ops
        for name, key, us in pairs:
            if name in (wanted or wanted_ops):
                per[INSTANCE.sub("", key) if by == BY_MODULE else key] += us  # modules by class: Linear_3 -> Linear
        total = sum(per.values())  # the unplaced time too: the share is of all these kernels' time
        placed = [k for k in per if k != UNPLACED]
        if total > 0 and placed:
            key = max(placed, key=lambda k: per[k])
            return key, per[key] / total
    return None


def source_line(name: str) -> str | None:
    """'model.py:88 forward' for a frame of user code ('model.py(88): forward'), None for library frames."""
    m = FRAME.match(name)
    if m is None or LIBRARY.search(m.group("file")):
        return None
    return f"{m.group('file')}:{m.group('line')} {m.group('func')}"


def module_name(name: str) -> str | None:
    """'BertSelfAttention_0' for 'nn.Module: BertSelfAttention_0', else None."""
    return name[len(MODULE_PREFIX):] if name.startswith(MODULE_PREFIX) else None


def operator_views(rank: RankTrace, plan: StepPlan | None = None, costs: KernelCosts | None = None
                   ) -> tuple[OperatorView, ...]:
    """The op, module and line groupings of `rank` over the steps `plan` selects (every row without a
    plan). Ops: aten ops and other CPU ops, each kernel given to the op that launched it and the ops
    around it; modules and lines need python_function events (with_stack=True / nn.Module names)."""
    gpu, ops, rt = rank.gpu, rank.ops, rank.runtime
    gpu_rows = plan.gpu_rows if plan is not None else np.ones(len(gpu), dtype=bool)
    gpu_us = np.where(gpu_rows, gpu[tables.GPU_DUR].to_numpy(dtype=float), 0.0)
    flops = (costs.table[FLOPS].to_numpy(dtype=float) if costs is not None and len(costs.table) == len(gpu)
             else np.full(len(gpu), np.nan))
    est = ((costs.table[SOURCE].to_numpy(dtype=object) == SOURCE_ESTIMATE).astype(np.int64)
           if costs is not None and costs.estimated and len(costs.table) == len(gpu) else None)
    total = float(gpu_us.sum())
    launch = gpu[tables.GPU_LAUNCH].to_numpy() if len(gpu) else np.zeros(0, dtype=np.int64)
    ok = (launch >= 0) & gpu_rows
    safe = np.maximum(launch, 0)
    q_ts = rt[tables.RT_TS].to_numpy(dtype=float)[safe] if len(rt) else np.zeros(len(gpu))
    q_tid = rt[tables.RT_TID].to_numpy()[safe] if len(rt) else np.zeros(len(gpu))
    views = []
    # by op: each activity to its launching op (the loader's link) and the ops around it
    op_ts, op_end = ops[tables.OP_TS].to_numpy(dtype=float), ops[tables.OP_END].to_numpy(dtype=float)
    op_of = np.where(ok, gpu[tables.GPU_OP].to_numpy() if len(gpu) else -1, -1)
    op_step = ops[tables.OP_STEP].to_numpy() if len(ops) else np.zeros(0, dtype=np.int64)
    if plan is not None and plan.windows.scope == SCOPE_INFERRED and len(plan.windows) and len(ops):
        op_step = step_of(op_ts, _step_frame(plan.windows))  # no step marks: the loader gave the ops none
    in_op = _in_steps(plan, op_step)
    rows, attributed = _rows(ops[tables.OP_NAME].astype(str).tolist(), op_ts, op_end, ops[tables.OP_TID].to_numpy(),
                             in_op, op_of, gpu_us, flops, inclusive=True, gpu_est=est)
    views.append(OperatorView(BY_OP, tuple(rows), total, attributed, "" if rows else "the trace has no CPU ops"))
    op_name_arr = ops[tables.OP_NAME].astype(str).to_numpy() if len(ops) else np.zeros(0, dtype=object)
    launched_by = np.array([op_name_arr[o] if o >= 0 else "" for o in op_of.tolist()], dtype=object)
    py = rank.python
    names = py[tables.PY_NAME].astype(str).tolist() if len(py) else []
    for by, keyed, what in ((BY_MODULE, module_name, "nn.Module names (record with with_stack=True or "
                             "with_modules=True)"), (BY_LINE, source_line, "Python stacks (record with with_stack=True)")):
        views.append(_frames_view(by, keyed, what, py, names, plan, ok, q_ts, q_tid, gpu_us, flops, total,
                                  gpu[tables.GPU_NAME].to_numpy(), launched_by, est))
    return tuple(views)


def _in_steps(plan: StepPlan | None, step_numbers: np.ndarray) -> np.ndarray:
    """Rows (by their step number) in a step the plan selects; every row without a plan or steps."""
    if plan is None or plan.scope == "trace" or not len(plan.windows):
        return np.ones(len(step_numbers), dtype=bool)
    chosen = plan.windows.numbers[plan.selected]
    return np.isin(step_numbers, chosen)


def _frames_view(by: str, keyed: Callable[[str], str | None], what: str, py: pd.DataFrame, names: list[str],
                 plan: StepPlan | None, ok: np.ndarray, q_ts: np.ndarray, q_tid: np.ndarray, gpu_us: np.ndarray,
                 flops: np.ndarray, total: float, gpu_names: np.ndarray, gpu_ops: np.ndarray,
                 est: np.ndarray | None = None) -> OperatorView:
    """A grouping over the python_function frames whose name `keyed` maps to a key."""
    keys = [keyed(n) for n in names]
    pick = np.array([k is not None for k in keys], dtype=bool)
    if not pick.any():
        return OperatorView(by, (), total, 0.0, f"the trace has no {what}")
    sub = py[pick]
    ts, end = sub[tables.PY_TS].to_numpy(dtype=float), sub[tables.PY_END].to_numpy(dtype=float)
    tid = sub[tables.PY_TID].to_numpy()
    inner = _innermost(ts, end, tid, q_ts, q_tid)
    inner = np.where(ok, inner, -1)
    steps = plan.windows if plan is not None else None
    numbers = step_of(ts, _step_frame(steps)) if steps is not None else np.zeros(len(ts), dtype=np.int64)
    in_steps = _in_steps(plan, numbers)
    kept = [k for k in keys if k is not None]
    rows, attributed = _rows(kept, ts, end, tid, in_steps, inner, gpu_us, flops, inclusive=by == BY_MODULE, gpu_est=est)
    return OperatorView(by, tuple(rows), total, attributed, kernels=_kernel_keys(kept, inner, gpu_us, gpu_names),
                        launching_ops=_kernel_keys(kept, inner, gpu_us, gpu_ops))


def _kernel_keys(keys: Sequence[str], inner: np.ndarray, gpu_us: np.ndarray,
                 gpu_names: np.ndarray) -> tuple[tuple[str, str, float], ...]:
    """GPU µs per (kernel name, innermost key around its launch, UNPLACED for none), largest first
    (MAX_ROWS × 5 at most)."""
    acc: dict[tuple[str, str], float] = defaultdict(float)
    for g in np.flatnonzero(gpu_us > 0).tolist():
        i = int(inner[g])
        acc[(str(gpu_names[g]), keys[i] if i >= 0 else UNPLACED)] += float(gpu_us[g])
    ranked = sorted(acc.items(), key=lambda kv: -kv[1])[:MAX_ROWS * 5]
    return tuple((name, key, us) for (name, key), us in ranked)


def _step_frame(windows: StepWindows) -> pd.DataFrame:
    """The plan's step windows as the loader's steps table (number, start, end) for trace.link.step_of."""
    return pd.DataFrame({tables.STEP_NUMBER: windows.numbers, tables.STEP_TS: windows.ts, tables.STEP_END: windows.end})
