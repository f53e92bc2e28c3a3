"""torch.compile compiling inside the steps: Dynamo's frame compiles (`entire_frame_compile`, `_compile.compile_inner`) recorded in a step, each a recompile once the warm-up is over (new input shapes under static shapes, a guard that failed)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit.analyzers import names
from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.trace import tables
from tracekit.trace.intervals import merge_intervals
from tracekit.trace.model import RankTrace

# Dynamo's timed compile phases, recorded as CPU ops by torch.profiler (torch 2.x `dynamo_timed`:
# H200 held-out compile_recompile, torch 2.11: one `entire_frame_compile` around
# `_compile.compile_inner (dynamo_timed)` per compiled frame); anchored, no nested repetition.
COMPILE_OP = re.compile(r"^(?:entire_frame_compile|_compile\.compile_inner)(?: \(dynamo_timed\))?$")

# --- columns of Patterns.recompiles (one row per merged compile span) -------------------------------
RC_STEP = "step"
RC_TID = "tid"
RC_TS = "ts"
RC_END = "end"
RC_FRAMES = "frames"  # `entire_frame_compile` (else `_compile.compile_inner`) ops inside the span
RC_US = "compile_us"  # the span's duration
RECOMPILE_COLUMNS = (RC_STEP, RC_TID, RC_TS, RC_END, RC_FRAMES, RC_US)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(RECOMPILE_COLUMNS))


def find_recompiles(rank: RankTrace, steps: StepsOf) -> pd.DataFrame:
    """The compile spans inside steps: per thread, the compile ops' intervals merged (a frame's
    `entire_frame_compile` holds its `_compile.compile_inner`), with the step of the span's first op."""
    ops = rank.ops
    if not len(ops):
        return empty()
    hit = names.matches(ops[tables.OP_NAME].to_numpy(dtype=object), COMPILE_OP)
    if not hit.any():
        return empty()
    rows = np.flatnonzero(hit)
    step = np.asarray(steps.ops)[rows]
    keep = step >= 0 if len(rank.steps) else np.ones(len(rows), dtype=bool)
    rows, step = rows[keep], step[keep]
    out: list[dict[str, object]] = []
    tid = ops[tables.OP_TID].to_numpy()[rows]
    ts = ops[tables.OP_TS].to_numpy(dtype=float)[rows]
    end = ops[tables.OP_END].to_numpy(dtype=float)[rows]
    outer = np.array([str(n).startswith("entire_frame_compile") for n in ops[tables.OP_NAME].to_numpy(dtype=object)[rows]],
                     dtype=bool)
    for t in pd.unique(tid):
        mine = tid == t
        s, e = merge_intervals(ts[mine], end[mine])
        for a, b in zip(s.tolist(), e.tolist(), strict=True):
            inside = mine & (ts >= a) & (ts < b)
            first = int(np.flatnonzero(inside)[np.argmin(ts[inside])])
            frames = int((inside & outer).sum()) or int(inside.sum() > 0)
            out.append({RC_STEP: int(step[first]), RC_TID: t, RC_TS: a, RC_END: b, RC_FRAMES: frames, RC_US: b - a})
    return pd.DataFrame(out, columns=list(RECOMPILE_COLUMNS)) if out else empty()
