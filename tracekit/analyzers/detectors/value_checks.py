"""Value checks in the loop: a comparison reduced to one boolean and read on the host (`assert (x >= 0).all()`, `if torch.isnan(x).any(): raise`, torch.distributions' argument validation), each a sync that drains the GPU queue.

A check is a run of top-level ops on one thread, in time order: up to MAX_TESTS elementwise tests
(TESTS: comparisons, isnan/isfinite, logical ops), a full reduction to one boolean (REDUCES:
all/any without a dim, `_is_all_true`), and the host read of that boolean (READS: `bool(t)` is
`aten::is_nonzero`, `.item()`), the read issuing a sync call. Taking the check out of the loop (or
`validate_args=False`, `python -O`, `torch._assert_async`) removes all of it: the tests' and the
reduction's kernels and launches, the copy and the wait, and the Python between them (held-out
dist_validate, H100: 160 checks a step from `Normal(loc, scale)` and `log_prob` validation; turning
validation off saved 7.1 of 24.6 ms unprofiled).

One row per step and thread with at least MIN_CHECKS checks; per rank.runtime row, whether it is a
check's call."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.toplevel import StepOps, TopLevel
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

MIN_CHECKS = 4  # checks per step and thread: one or two are a loss guard, several a check in a loop
MAX_TESTS = 3  # elementwise tests before the reduction that belong to the check (x == x; x > 0 & x < 1)
READS = frozenset({"aten::is_nonzero", "aten::item", "aten::_local_scalar_dense"})
REDUCES = frozenset({"aten::all", "aten::any", "aten::_is_all_true", "aten::_is_any_true"})
FULL_ONLY = frozenset({"aten::all", "aten::any"})  # a reduction over one dim leaves a tensor, not a check
TESTS = re.compile(r"^aten::(eq|ne|gt|ge|lt|le|greater|greater_equal|less|less_equal|not_equal|isnan|isinf|"
                   r"isfinite|isneginf|isposinf|isreal|logical_(and|or|not|xor)|bitwise_(and|or|not)|__(and|or)__)$")

# --- columns of Patterns.value_checks (one row per step × thread) ----------------------------------
VC_STEP = "step"
VC_CHECKS = "checks"  # checks in the step on the thread
VC_OPS = "ops"  # the most common check's ops, in words
VC_CALLS = "calls"  # runtime calls of the checks (launches, copies, syncs)
VC_HOST_US = "host_us"  # Σ per check: its first op's start to its read's end (the wait included)
VC_GPU_US = "gpu_us"  # the checks' kernel and copy time
CHECK_COLUMNS = (VC_STEP, VC_CHECKS, VC_OPS, VC_CALLS, VC_HOST_US, VC_GPU_US)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(CHECK_COLUMNS))


@dataclass(frozen=True)
class ValueChecks:
    table: pd.DataFrame
    calls: np.ndarray  # per rank.runtime row: a check's call


def _full(rank: RankTrace, row: int, name: str) -> bool:
    """An `aten::all`/`any` call with one recorded input (no dim): a reduction to one boolean."""
    if name not in FULL_ONLY:
        return True
    dims = rank.op_inputs(row).get(tables.OP_INPUT_DIMS)
    return isinstance(dims, (list, tuple)) and len(dims) == 1


def _checks(rank: RankTrace, seq: np.ndarray, names: np.ndarray, syncs: np.ndarray) -> list[np.ndarray]:
    """The checks in one thread's top-level ops of a step (`seq`, by start time): each its op rows."""
    out: list[np.ndarray] = []
    for i in range(1, len(seq)):
        read, reduce = int(seq[i]), int(seq[i - 1])
        if names[read] not in READS or not syncs[read] or names[reduce] not in REDUCES \
                or not _full(rank, reduce, str(names[reduce])):
            continue
        j = i - 1
        while j > 0 and i - 1 - j < MAX_TESTS and TESTS.match(str(names[seq[j - 1]])):
            j -= 1
        out.append(seq[j:i + 1])
    return out


def find_value_checks(rank: RankTrace, seqs: tuple[StepOps, ...], top: TopLevel) -> ValueChecks:
    """CHECK_COLUMNS per step and thread with at least MIN_CHECKS checks, and their runtime calls."""
    rt, ops = rank.runtime, rank.ops
    none = ValueChecks(empty(), np.zeros(len(rt), dtype=bool))
    if not len(rt) or not len(ops) or not seqs:
        return none
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    if not np.isin(names, list(REDUCES)).any():
        return none
    start, end = ops[tables.OP_TS].to_numpy(dtype=float), ops[tables.OP_END].to_numpy(dtype=float)
    in_check = np.zeros(len(ops), dtype=bool)
    rows: list[dict[str, object]] = []
    for step in seqs:
        for _, seq in step.threads:
            checks = _checks(rank, seq, names, top.syncs)
            if len(checks) < MIN_CHECKS:
                continue
            for c in checks:
                in_check[c] = True
            words = pd.Series([" → ".join(str(names[r]) for r in c) for c in checks]).value_counts()
            rows.append({VC_STEP: step.step, VC_CHECKS: len(checks), VC_OPS: str(words.index[0])[:160],
                         VC_HOST_US: float(sum(end[c[-1]] - start[c[0]] for c in checks)), "ops_rows": checks})
    if not rows:
        return none
    calls = (top.rt_top >= 0) & in_check[np.maximum(top.rt_top, 0)]
    gpu_dur = rank.gpu[tables.GPU_DUR].to_numpy(dtype=float)
    gpu_top = top.gpu_top
    for row in rows:
        mine = np.zeros(len(ops), dtype=bool)
        for c in row.pop("ops_rows"):  # type: ignore[attr-defined]
            mine[c] = True
        row[VC_CALLS] = int(((top.rt_top >= 0) & mine[np.maximum(top.rt_top, 0)]).sum())
        row[VC_GPU_US] = float(gpu_dur[(gpu_top >= 0) & mine[np.maximum(gpu_top, 0)]].sum())
    return ValueChecks(pd.DataFrame(rows, columns=list(CHECK_COLUMNS)), calls)
