"""The explicit causal masks a step builds for its masked SDPA calls: the ops that build each one (on the host or the device), their host time and the copy or kernels they run.

A mask built every step (`torch.full((L, L), -inf).triu(1).to(device)`, `torch.ones(L, L).tril()`)
costs the step its host ops, a host-to-device copy (pageable: the CPU blocks in it) or its kernels;
`is_causal=True` needs none of it. A build is the run of consecutive top-level ops on one thread
around an aten::tril / aten::triu of an L × L input, L the side of a masked SDPA call's mask
(attention_mask.py, MA_TRIANGLE): the ops just before it that create an L × L tensor (a factory op
whose size is [L, L]) and the ops just after it whose first input is the L × L mask (casts, copies to
the device, masked_fill, logical_not). One row per build in the selected steps; per rank.gpu row,
whether a build's op launched it; per rank.runtime row, whether it runs on a build's thread."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.attention_mask import (
    MA_MASK,
    MA_TRIANGLE,
    MASKED_OPS,
    TRIANGLE_OPS,
)
from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.analyzers.detectors.layers import under
from tracekit.analyzers.names import matches
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

FACTORY_OPS = re.compile(r"^aten::(full|ones|zeros|empty|rand|randn|arange|new_full|new_ones|new_zeros|new_empty)$")
BLOCKING_KINDS = ("memcpy", *tables.SYNC_KINDS)  # runtime calls whose time is a wait on the device, not the build's own
MAX_OPS = 16  # ops of one build at most (a longer run is not one mask's)

# --- columns of Patterns.mask_builds (one row per build) ------------------------------------------
MB_STEP = "step"
MB_TID = "tid"  # the thread that ran it
MB_START = "start_us"  # its first op's start and its last op's end (traced)
MB_END = "end_us"
MB_OPS = "ops"  # "aten::full → aten::triu → aten::to"
MB_SIDE = "side"  # L
MB_BLOCKED_US = "blocked_us"  # copy and sync calls inside it: the CPU waiting on the device
MB_HOST_US = "host_us"  # its span less those calls: the CPU building the mask
MB_GPU_US = "gpu_us"  # the copies and kernels its ops launched
MB_COPY_BYTES = "copy_bytes"  # host-to-device bytes among them
BUILD_COLUMNS = (MB_STEP, MB_TID, MB_START, MB_END, MB_OPS, MB_SIDE, MB_BLOCKED_US, MB_HOST_US, MB_GPU_US, MB_COPY_BYTES)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(BUILD_COLUMNS))


def mask_sides(masked: pd.DataFrame) -> set[int]:
    """Sides L of the masks of the masked SDPA calls (attention_mask.MASKED_COLUMNS rows) built by a
    triangle op in the steps ("[2048, 2048]" → 2048)."""
    out: set[int] = set()
    if not len(masked):
        return out
    for text, triangle in zip(masked[MA_MASK], masked[MA_TRIANGLE], strict=True):
        last = str(text).strip("[]").split(",")[-1].strip()
        if bool(triangle) and last.isdigit():
            out.add(int(last))
    return out


def _square(dims: object, side: int) -> bool:
    return (isinstance(dims, list) and len(dims) >= 2 and dims[-2:] == [side, side]
            and all(isinstance(x, int) and x == 1 for x in dims[:-2]))


def _touches(rank: RankTrace, row: int, name: str, side: int, before: bool) -> bool:
    """Op `row` (top-level) is part of building the L × L mask: before the triangle, a factory op of
    size [L, L]; after it, an op whose first input is the L × L mask."""
    inputs = rank.op_inputs(row)
    if before:
        concrete = inputs.get(tables.OP_CONCRETE_INPUTS) or []
        return bool(FACTORY_OPS.match(name)) and bool(concrete) and str(concrete[0]).replace(" ", "") == f"[{side},{side}]"
    dims = inputs.get(tables.OP_INPUT_DIMS) or []
    return name not in MASKED_OPS and bool(dims) and _square(dims[0], side)


def find_mask_builds(rank: RankTrace, masked: pd.DataFrame, steps: StepsOf,
                     rows: np.ndarray | None = None) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """(BUILD_COLUMNS rows, per rank.gpu row: launched by a build, per rank.runtime row: on a build's
    thread) for the masks of `masked` (the rank's masked_attention table) built in the selected steps."""
    ops, gpu, rt = rank.ops, rank.gpu, rank.runtime
    in_build, thread = np.zeros(len(gpu), dtype=bool), np.zeros(len(rt), dtype=bool)
    sides = mask_sides(masked)
    if not sides or not len(ops):
        return empty(), in_build, thread
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    parent = ops[tables.OP_PARENT].to_numpy(dtype=np.int64)
    tid = ops[tables.OP_TID].to_numpy()
    ts, end = ops[tables.OP_TS].to_numpy(dtype=float), ops[tables.OP_END].to_numpy(dtype=float)
    chosen = set(steps.gpu[rows].tolist()) if rows is not None else None
    top = np.flatnonzero(parent < 0)
    builds: list[tuple[list[int], int]] = []
    taken: set[int] = set()
    for row in np.flatnonzero(matches(names, TRIANGLE_OPS) & (parent < 0)).tolist():
        dims = rank.op_inputs(row).get(tables.OP_INPUT_DIMS) or []
        side = next((s for s in sides if dims and _square(dims[0], s)), None)
        if side is None or row in taken or (chosen is not None and int(steps.ops[row]) not in chosen):
            continue
        same = top[tid[top] == tid[row]]
        at = int(np.searchsorted(same, row))
        lo = hi = at
        while lo > 0 and at - lo < MAX_OPS and _touches(rank, int(same[lo - 1]), str(names[same[lo - 1]]), side, True):
            lo -= 1
        while hi + 1 < len(same) and hi - lo < MAX_OPS and _touches(rank, int(same[hi + 1]), str(names[same[hi + 1]]), side, False):
            hi += 1
        members = [int(x) for x in same[lo:hi + 1]]
        taken.update(members)
        builds.append((members, side))
    if not builds:
        return empty(), in_build, thread
    owner = under(ops, np.isin(np.arange(len(ops)), sorted(taken)), depth=8, outermost=True)
    owner[under(ops, np.isin(names, list(MASKED_OPS)), depth=8) >= 0] = -1  # attention is never the build's
    gpu_op = gpu[tables.GPU_OP].to_numpy(dtype=np.int64)
    launched_by = np.where(gpu_op >= 0, owner[np.maximum(gpu_op, 0)], -1)
    g_dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    g_bytes = pd.to_numeric(gpu[tables.GPU_BYTES], errors="coerce").fillna(0).to_numpy(dtype=float)
    g_memcpy = np.char.find(gpu[tables.GPU_NAME].to_numpy(dtype=str), "HtoD") >= 0
    rt_tid, rt_ts = rt[tables.RT_TID].to_numpy(), rt[tables.RT_TS].to_numpy(dtype=float)
    rt_dur = rt[tables.RT_DUR].to_numpy(dtype=float)
    blocking = np.isin(rt[tables.RT_KIND].to_numpy(dtype=object), BLOCKING_KINDS)
    recs = []
    for members, side in builds:
        start, stop, t = float(ts[members[0]]), float(end[members[-1]]), tid[members[0]]
        mine = np.isin(launched_by, members)
        in_build |= mine
        thread |= rt_tid == t
        inside = (rt_tid == t) & (rt_ts >= start) & (rt_ts < stop) & blocking
        blocked = float(rt_dur[inside].sum())
        recs.append({MB_STEP: int(steps.ops[members[0]]), MB_TID: t, MB_START: start, MB_END: stop,
                     MB_OPS: " → ".join(str(names[m]) for m in members), MB_SIDE: side, MB_BLOCKED_US: blocked,
                     MB_HOST_US: max(stop - start - blocked, 0.0), MB_GPU_US: float(g_dur[mine].sum()),
                     MB_COPY_BYTES: float(g_bytes[mine & g_memcpy].sum())})
    return pd.DataFrame(recs, columns=list(BUILD_COLUMNS)), in_build, thread
