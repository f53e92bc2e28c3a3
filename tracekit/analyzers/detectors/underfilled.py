"""Under-filled launch runs: one kernel launched back to back on one stream, each launch with a grid far smaller than the GPU's SM count and long enough that its GPU time, not the launch, sets the pace (a Python loop launching one kernel per segment, head or sample)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.sequences import _stream_order
from tracekit.analyzers.kernels import COMMUNICATION, GEMM, SLEEP
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

MIN_RUN = 16  # consecutive launches of one kernel and grid: fewer is a short loop, not a batch of pieces
# A launch of at most this share of the SMs in thread blocks leaves most of the GPU idle (one block
# runs on one SM; a grid of 8 blocks on 132 SMs fills 6 %).
MAX_FILL = 0.5
# Kernels shorter than this are launch-bound territory (cuda_graphs' ground): the gap between two
# launches, not the kernel, sets the pace.
MIN_KERNEL_US = 10.0
# The run's kernels busy for at least this share of its wall time (first start to last end): the GPU
# sets its pace. A loop whose kernels wait for their launches is launch-bound (cuda_graphs' ground).
MIN_BUSY_SHARE = 0.5
# Another stream's kernels overlapping the run for at most this share of its wall time: the run
# alone leaves the SMs idle (concurrent streams could fill them).
MAX_OTHER_SHARE = 0.25
# GEMM loops are batch_bmm's (same-shape GEMMs into one bmm); communication kernels use small grids
# by design; a sleep kernel does no work.
SKIP_CLASSES = frozenset({GEMM, COMMUNICATION, SLEEP})

# --- columns of Patterns.underfilled (one row per kernel name and grid) ---------------------------
UF_KERNEL = "kernel"
UF_BLOCKS = "blocks"  # thread blocks per launch (grid x × y × z)
UF_RUNS = "runs"  # runs of >= MIN_RUN back-to-back launches
UF_KERNELS = "kernels"  # launches over all runs
UF_PER_RUN = "per_run"  # median launches per run
UF_BUSY_US = "busy_us"  # summed kernel time
UF_KERNEL_US = "kernel_us"  # median kernel time
UF_MERGED_US = "merged_us"  # Σ over runs: ⌈launches × blocks / SMs⌉ waves × the median kernel time
UNDERFILLED_COLUMNS = (UF_KERNEL, UF_BLOCKS, UF_RUNS, UF_KERNELS, UF_PER_RUN, UF_BUSY_US, UF_KERNEL_US, UF_MERGED_US)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(UNDERFILLED_COLUMNS))


def _run_bounds(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the runs of equal consecutive values in `keys` (end exclusive)."""
    change = np.flatnonzero(keys[1:] != keys[:-1]) + 1
    starts = np.concatenate(([0], change))
    ends = np.concatenate((change, [len(keys)]))
    return starts, ends


def find_underfilled(rank: RankTrace, classes: np.ndarray, num_sms: int | None,
                     rows: np.ndarray | None = None) -> tuple[pd.DataFrame, np.ndarray]:
    """(UNDERFILLED_COLUMNS per kernel and grid, per rank.gpu row: in such a run) over the kernels
    of `rows` (the headline steps' activities; None: those inside ProfilerSteps)."""
    gpu = rank.gpu
    mask = np.zeros(len(gpu), dtype=bool)
    order = _stream_order(rank, rows=rows)
    if not num_sms or len(order) < MIN_RUN:
        return empty(), mask
    grid_parts = np.stack([gpu[c].to_numpy()[order] for c in tables.GPU_GRID]).astype(float)
    blocks = np.where((grid_parts > 0).all(axis=0), np.prod(grid_parts, axis=0), -1.0)
    name = gpu[tables.GPU_NAME].to_numpy(dtype=object)[order]
    name_code = pd.factorize(name)[0]
    stream = gpu[tables.GPU_STREAM].to_numpy()[order]
    step = gpu[tables.GPU_STEP].to_numpy()[order]
    # one key per (stream, step, name, grid): a run is a stretch of equal keys in stream order
    key = pd.factorize(pd.MultiIndex.from_arrays([pd.factorize(stream)[0], pd.factorize(step)[0], name_code,
                                                   blocks]))[0]
    starts, ends = _run_bounds(key)
    n = ends - starts
    head = order[starts]
    fill = blocks[starts] / num_sms
    eligible = (n >= MIN_RUN) & (blocks[starts] > 0) & (fill <= MAX_FILL) & ~np.isin(classes[head], list(SKIP_CLASSES))
    if not eligible.any():
        return empty(), mask
    ts = gpu[tables.GPU_TS].to_numpy(dtype=float)
    end = gpu[tables.GPU_END].to_numpy(dtype=float)
    dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    # other streams' kernel time inside a run's wall: kernels by start, prefix sums of their durations
    by_start = order[np.argsort(ts[order], kind="stable")]
    starts_sorted = ts[by_start]
    cum = np.concatenate(([0.0], np.cumsum(dur[by_start])))
    recs = []
    for s, e in zip(starts[eligible].tolist(), ends[eligible].tolist(), strict=True):
        run = order[s:e]
        durs = dur[run]
        median = float(np.median(durs))
        if median < MIN_KERNEL_US:
            continue
        t0, t1 = float(ts[run].min()), float(end[run].max())
        wall = t1 - t0
        inside = cum[np.searchsorted(starts_sorted, t1, side="left")] - cum[np.searchsorted(starts_sorted, t0, side="left")]
        if wall <= 0 or float(durs.sum()) < MIN_BUSY_SHARE * wall or inside - float(durs.sum()) > MAX_OTHER_SHARE * wall:
            continue
        b = float(blocks[s])
        mask[run] = True
        recs.append({UF_KERNEL: name[s], UF_BLOCKS: b, "n": len(run), UF_BUSY_US: float(durs.sum()),
                     "median": median, UF_MERGED_US: math.ceil(len(run) * b / num_sms) * median})
    if not recs:
        return empty(), mask
    frame = pd.DataFrame(recs)
    out = frame.groupby([UF_KERNEL, UF_BLOCKS], sort=False).agg(
        **{UF_RUNS: ("n", "size"), UF_KERNELS: ("n", "sum"), UF_PER_RUN: ("n", "median"),
           UF_BUSY_US: (UF_BUSY_US, "sum"), UF_KERNEL_US: ("median", "median"), UF_MERGED_US: (UF_MERGED_US, "sum")})
    out = out.reset_index().sort_values(UF_BUSY_US, ascending=False, kind="stable").reset_index(drop=True)
    return out[list(UNDERFILLED_COLUMNS)], mask
