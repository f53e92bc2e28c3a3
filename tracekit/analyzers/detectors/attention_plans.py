"""cuDNN attention building a new execution plan for each new shape: the first `aten::_cudnn_attention_forward` (or backward) call at a sequence length it has not seen spends milliseconds on the host building the plan and its generated kernel, where a call at a known shape takes tens of µs; in decoding with a growing K/V every token is a new length.

heldout15 gpt2_ngram_host (H100, torch 2.11): 384 cuDNN attention calls in 4 steps, 16 shapes (one per
token, 24 layers each); the first call of each shape took 35–53 ms of host, the others a median of
40 µs; 139 ms of a 154 ms unprofiled step in the variant without the Python n-gram ban. The flash and
memory-efficient backends take any length without a plan (`torch.nn.attention.sdpa_kernel`).

A call counts when it is the trace's first at its input shapes and its host time is at least
SLOW_US and SLOW_FACTOR × the median of that op's calls. Its cost is the host gap before its first
launch call (model: the op's own preparation before it launches) up to the call's time above that
median."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.call_gaps import call_gaps, host_spans
from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

# torch's cuDNN SDPA entry points (aten/src/ATen/native/transformers/cuda/attention.cu,
# attention_backward.cu): their plans are cached by shape (MHA graph cache of cudnn frontend)
PLAN_OPS = frozenset({"aten::_cudnn_attention_forward", "aten::_cudnn_attention_backward"})
SLOW_US = 1000.0  # a plan build: ms; a cached call: tens of µs
SLOW_FACTOR = 10.0  # × the op's median call
SHAPE_CHARS = 160  # of the shapes' text in the table (trace text is untrusted)

# --- columns of Patterns.attention_plans (one row per step × op name) --------------------------------
AP_STEP = "step"
AP_OP = "op"
AP_BUILDS = "builds"  # calls at a new shape that took SLOW_US or more
AP_CALLS = "calls"  # all the op's calls in the step
AP_MEDIAN_US = "median_us"  # the op's median call over the trace
AP_HOST_US = "host_us"  # Σ of the builds' host time above the median, before their launch
AP_SHAPES = "shapes"  # the first build's input shapes, in words
ATTENTION_PLAN_COLUMNS = (AP_STEP, AP_OP, AP_BUILDS, AP_CALLS, AP_MEDIAN_US, AP_HOST_US, AP_SHAPES)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(ATTENTION_PLAN_COLUMNS))


@dataclass(frozen=True)
class AttentionPlans:
    table: pd.DataFrame
    cut_us: np.ndarray  # per rank.runtime row: host time before the call that no plan build saves (µs)
    spans: np.ndarray  # (start, end) of that host time, one row per call with some (host_spans)


def find_attention_plans(rank: RankTrace, steps: StepsOf) -> AttentionPlans:
    """ATTENTION_PLAN_COLUMNS per step and op with plan builds at new shapes, and the host time per
    runtime row that a backend without plans saves."""
    rt, ops = rank.runtime, rank.ops
    none = AttentionPlans(empty(), np.zeros(len(rt)), np.zeros((0, 2)))
    if not len(ops) or not len(rt):
        return none
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    is_plan = np.isin(names, list(PLAN_OPS))
    if not is_plan.any():
        return none
    ts, end = ops[tables.OP_TS].to_numpy(dtype=float), ops[tables.OP_END].to_numpy(dtype=float)
    dims = ops[tables.OP_INPUT_DIMS].to_numpy(dtype=object)
    rt_op, rt_ts = rt[tables.RT_OP].to_numpy(), rt[tables.RT_TS].to_numpy(dtype=float)
    is_launch = np.isin(rt[tables.RT_KIND].to_numpy(dtype=object), tables.LAUNCH_KINDS)
    gaps = call_gaps(rank)
    cut = np.zeros(len(rt))
    out: list[dict[str, object]] = []
    for name in sorted(set(names[is_plan].tolist())):
        rows = np.flatnonzero(names == name)
        rows = rows[np.argsort(ts[rows], kind="stable")]
        dur = end[rows] - ts[rows]
        median = float(np.median(dur))
        seen: set[str] = set()
        per_step: dict[int, list[tuple[float, str]]] = {}
        calls: dict[int, int] = {}
        for row, d in zip(rows.tolist(), dur.tolist(), strict=True):
            shape = str(dims[row])
            new = shape not in seen
            seen.add(shape)
            step = int(steps.ops[row])
            if step < 0:
                continue
            calls[step] = calls.get(step, 0) + 1
            if not new or d < max(SLOW_US, SLOW_FACTOR * median):
                continue
            mine = np.flatnonzero((rt_op == row) & is_launch)
            if not len(mine):
                continue
            first = int(mine[np.argmin(rt_ts[mine])])
            cut[first] = min(float(gaps[first]), d - median)
            per_step.setdefault(step, []).append((float(cut[first]), shape[:SHAPE_CHARS]))
        for step, builds in sorted(per_step.items()):
            out.append({AP_STEP: step, AP_OP: str(name), AP_BUILDS: len(builds), AP_CALLS: calls[step],
                        AP_MEDIAN_US: median, AP_HOST_US: float(sum(c for c, _ in builds)), AP_SHAPES: builds[0][1]})
    if not out:
        return none
    return AttentionPlans(pd.DataFrame(out, columns=list(ATTENTION_PLAN_COLUMNS)), cut, host_spans(rank, cut))
