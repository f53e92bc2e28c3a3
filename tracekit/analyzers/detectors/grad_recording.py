"""Autograd recording graphs nobody uses: inference steps (no backward, no optimizer step) whose ops create autograd nodes, because the loop runs without `torch.no_grad()` / `torch.inference_mode()` on weights that require grad.

While grad mode is on the profiler records autograd's sequence number at each op ("Sequence number",
the loader's OP_SEQ); the number advances by one for each graph node an op creates, which happens only
when an input requires grad. So in a step without backward, the rise of the sequence number is the
number of nodes recorded for nothing, each with its host cost (the node, its saved tensors, the
version counters). An inference script whose tensors need no grad records the numbers but never
advances them (sample_traces small_matmul_loop, decode_gemv: 0 throughout); heldout15
dt_rollout_grad_mode advances 1,272 a step and its `inference_mode` variant records none.

A step counts when it runs no backward and its sequence numbers rise by at least MIN_NODES. Each
runtime call on the step's threads is charged NODE_US per node created since the thread's previous
call, up to the host gap before it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.accumulation import BACKWARD
from tracekit.analyzers.detectors.call_gaps import call_gaps
from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.analyzers.names import matches
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

MIN_NODES = 32  # per step: a loss or a metric computed with grad on is a handful
# host time of one autograd node created in a forward op (node, edges, saved tensors, version
# counters), as profiled: sample_traces/bare/eval_grad_mode (H100) spends 28.60 ms a step in its 720
# top-level ops with 944 nodes created, its inference-mode variant 25.02 ms in the same 720 ops
# (raw op durations): 3.79 µs a node. Unprofiled the saving varied with the host's speed: 2.2 ms a
# step on a fast run (12.8 → 10.6 ms, the fixed loop GPU-bound), 8.3 to 11 ms on slow ones.
NODE_US = 3.8
# ... and what a node costs the unprofiled step: heldout25 card_fraud_scoring_grad_recording (H100, the same
# 1,328 kernels a step in both variants) lost 5.55 ms of bare step for 876 nodes: 6.3 µs a node. The two
# other pairs bracket it: heldout15 dt_rollout_grad_mode 6.0 µs (7.64 ms for 1,272 nodes, with
# nn.TransformerEncoderLayer's fused path, which inference mode turns on) and sample_traces/bare/
# eval_grad_mode 8.8 µs in its recorded bare run (8.30 ms for 944), 2.3 µs on a fast one. The profiled
# ops' durations show less of it than the bare step loses (the graph's release and the Python around the
# ops pay too), and the profiler does not slow it.
NODE_BARE_US = 6.3

# --- columns of Patterns.grad_recording (one row per step × thread) ----------------------------------
GR_STEP = "step"
GR_THREAD = "thread"
GR_NODES = "nodes"  # autograd nodes created in the step on the thread (the sequence number's rise)
GR_OPS = "ops"  # ops that recorded a sequence number
GR_HOST_US = "host_us"  # Σ of the cuts before the thread's runtime calls
GRAD_RECORDING_COLUMNS = (GR_STEP, GR_THREAD, GR_NODES, GR_OPS, GR_HOST_US)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(GRAD_RECORDING_COLUMNS))


@dataclass(frozen=True)
class GradRecording:
    table: pd.DataFrame
    cut_us: np.ndarray  # per rank.runtime row: host time before the call that inference mode saves (µs)


def find_grad_recording(rank: RankTrace, steps: StepsOf) -> GradRecording:
    """GRAD_RECORDING_COLUMNS per inference step and thread whose ops create autograd nodes, and the host
    time per runtime row that running them without grad saves."""
    rt, ops = rank.runtime, rank.ops
    none = GradRecording(empty(), np.zeros(len(rt)))
    if not len(ops) or not len(rt) or tables.OP_SEQ not in ops.columns:
        return none
    seq = ops[tables.OP_SEQ].to_numpy()
    recorded = (seq >= 0) & (steps.ops >= 0)
    if not recorded.any():
        return none
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    op_ts, op_tid = ops[tables.OP_TS].to_numpy(dtype=float), ops[tables.OP_TID].to_numpy()
    rt_ts, rt_tid = rt[tables.RT_TS].to_numpy(dtype=float), rt[tables.RT_TID].to_numpy()
    gaps = call_gaps(rank)
    training = set(np.unique(steps.ops[(steps.ops >= 0) & matches(names, BACKWARD)]).tolist())
    cut = np.zeros(len(rt))
    rows: list[dict[str, object]] = []
    for step in sorted(set(np.unique(steps.ops[recorded]).tolist()) - training):
        for tid in np.unique(op_tid[recorded & (steps.ops == step)]).tolist():
            mine = np.flatnonzero(recorded & (steps.ops == step) & (op_tid == tid))
            mine = mine[np.argsort(op_ts[mine], kind="stable")]
            nodes = int(seq[mine].max() - seq[mine].min())
            if nodes < MIN_NODES:
                continue
            seen = np.maximum.accumulate(seq[mine])
            calls = np.flatnonzero((steps.runtime == step) & (rt_tid == tid))
            calls = calls[np.argsort(rt_ts[calls], kind="stable")]
            at = np.searchsorted(op_ts[mine], rt_ts[calls], side="right") - 1
            level = np.where(at >= 0, seen[np.maximum(at, 0)], seq[mine[0]])
            made = np.diff(np.r_[seq[mine[0]], level])
            cut[calls] = np.minimum(gaps[calls], NODE_US * np.clip(made, 0, None))
            rows.append({GR_STEP: int(step), GR_THREAD: int(tid), GR_NODES: nodes, GR_OPS: len(mine),
                         GR_HOST_US: float(cut[calls].sum())})
    if not rows:
        return none
    return GradRecording(pd.DataFrame(rows, columns=list(GRAD_RECORDING_COLUMNS)), cut)
