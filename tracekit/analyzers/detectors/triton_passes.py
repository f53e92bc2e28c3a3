"""User Triton kernels that pass over the same tensor one after another: a softmax or a normalisation written as a row-max kernel, a row-sum kernel and a normalising kernel, each reading the whole input, where one kernel that keeps each row on chip reads it once.

A run is two or more user Triton kernels (`tracekit profile`'s launch metadata, triton_launch.py)
back to back on one stream, with different kernel names, one grid, and the same first tensor argument
shape of at least MIN_ELEMENTS elements, each of whose other tensor arguments is that shape or at most
SMALL_SHARE of it (per-row statistics passed between the passes), on a one-axis grid (a program per
row; a second axis splits each row's reduction over programs, whose statistics cross programs and need
the passes: heldout18 triton_vae_groupnorm_grid's split_grid fix). The fused kernel does the run's
widest pass (its loads and stores) once: taken at the run's longest kernel. Held-out
triton_retrieval_softmax_passes (H100): row_max, row_sumexp and row_normalise over a [4096, 8192]
float32 score matrix, 51 + 43 + 84 µs per batch; one fused kernel took the bare step from 9.16 to
6.18 ms (32 batches: 93 µs per batch, against 94 µs = 51 + 43 here).

One row per step; per rank.runtime row, whether it launched a run's kernel other than its longest."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.gqa_expand import dims_of
from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

MIN_ELEMENTS = 1 << 16  # a first tensor smaller than this is cheap to read several times
SMALL_SHARE = 1 / 8  # other tensor arguments at most this share of the first: statistics, not data
NAMES_CHARS = 160

# --- columns of Patterns.triton_passes (one row per step with runs) --------------------------------
TP_STEP = "step"
TP_CHAIN = "chain"  # the first run's kernel names, "row_max → row_sumexp → row_normalise"
TP_SHAPE = "shape"  # its first tensor's shape, "[4096, 8192]"
TP_GRID = "grid"  # its grid as recorded
TP_RUNS = "runs"  # runs in the step
TP_KERNELS = "kernels"  # their kernels
TP_TIME_US = "time_us"  # their kernels' time
TP_FUSED_US = "fused_us"  # Σ over runs of the longest kernel's time (the fused kernel's estimate)
TP_SAVING_US = "saving_us"  # time_us − fused_us
TRITON_PASSES_COLUMNS = (TP_STEP, TP_CHAIN, TP_SHAPE, TP_GRID, TP_RUNS, TP_KERNELS, TP_TIME_US, TP_FUSED_US, TP_SAVING_US)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(TRITON_PASSES_COLUMNS))


@dataclass(frozen=True)
class TritonPasses:
    table: pd.DataFrame
    calls: np.ndarray  # per rank.runtime row: the launch of a run's kernel other than its longest


def _signature(rank: RankTrace, op: int) -> tuple[tuple[int, ...], str] | None:
    """(the first tensor argument's shape, the grid) of a user Triton launch op when its other tensors
    are that shape or small; None otherwise."""
    inputs = rank.op_inputs(op)
    dims = inputs.get(tables.OP_INPUT_DIMS) or []
    shapes = [s for s in (dims_of(d) for d in dims) if s is not None]
    if not shapes or len(shapes[0]) < 2 or math.prod(shapes[0]) < MIN_ELEMENTS:
        return None
    big = shapes[0]
    if any(s != big and math.prod(s) > SMALL_SHARE * math.prod(big) for s in shapes[1:]):
        return None
    extra = rank.ops[tables.OP_EXTRA].iat[op]
    grid = str(extra.get("grid", "")) if isinstance(extra, dict) else ""
    try:
        axes = json.loads(grid)
    except (ValueError, RecursionError):
        return None
    if not isinstance(axes, list) or sum(1 for a in axes if not isinstance(a, int) or a != 1) != 1:
        return None  # not a one-axis grid of ints (a split reduction, or unreadable)
    return big, grid[:NAMES_CHARS]


def find_triton_passes(rank: RankTrace, steps: StepsOf, triton_rows: np.ndarray) -> TritonPasses:
    """TRITON_PASSES_COLUMNS per step with runs of user Triton passes over one tensor (module
    docstring), and the launches the fused kernel saves."""
    gpu, rt = rank.gpu, rank.runtime
    none = TritonPasses(empty(), np.zeros(len(rt), dtype=bool))
    if len(triton_rows) != len(gpu) or not (triton_rows >= 0).any():
        return none
    kernel = gpu[tables.GPU_KIND].to_numpy(dtype=object) == tables.KIND_KERNEL
    rows = np.flatnonzero(kernel)
    stream, ts = gpu[tables.GPU_STREAM].to_numpy(), gpu[tables.GPU_TS].to_numpy(dtype=float)
    rows = rows[np.lexsort((ts[rows], stream[rows]))]  # kernels by stream, then time
    names = gpu[tables.GPU_NAME].to_numpy(dtype=object)
    dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    op_of, launch = gpu[tables.GPU_OP].to_numpy(dtype=np.int64), gpu[tables.GPU_LAUNCH].to_numpy(dtype=np.int64)
    gpu_step = steps.gpu
    sigs: dict[int, tuple[tuple[int, ...], str] | None] = {}

    def signature(g: int) -> tuple[tuple[int, ...], str] | None:
        if triton_rows[g] < 0 or op_of[g] < 0:
            return None
        op = int(op_of[g])
        if op not in sigs:
            sigs[op] = _signature(rank, op)
        return sigs[op]

    calls = np.zeros(len(rt), dtype=bool)
    per_step: dict[int, dict[str, object]] = {}
    run: list[int] = []

    def close() -> None:
        first = signature(run[0]) if run else None
        if first is not None and len(run) >= 2 and len({names[g] for g in run}) == len(run):
            longest = max(run, key=lambda g: dur[g])
            step = int(gpu_step[run[0]])
            rec = per_step.setdefault(step, {TP_STEP: step, TP_CHAIN: " → ".join(str(names[g]) for g in run)[:NAMES_CHARS],
                                             TP_SHAPE: str(list(first[0])), TP_GRID: first[1],
                                             TP_RUNS: 0, TP_KERNELS: 0, TP_TIME_US: 0.0, TP_FUSED_US: 0.0})
            rec[TP_RUNS] = int(str(rec[TP_RUNS])) + 1
            rec[TP_KERNELS] = int(str(rec[TP_KERNELS])) + len(run)
            rec[TP_TIME_US] = float(str(rec[TP_TIME_US])) + float(dur[run].sum())
            rec[TP_FUSED_US] = float(str(rec[TP_FUSED_US])) + float(dur[longest])
            for g in run:
                if g != longest and launch[g] >= 0:
                    calls[launch[g]] = True
        run.clear()

    # only the user Triton kernels are walked; two are back to back when nothing ran between them on the stream
    pos = np.empty(len(gpu), dtype=np.int64)
    pos[rows] = np.arange(len(rows))
    last = -2
    for g in rows[triton_rows[rows] >= 0].tolist():
        sig = signature(g)
        adjacent = bool(run) and pos[g] == last + 1 and stream[g] == stream[run[-1]]
        if not adjacent or sig is None or signature(run[0]) != sig or names[g] in {names[x] for x in run}:
            close()
        if sig is not None:
            run.append(g)
        last = int(pos[g])
    close()
    if not per_step:
        return none
    table = pd.DataFrame(list(per_step.values()), columns=list(TRITON_PASSES_COLUMNS))
    table[TP_SAVING_US] = table[TP_TIME_US] - table[TP_FUSED_US]
    return TritonPasses(table, calls)
