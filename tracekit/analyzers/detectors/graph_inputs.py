"""Inputs copied into a CUDA graph's static buffers at every replay: torch.compile's CUDA graph trees (mode="reduce-overhead") copy each input that is not a parameter, a buffer, a previous graph's output or a static address into the graph's own memory before the replay, one `torch._foreach_copy_` per call inside the compiled region.

Large inputs that keep their values between calls (an encoder's cross-attention keys and values, a
constant mask) are copied again at every call: held-out meeting_asr_graph_input_copies (H100), a
reduce-overhead decoder step fed the encoder's 32 × 16 × 1,500 × 64 cross K/V for its 8 layers: 192 device
copies a step, 12.6 ms of GPU time in a 31.6 ms bare step; with the K/V kept at a static address the bare
step was 18.9 ms. A copy is a GPU activity (kernel or memcpy) launched by a `_foreach_copy_` inside a
`Torch-Compiled Region`, in a rank whose GPU work replays from CUDA graphs.

One row per step with such copies; per rank.runtime row, whether it is a call of such a copy."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.compiled import REGION
from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.analyzers.detectors.layers import under
from tracekit.analyzers.names import matches
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

COPY = "aten::_foreach_copy_"
DEPTH = 8  # op levels between the copy and its compiled region

# --- columns of Patterns.graph_inputs (one row per step with such copies) ---------------------------
GI_STEP = "step"
GI_CALLS = "calls"  # _foreach_copy_ calls
GI_COPIES = "copies"  # GPU activities they launched
GI_BYTES = "bytes"  # what those moved, where recorded (NaN: unknown)
GI_US = "time_us"  # their GPU time
GRAPH_INPUT_COLUMNS = (GI_STEP, GI_CALLS, GI_COPIES, GI_BYTES, GI_US)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(GRAPH_INPUT_COLUMNS))


@dataclass(frozen=True)
class GraphInputs:
    """The table and, per rank.runtime row, whether it is a call of a graph-input copy."""

    table: pd.DataFrame
    calls: np.ndarray


def find_graph_inputs(rank: RankTrace, steps: StepsOf, rows: np.ndarray | None = None) -> GraphInputs:
    """GRAPH_INPUT_COLUMNS per step and the copies' runtime calls (`rows`: the GPU rows to consider)."""
    gpu, ops, rt = rank.gpu, rank.ops, rank.runtime
    none = GraphInputs(empty(), np.zeros(len(rt), dtype=bool))
    if not len(gpu) or not len(ops) or not (gpu[tables.GPU_GRAPH].to_numpy() >= 0).any():
        return none
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    copy = names == COPY
    if not copy.any():
        return none
    in_region = under(ops, matches(names, REGION), DEPTH) >= 0
    mine_op = under(ops, copy, 2)  # the copy op or its child (copy_ under _foreach_copy_ on some versions)
    mine_op = np.where((mine_op >= 0) & in_region[np.maximum(mine_op, 0)], mine_op, -1)
    op = gpu[tables.GPU_OP].to_numpy(dtype=np.int64)
    linked = op >= 0
    owner = np.where(linked, mine_op[np.where(linked, op, 0)], -1)
    mine = (owner >= 0) & (gpu[tables.GPU_GRAPH].to_numpy() < 0)
    if rows is not None:
        mine &= rows
    if not mine.any():
        return none
    dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    nbytes = gpu[tables.GPU_BYTES].to_numpy(dtype=float)
    step = steps.gpu
    out = []
    for s in np.unique(step[mine]).tolist():
        if s < 0:
            continue
        here = mine & (step == s)
        moved = nbytes[here]
        out.append({GI_STEP: int(s), GI_CALLS: len(np.unique(owner[here])), GI_COPIES: int(here.sum()),
                    GI_BYTES: float(moved[moved >= 0].sum()) if (moved >= 0).any() else float("nan"),
                    GI_US: float(dur[here].sum())})
    if not out:
        return none
    calls = np.zeros(len(rt), dtype=bool)
    if len(rt):
        rt_op = rt[tables.RT_OP].to_numpy(dtype=np.int64)
        calls = (rt_op >= 0) & (mine_op[np.maximum(rt_op, 0)] >= 0)
    return GraphInputs(pd.DataFrame(out, columns=list(GRAPH_INPUT_COLUMNS)), calls)
