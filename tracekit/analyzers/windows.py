"""Step windows of a rank: ProfilerStep ranges, repeats found in a trace without steps, or the GPU's span."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.trace import tables
from tracekit.trace.model import RankTrace

SCOPE_STEPS = "steps"  # ProfilerStep#N ranges
SCOPE_INFERRED = "inferred"  # repeats of the top-level op sequence (decode tokens, loop iterations)
SCOPE_TRACE = "trace"  # one pseudo-step -1: first GPU launch to the end of the last GPU activity

MIN_REPEATS = 3  # an op sequence must repeat this often to be taken as steps
MIN_COVERAGE = 0.5  # ... and its repeats must hold at least this share of the top-level ops
MAX_PERIOD_CANDIDATES = 32  # most frequent op names whose spacing proposes a period


@dataclass(frozen=True)
class StepWindows:
    """The steps of one rank: their numbers and windows, and the step each event counts in.

    `ts`/`end` bound the time a step's span and GPU busy time are measured over. For ProfilerSteps
    that is the CPU-side range, stretched to the end of the GPU work the step launched, and starting
    where the previous step's ended (_profiler_steps); for inferred steps it is the GPU side: from the first activity an iteration launched to the first
    activity of the next one (a loop whose GPU runs behind the CPU still gets iteration-long steps).
    The `*_pos` arrays give each row's step as a position in `numbers` (-1: in no step).
    """

    scope: str
    numbers: np.ndarray
    ts: np.ndarray
    end: np.ndarray
    gpu_pos: np.ndarray
    rt_pos: np.ndarray
    op_pos: np.ndarray
    an_pos: np.ndarray

    def __len__(self) -> int:
        return len(self.numbers)

    def step_numbers(self, positions: np.ndarray) -> np.ndarray:
        """Step numbers of rows given their positions (-1 stays -1: in no step)."""
        if not len(self.numbers):
            return np.full(len(positions), -1, dtype=np.int64)
        return np.where(positions >= 0, self.numbers[np.maximum(positions, 0)], -1).astype(np.int64)


def step_windows(rank: RankTrace) -> StepWindows:
    """The rank's steps: ProfilerStep ranges when it has them, else repeats of its top-level op
    sequence, else one window from the first GPU launch to the end of the last GPU activity."""
    if len(rank.steps):
        return _profiler_steps(rank)
    inferred = _inferred_steps(rank)
    return inferred if inferred is not None else _trace_window(rank)


def _positions(numbers: np.ndarray, values: np.ndarray) -> np.ndarray:
    return pd.Index(numbers).get_indexer(values) if len(values) else np.empty(0, dtype=np.int64)


def _profiler_steps(rank: RankTrace) -> StepWindows:
    """ProfilerStep windows that follow the work: a step ends when both its CPU range and the GPU
    work it launched have ended, and the next step starts there. Steps tile the recording from the
    first mark on, so their spans add up to the wall time, and a loop whose GPU runs behind the CPU
    gets steps as long as the GPU takes per iteration, not as long as the CPU takes to queue them."""
    steps, gpu = rank.steps, rank.gpu
    numbers = steps[tables.STEP_NUMBER].to_numpy()
    cpu0 = steps[tables.STEP_TS].to_numpy(dtype=float)
    cpu1 = steps[tables.STEP_END].to_numpy(dtype=float)
    gpu_pos = _positions(numbers, gpu[tables.GPU_STEP].to_numpy())
    gpu_end = np.full(len(numbers), -np.inf)
    inside = gpu_pos >= 0
    if inside.any():
        np.maximum.at(gpu_end, gpu_pos[inside], gpu[tables.GPU_END].to_numpy(dtype=float)[inside])
    w1 = np.maximum.accumulate(np.maximum(cpu1, gpu_end))
    w0 = cpu0.copy()
    w0[1:] = w1[:-1]  # steps tile the time: the gap before a mark (the mark itself) is the next step's
    return StepWindows(
        scope=SCOPE_STEPS, numbers=numbers, ts=w0, end=w1, gpu_pos=gpu_pos,
        rt_pos=_positions(numbers, rank.runtime[tables.RT_STEP].to_numpy()),
        op_pos=_positions(numbers, rank.ops[tables.OP_STEP].to_numpy()),
        an_pos=_positions(numbers, rank.annotations[tables.AN_STEP].to_numpy()),
    )


def _first_gpu_launch(rank: RankTrace) -> float | None:
    """Start of the first call that put work on the GPU, or of the first GPU activity."""
    candidates = []
    if len(rank.gpu):
        candidates.append(float(rank.gpu[tables.GPU_TS].min()))
    rt = rank.runtime
    if len(rt):
        linked = rt[rt[tables.RT_KIND].isin(tables.LINKED_KINDS)]
        if len(linked):
            candidates.append(float(linked[tables.RT_TS].min()))
    return min(candidates) if candidates else None


def _trace_window(rank: RankTrace) -> StepWindows:
    """One pseudo-step. With GPU work it runs from the first GPU launch to the end of the last GPU
    activity: the CPU prologue before (imports, model build) and the tail after are not GPU idle
    time. Without GPU work it spans every event."""
    start = _first_gpu_launch(rank)
    if start is not None and len(rank.gpu):
        t0, t1 = start, float(rank.gpu[tables.GPU_END].max())
    else:
        firsts = [float(t["ts"].min()) for t in (rank.gpu, rank.runtime, rank.ops, rank.annotations) if len(t)]
        lasts = [float(t["end"].max()) for t in (rank.gpu, rank.runtime, rank.ops, rank.annotations) if len(t)]
        t0 = min(firsts) if firsts else 0.0
        t1 = max(lasts) if lasts else t0
    zeros = [np.zeros(len(t), dtype=np.int64) for t in (rank.gpu, rank.runtime, rank.ops, rank.annotations)]
    return StepWindows(SCOPE_TRACE, np.array([-1]), np.array([t0]), np.array([t1]), *zeros)


def longest_true_run(flags: np.ndarray) -> tuple[int, int]:
    """(start, length) of the longest run of True values; (0, 0) when there is none."""
    if not len(flags) or not flags.any():
        return 0, 0
    padded = np.concatenate([[False], flags, [False]]).astype(np.int8)
    edges = np.diff(padded)
    starts, stops = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    k = int(np.argmax(stops - starts))
    return int(starts[k]), int(stops[k] - starts[k])


def find_period(codes: np.ndarray, *, min_repeats: int = MIN_REPEATS) -> tuple[int, int, int] | None:
    """(start, period, repeats) of the longest stretch of `codes` that repeats one block back to back.

    Candidate periods are the usual spacing of the most frequent codes (a name that occurs once per
    iteration is spaced by the iteration's length). For a period d, positions x with codes[x] ==
    codes[x + d] form runs; a run of length L covers L + d positions, i.e. (L + d) // d repeats.
    The candidate covering most positions wins; on a tie the shorter period (the fundamental one).
    """
    n = len(codes)
    if n < min_repeats:
        return None
    values, counts = np.unique(codes, return_counts=True)
    periods: set[int] = set()
    for v in values[np.argsort(-counts, kind="stable")[:MAX_PERIOD_CANDIDATES]]:
        pos = np.flatnonzero(codes == v)
        if len(pos) < min_repeats:
            continue
        gaps, gap_counts = np.unique(np.diff(pos), return_counts=True)
        periods.add(int(gaps[np.argmax(gap_counts)]))
    best: tuple[int, int, int, int] | None = None  # (-covered, period, start, repeats)
    for d in sorted(periods):
        if d <= 0 or d >= n:
            continue
        start, length = longest_true_run(codes[:-d] == codes[d:])
        repeats = (length + d) // d
        if repeats < min_repeats:
            continue
        key = (-(repeats * d), d, start, repeats)
        if best is None or key < best:
            best = key
    return None if best is None else (best[2], best[1], best[3])


def _inferred_steps(rank: RankTrace) -> StepWindows | None:
    """Iterations of the top-level op sequence on the thread that launched the most GPU work."""
    gpu, ops, rt = rank.gpu, rank.ops, rank.runtime
    op_of = gpu[tables.GPU_OP].to_numpy() if len(gpu) else np.empty(0, dtype=np.int64)
    if not len(ops) or not (op_of >= 0).any():
        return None
    tids = ops[tables.OP_TID].to_numpy()[op_of[op_of >= 0]]
    values, counts = np.unique(tids, return_counts=True)
    tid = values[np.argmax(counts)]
    top = ops[(ops[tables.OP_PARENT].to_numpy() < 0) & (ops[tables.OP_TID].to_numpy() == tid)]
    top = top.sort_values(tables.OP_TS, kind="stable")
    codes = pd.factorize(top[tables.OP_NAME].to_numpy(dtype=object))[0]
    found = find_period(codes)
    if found is None:
        return None
    start, period, repeats = found
    if repeats * period < MIN_COVERAGE * len(codes):
        return None
    op_ts = top[tables.OP_TS].to_numpy(dtype=float)
    op_end = top[tables.OP_END].to_numpy(dtype=float)
    cpu_starts = op_ts[start: start + repeats * period: period]
    cpu_stop = float(op_end[start: start + repeats * period].max())
    cpu_ends = np.append(cpu_starts[1:], cpu_stop)

    def by_time(t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(cpu_starts, t, side="right") - 1
        kk = np.maximum(k, 0)
        return np.where((k >= 0) & (t < cpu_ends[kk]), k, -1).astype(np.int64)

    rt_pos = by_time(rt[tables.RT_TS].to_numpy(dtype=float)) if len(rt) else np.empty(0, dtype=np.int64)
    launch = gpu[tables.GPU_LAUNCH].to_numpy()
    gpu_pos = np.full(len(gpu), -1, dtype=np.int64)
    linked = launch >= 0
    if len(rt):
        gpu_pos[linked] = rt_pos[launch[linked]]
    # the GPU side: each iteration from its first activity to the next iteration's first one
    g_ts, g_end = gpu[tables.GPU_TS].to_numpy(dtype=float), gpu[tables.GPU_END].to_numpy(dtype=float)
    inside = gpu_pos >= 0
    if np.unique(gpu_pos[inside]).size != repeats:
        return None  # an iteration launched nothing: not a loop of GPU steps
    first = np.full(repeats, np.inf)
    np.minimum.at(first, gpu_pos[inside], g_ts[inside])
    w0 = first
    w1 = np.append(first[1:], g_end[inside & (gpu_pos == repeats - 1)].max())
    if (w1 <= w0).any():
        return None
    return StepWindows(
        scope=SCOPE_INFERRED, numbers=np.arange(repeats), ts=w0, end=w1, gpu_pos=gpu_pos,
        rt_pos=rt_pos, op_pos=by_time(ops[tables.OP_TS].to_numpy(dtype=float)),
        an_pos=by_time(rank.annotations[tables.AN_TS].to_numpy(dtype=float)) if len(rank.annotations)
        else np.empty(0, dtype=np.int64),
    )
