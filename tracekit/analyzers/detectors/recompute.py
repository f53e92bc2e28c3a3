"""Activation checkpointing: a forward re-run inside the backward pass (`torch.utils.checkpoint`), found as forward module ops under an autograd backward node.

`checkpoint(block, x, use_reentrant=False)` saves only the block's input; the first backward node of
the block that unpacks a saved tensor re-runs the block's forward (its unpack hook), so the trace
shows `aten::linear`, `aten::layer_norm`, `aten::scaled_dot_product_attention`... nested under an
`autograd::engine::evaluate_function: AddmmBackward0`. The reentrant variant re-runs it inside
`CheckpointFunctionBackward`. A backward formula never calls these forward ops (a linear's gradient
is `aten::mm`, a layer norm's `native_layer_norm_backward`, an SDPA's `*_attention_backward`).

Per backward node (the nearest ancestor named `autograd::engine::evaluate_function: ...` or
`...Backward<n>`): its outermost FORWARD_OPS descendants; the recompute is the node's thread between
the node's start and the last one's end (the block's forward re-run at once, before the node's
own formula; from the node's start: the checkpoint's unpack hook restoring the RNG and autocast
state is the re-run's too): the runtime calls issued there and the GPU activities they launched. One row per step;
per rank.gpu row whether a recompute launched it, per rank.runtime row whether a recompute issued it
(the calls the rule's what-if removes), and per rank.runtime row the forward's checkpoint-entry time
in the host gap before it (checkpoint_entry.py). The activations checkpointing saves are estimated from the
recomputed forward ops' inputs (what autograd would keep for them without checkpointing): each op's
first input (SDPA: query, key and value), bytes from the recorded dims and dtypes."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.checkpoint_entry import entry_cuts
from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.analyzers.names import matches
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

FORWARD_OPS = re.compile(r"^aten::(linear|conv[123]d|convolution|conv_transpose[123]d|layer_norm|group_norm|"
                         r"batch_norm|instance_norm|rms_norm|scaled_dot_product_attention|"
                         r"_scaled_dot_product_(flash|efficient|cudnn)_attention|embedding|gelu)$")
BACKWARD_NODE = re.compile(r"^autograd::engine::evaluate_function: |Backward\d*$")
ATTENTION = re.compile(r"attention")
MAX_DEPTH = 256  # ancestors walked at most (a malformed parent chain cannot loop)
ITEMSIZE = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "signed char": 1, "unsigned char": 1,
            "long int": 8, "int": 4, "bool": 1}

# --- columns of Patterns.recompute (one row per step) ----------------------------------------------
RC_STEP = "step"
RC_REGIONS = "regions"  # backward nodes that re-ran a forward
RC_OPS = "ops"  # the outermost forward ops re-run
RC_NAMES = "names"  # their distinct names, most frequent first, joined by ", "
RC_LAUNCHES = "launches"  # launch calls issued while re-running
RC_KERNELS = "kernels"  # GPU activities they launched
RC_TIME_US = "time_us"  # their summed time
RC_ACT_BYTES = "activation_bytes"  # the re-run ops' inputs: the activations kept without checkpointing
RECOMPUTE_COLUMNS = (RC_STEP, RC_REGIONS, RC_OPS, RC_NAMES, RC_LAUNCHES, RC_KERNELS, RC_TIME_US, RC_ACT_BYTES)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(RECOMPUTE_COLUMNS))


@dataclass(frozen=True)
class Recompute:
    """The detector's result: RECOMPUTE_COLUMNS rows and the masks the rule's what-if reads."""

    table: pd.DataFrame = field(default_factory=empty)
    in_recompute: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))  # per rank.gpu row
    calls: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))  # per rank.runtime row
    # per rank.runtime row: µs of the forward's checkpoint entry in the host gap before it (checkpoint_entry.py)
    entry_cut_us: np.ndarray = field(default_factory=lambda: np.zeros(0))


def _regions(names: np.ndarray, parent: np.ndarray) -> dict[int, list[int]]:
    """Per backward node row: its outermost forward-op descendants (rows), none inside a deeper node."""
    is_fwd = matches(names, FORWARD_OPS)
    cand = np.flatnonzero(is_fwd)
    if not len(cand):
        return {}
    is_node = matches(names, BACKWARD_NODE)
    if not is_node.any():
        return {}
    out: dict[int, list[int]] = {}
    par = parent.tolist()
    for c in cand.tolist():
        p, hops = par[c], 0
        while p >= 0 and not is_fwd[p] and not is_node[p] and hops < MAX_DEPTH:
            p, hops = par[p], hops + 1
        if p >= 0 and is_node[p]:
            out.setdefault(p, []).append(c)
    return out


def _act_bytes(rank: RankTrace, fwd: list[int], names: np.ndarray) -> float:
    """Bytes of the forward ops' activation inputs (first input; SDPA: the first three)."""
    if not fwd:
        return 0.0
    rows = np.array(fwd, dtype=np.int64)
    total = 0.0
    dims_all = rank.input_values(rows, tables.OP_INPUT_DIMS)
    types_all = rank.input_values(rows, tables.OP_INPUT_TYPES)
    for r, dims, types in zip(fwd, dims_all, types_all, strict=True):
        if not isinstance(dims, list):
            continue
        k = 3 if ATTENTION.search(str(names[r])) else 1
        for i in range(min(k, len(dims))):
            d = dims[i]
            if isinstance(d, list) and d and all(isinstance(x, int) for x in d):
                t = str(types[i]) if isinstance(types, list) and i < len(types) else ""
                total += float(math.prod(d)) * ITEMSIZE.get(t, 2)
    return total


def find_recompute(rank: RankTrace, steps: StepsOf, rows: np.ndarray | None = None) -> Recompute:
    """The forwards re-run in backward of one rank (module docstring), over the selected GPU rows."""
    ops, gpu, rt = rank.ops, rank.gpu, rank.runtime
    none = Recompute(empty(), np.zeros(len(gpu), dtype=bool), np.zeros(len(rt), dtype=bool))
    if not len(ops) or not len(rt):
        return none
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    regions = _regions(names, ops[tables.OP_PARENT].to_numpy(dtype=np.int64))
    if not regions:
        return none
    ts, end = ops[tables.OP_TS].to_numpy(dtype=float), ops[tables.OP_END].to_numpy(dtype=float)
    tid = ops[tables.OP_TID].to_numpy()
    rt_ts, rt_tid = rt[tables.RT_TS].to_numpy(dtype=float), rt[tables.RT_TID].to_numpy()
    launch_kind = np.isin(rt[tables.RT_KIND].to_numpy(dtype=object), tables.LAUNCH_KINDS)
    by_tid: dict[object, tuple[np.ndarray, np.ndarray]] = {}
    calls = np.zeros(len(rt), dtype=bool)
    region_of = np.full(len(rt), -1, dtype=np.int64)
    nodes = sorted(regions)
    for i, node in enumerate(nodes):
        fwd = regions[node]
        t0, t1 = float(ts[node]), float(end[fwd].max())  # the node's unpack runs the re-run first
        key = tid[node]
        if key not in by_tid:
            idx = np.flatnonzero(rt_tid == key)
            idx = idx[np.argsort(rt_ts[idx], kind="stable")]
            by_tid[key] = (idx, rt_ts[idx])
        idx, sorted_ts = by_tid[key]
        hit = idx[np.searchsorted(sorted_ts, t0, "left"):np.searchsorted(sorted_ts, t1, "left")]
        calls[hit] = True
        region_of[hit] = i
    gpu_launch = gpu[tables.GPU_LAUNCH].to_numpy(dtype=np.int64)
    g_region = np.where(gpu_launch >= 0, region_of[np.maximum(gpu_launch, 0)], -1) if len(gpu) \
        else np.zeros(0, dtype=np.int64)
    if rows is not None:
        g_region = np.where(rows, g_region, -1)
    in_rc = g_region >= 0
    if not in_rc.any():
        return none
    dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    kernels = np.bincount(g_region[in_rc], minlength=len(nodes))
    time = np.bincount(g_region[in_rc], weights=dur[in_rc], minlength=len(nodes))
    launches = np.bincount(region_of[calls & launch_kind], minlength=len(nodes))
    per_step: dict[int, dict[str, object]] = {}
    counts: dict[int, dict[str, int]] = {}
    for i, node in enumerate(nodes):
        if not kernels[i]:
            continue
        step = int(steps.ops[node])
        g = per_step.setdefault(step, {RC_REGIONS: 0, RC_OPS: 0, RC_LAUNCHES: 0, RC_KERNELS: 0, RC_TIME_US: 0.0,
                                       RC_ACT_BYTES: 0.0})
        g[RC_REGIONS] = int(str(g[RC_REGIONS])) + 1
        g[RC_OPS] = int(str(g[RC_OPS])) + len(regions[node])
        g[RC_LAUNCHES] = int(str(g[RC_LAUNCHES])) + int(launches[i])
        g[RC_KERNELS] = int(str(g[RC_KERNELS])) + int(kernels[i])
        g[RC_TIME_US] = float(str(g[RC_TIME_US])) + float(time[i])
        g[RC_ACT_BYTES] = float(str(g[RC_ACT_BYTES])) + _act_bytes(rank, regions[node], names)
        c = counts.setdefault(step, {})
        for r in regions[node]:
            c[str(names[r])] = c.get(str(names[r]), 0) + 1
    if not per_step:
        return none
    recs = [{RC_STEP: step, **g, RC_NAMES: ", ".join(n for n, _ in sorted(counts[step].items(), key=lambda kv: -kv[1]))}
            for step, g in sorted(per_step.items())]
    kept = np.isin(g_region, [i for i in range(len(nodes)) if kernels[i]])
    return Recompute(pd.DataFrame(recs, columns=list(RECOMPUTE_COLUMNS)), kept & in_rc,
                     calls & np.isin(region_of, np.flatnonzero(kernels > 0)),
                     entry_cuts(rank, matches(names, BACKWARD_NODE)))
