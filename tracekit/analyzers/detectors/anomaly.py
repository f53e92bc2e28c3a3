"""Autograd anomaly detection left on: the NaN check after every backward node and the stack each forward node stores.

With `torch.autograd.set_detect_anomaly(True)` the engine checks each output of every backward node
(torch/csrc/autograd/engine.cpp, `call_function`): `isnan(output)._is_any_true().item()`, recorded as
`aten::isnan` → `aten::_is_any_true` (→ `aten::any`) → `aten::item` (→ `aten::_local_scalar_dense`,
a device-to-host copy and a stream sync) inside the node's `autograd::engine::evaluate_function: X`
op. And every forward op that records an autograd node stores the Python stack
(`AnomalyMetadata::store_stack`, `traceback.format_stack()`): time inside the op with no child op,
which metadata-only ops (view, transpose, t...) show plainly, since without it they take a few µs
(H200, sample_traces/heldout3/ho3_anomaly_mode: forward `aten::view` 88.8 µs mean self time, 3.4 µs
with anomaly off; the backward thread's view ops 1.6 µs in both).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.analyzers.names import matches
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

NODE = re.compile(r"^autograd::engine::evaluate_function: ")
CHECK_START = "aten::isnan"
CHECK_END = ("aten::item", "aten::is_nonzero")  # the host read that ends one check
CHECK_BETWEEN = ("aten::_is_any_true", "aten::any", "aten::ne")  # what may run between them (torch 2.11)
CHECK_MAX_OPS = 4  # sibling ops from the isnan to the item, at most
# Metadata-only ops: without anomaly mode their self time is the dispatcher's few µs, so their self
# time beyond the backward thread's (which stores no stack) is the stack capture of one node.
VIEW_OPS = frozenset({
    "aten::view", "aten::transpose", "aten::t", "aten::unsqueeze", "aten::squeeze", "aten::select",
    "aten::slice", "aten::permute", "aten::expand", "aten::unflatten", "aten::_unsafe_view",
    "aten::as_strided", "aten::alias", "aten::detach", "aten::flatten", "aten::narrow",
})
VIEW_MIN = 3  # view ops each side needs before their medians are read

# --- columns of Patterns.anomaly (one row per step with anomaly checks) ------------------------------
AN_STEP = "step"
AN_CHECKS = "checks"  # NaN checks (isnan → item) in backward nodes
AN_CHECK_US = "check_us"  # their wall time, first op's start to the item's end (their launches and syncs inside)
AN_NODES = "nodes"  # backward nodes evaluated (each stored a stack in the forward)
AN_CAPTURE_NODE_US = "capture_node_us"  # per node: forward view-op median self time − backward's (0 when unknown)
AN_CAPTURE_US = "capture_us"  # nodes × capture_node_us: the forward's stack capture
AN_FORWARD_HOST_US = "forward_host_us"  # Σ self time of the forward ops (outside backward nodes)
ANOMALY_COLUMNS = (AN_STEP, AN_CHECKS, AN_CHECK_US, AN_NODES, AN_CAPTURE_NODE_US, AN_CAPTURE_US, AN_FORWARD_HOST_US)

# --- columns of Patterns.anomaly_checks (one row per check: the stretch its removal takes away) ----
AC_STEP = "step"
AC_TID = "tid"
AC_TS = "ts"
AC_END = "end"
CHECK_COLUMNS = (AC_STEP, AC_TID, AC_TS, AC_END)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(ANOMALY_COLUMNS))


def empty_checks() -> pd.DataFrame:
    return pd.DataFrame(columns=list(CHECK_COLUMNS))


def _roots(parent: np.ndarray) -> np.ndarray:
    """The outermost ancestor of every op (itself at top level)."""
    root = np.arange(len(parent))
    up = parent.copy()
    for _ in range(64):  # op nesting is shallow; bounded against a malformed parent chain
        has = up >= 0
        if not has.any():
            break
        root = np.where(has, up, root)
        up = np.where(has, parent[np.clip(up, 0, None)], -1)
    return root


def _checks(names: np.ndarray, parent: np.ndarray, ts: np.ndarray, end: np.ndarray,
            in_node: np.ndarray) -> list[tuple[int, int]]:
    """(first op row, item op row) of every NaN check: an isnan directly inside a backward node's
    op, and the first item among the next CHECK_MAX_OPS of its siblings named CHECK_END or CHECK_BETWEEN."""
    starts = np.flatnonzero((names == CHECK_START) & (parent >= 0))
    starts = starts[in_node[parent[starts]]]
    if not len(starts):
        return []
    candidates = np.flatnonzero(np.isin(names, (*CHECK_END, *CHECK_BETWEEN)) & (parent >= 0))
    siblings: dict[int, list[int]] = {}
    for row in candidates[np.argsort(ts[candidates], kind="stable")].tolist():
        siblings.setdefault(int(parent[row]), []).append(row)
    out = []
    for row in starts.tolist():
        later = [s for s in siblings.get(int(parent[row]), []) if ts[s] >= end[row]][:CHECK_MAX_OPS]
        item = next((s for s in later if names[s] in CHECK_END), None)
        if item is not None:
            out.append((row, item))
    return out


def check_calls(rank: RankTrace, checks: pd.DataFrame) -> np.ndarray:
    """Per rank.runtime row: it runs inside a NaN check (its launches, copy and sync) on the check's thread."""
    rt = rank.runtime
    out = np.zeros(len(rt), dtype=bool)
    if not len(checks) or not len(rt):
        return out
    ts, tid = rt[tables.RT_TS].to_numpy(dtype=float), rt[tables.RT_TID].to_numpy()
    for thread, g in checks.groupby(AC_TID, sort=False):
        rows = np.flatnonzero(tid == thread)
        order = rows[np.argsort(ts[rows], kind="stable")]
        lo = np.searchsorted(ts[order], g[AC_TS].to_numpy(dtype=float), side="left")
        hi = np.searchsorted(ts[order], g[AC_END].to_numpy(dtype=float), side="left")
        for a, b in zip(lo.tolist(), hi.tolist(), strict=True):
            out[order[a:b]] = True
    return out


def find_anomaly(rank: RankTrace, steps: StepsOf) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray]:
    """Per step: the backward NaN checks and the forward's stack capture (ANOMALY_COLUMNS); one row
    per check (CHECK_COLUMNS); and per rank.runtime row whether a forward op issued it (the calls whose
    host gaps hold the stack capture). Empty without a NaN check in any backward node, unless the
    recorder says anomaly mode was on (`check_nan=False` runs no check: the stack capture alone)."""
    ops, rt = rank.ops, rank.runtime
    forward_calls = np.zeros(len(rt), dtype=bool)
    if not len(ops):
        return empty(), empty_checks(), forward_calls
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    parent = ops[tables.OP_PARENT].to_numpy(dtype=np.int64)
    ts = ops[tables.OP_TS].to_numpy(dtype=float)
    end = ops[tables.OP_END].to_numpy(dtype=float)
    is_node = matches(names, NODE)
    found = _checks(names, parent, ts, end, is_node)
    recorded_on = dict(debug_settings(rank)).get("anomaly", False)  # check_nan=False leaves no check
    if not found and not recorded_on:
        return empty(), empty_checks(), forward_calls
    dur = np.nan_to_num(end - ts)
    kids = np.bincount(parent[parent >= 0], weights=dur[parent >= 0], minlength=len(ops))
    self_us = np.clip(dur - kids, 0.0, None)
    roots = _roots(parent)
    backward = is_node[roots] | matches(names[roots], re.compile(r"Backward|^autograd::|^Optimizer\."))
    parent_view = np.isin(names[np.clip(parent, 0, None)], list(VIEW_OPS)) & (parent >= 0)
    view = np.isin(names, list(VIEW_OPS)) & ~parent_view
    fwd_view, bwd_view = self_us[view & ~backward], self_us[view & backward]
    node_us = 0.0
    if len(fwd_view) >= VIEW_MIN:
        node_us = max(float(np.median(fwd_view)) - (float(np.median(bwd_view)) if len(bwd_view) >= VIEW_MIN else 0.0),
                      0.0)
    op_step = steps.ops
    checks = pd.DataFrame({AC_STEP: [int(op_step[a]) for a, _ in found],
                           AC_TID: [ops[tables.OP_TID].to_numpy()[a] for a, _ in found],
                           AC_TS: [float(ts[a]) for a, _ in found], AC_END: [float(end[b]) for _, b in found]},
                          columns=list(CHECK_COLUMNS))
    rows = []
    node_steps = set(op_step[is_node].tolist()) if recorded_on else set()
    for step in sorted(set(checks[AC_STEP].tolist()) | node_steps):
        mine = checks[checks[AC_STEP] == step]
        nodes = int((is_node & (op_step == step)).sum())
        fwd_host = float(self_us[(op_step == step) & ~backward].sum())
        rows.append({AN_STEP: int(step), AN_CHECKS: len(mine), AN_CHECK_US: float((mine[AC_END] - mine[AC_TS]).sum()),
                     AN_NODES: nodes, AN_CAPTURE_NODE_US: node_us, AN_CAPTURE_US: nodes * node_us,
                     AN_FORWARD_HOST_US: fwd_host})
    rt_op = rt[tables.RT_OP].to_numpy(dtype=np.int64) if len(rt) else np.zeros(0, dtype=np.int64)
    linked = rt_op >= 0
    forward_calls[linked] = ~backward[roots[rt_op[linked]]]
    return pd.DataFrame(rows, columns=list(ANOMALY_COLUMNS)), checks, forward_calls


# Debug settings `tracekit profile` reads at the end of the run (trace/tables.py DEBUG_MODES_KEY):
# key -> what it is, in words (only these keys are read; values must be booleans)
DEBUG_SETTINGS = {
    "anomaly": "torch.autograd.set_detect_anomaly(True)",
    "anomaly_check_nan": "anomaly mode's NaN check (check_nan=True)",
    "deterministic_algorithms": "torch.use_deterministic_algorithms(True)",
    "cudnn_deterministic": "torch.backends.cudnn.deterministic = True",
    "cuda_launch_blocking": "CUDA_LAUNCH_BLOCKING=1",
    "sync_debug_mode": "torch.cuda.set_sync_debug_mode(...) (warn/error on syncs)",
}


def debug_settings(rank: RankTrace) -> tuple[tuple[str, bool], ...]:
    """The DEBUG_SETTINGS the recorder wrote into the trace's "tracekit" object, (key, on) each;
    empty for traces from other tools (untrusted: other keys and non-boolean values are ignored)."""
    meta = rank.meta.tracekit
    found = meta.get(tables.DEBUG_MODES_KEY) if isinstance(meta, dict) else None
    if not isinstance(found, dict):
        return ()
    return tuple((k, found[k]) for k in DEBUG_SETTINGS if isinstance(found.get(k), bool))
