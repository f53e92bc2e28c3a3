"""Generation without a KV cache: within a step, the same forward (top-level ops with weight GEMMs) repeated k ≥ 4 times back to back over a sequence that grows by a constant number of positions per repetition (`model(seq)[:, -1]` for every new token), which a KV cache turns into one prefill and one-position forwards.

A forward re-run over the whole sequence for every token shows as one block of top-level launching ops
(by op names) repeated back to back whose input shapes differ between repetitions only in sizes that
grow by a constant stride every repetition (the sequence length L, L + n, L + 2n ...; the flattened
rows B × L, B × (L + n) ... with stride B × n), and whose weight GEMMs (a 2-D weight of the same shape
in every repetition) read activations whose rows grow with it. A model that already has a cache runs
its weight GEMMs over the new position only after the prefill: their shapes do not change (only the
attention's cached keys grow), so it is not one; nor is a per-sample loop (sizes from the data), a
sweep over lengths (the stride as large as the first length) or a cache grown by torch.cat
(cache_growth.py: the forwards read one position each).

One row per step × thread with such a loop; per rank.gpu row the share of its kernel's work a
one-position forward keeps (stride / the repetition's length, 1 for an op whose shapes do not grow;
0 outside the loop's repetitions after the first, which is the prefill and stays) and its duration."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.analyzers.detectors.samples import MAX_LEN_VALUES, _ints
from tracekit.analyzers.detectors.toplevel import (
    StepOps,
    TopLevel,
    launching_bodies,
    step_sequences,
)
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

MIN_FORWARDS = 4  # repetitions per step: fewer is a short loop, not token-by-token generation
MIN_BODY_OPS = 3
# At least this share of the body's weight GEMMs read rows that grow: the model runs over the sequence,
# not over the new position (a cached decoder's weight GEMMs keep their shapes).
MIN_GROWING_GEMMS = 0.5
# Ops whose second input (addmm: third) is a weight when it is 2-D and the same in every repetition.
WEIGHT_GEMMS = {"aten::linear": 1, "aten::mm": 1, "aten::matmul": 1, "aten::addmm": 2}
# A launch call of the loop longer than its FAST_PERCENTILE-th percentile waited on a full launch queue
# (the GPU behind: a forward over the whole sequence launches faster than the GPU runs it, and without a
# sync the queue stays full): the part over it is the GPU's time, not the host's launch path.
FAST_PERCENTILE = 10.0
OPS_CHARS = 120

# --- columns of Patterns.generation (one row per step × thread with a cache-less generation loop) ----
GN_STEP = "step"
GN_THREAD = "thread"
GN_FORWARDS = "forwards"  # repetitions of the forward in the step (the first is the prefill)
GN_OPS = "ops"  # the forward's top-level ops that launch work, in words (first OPS_CHARS characters)
GN_FIRST = "first_len"  # the sequence length of the first forward (the size that grows by the stride)
GN_LAST = "last_len"  # ... of the last
GN_STRIDE = "stride"  # positions added per forward (n)
GN_GEMMS = "gemms"  # weight GEMM ops per forward whose rows grow
GN_LAUNCHES = "launches"  # launch calls per forward (mean)
GN_HOST_US = "host_us"  # the forwards after the first: their host time less what their launch calls
# spent over the loop's fast launch (FAST_PERCENTILE) and their syncs: the launch path
GN_GPU_US = "gpu_us"  # the forwards after the first: their kernels' time
GENERATION_COLUMNS = (GN_STEP, GN_THREAD, GN_FORWARDS, GN_OPS, GN_FIRST, GN_LAST, GN_STRIDE, GN_GEMMS,
                      GN_LAUNCHES, GN_HOST_US, GN_GPU_US)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(GENERATION_COLUMNS))


def _grids(rank: RankTrace, body: np.ndarray) -> list[np.ndarray] | None:
    """Per op of the body (a column of `body`, repetitions × ops), its flattened input dims in every
    repetition (repetitions × values); None when an op's dims differ in length between repetitions."""
    raw = rank.input_values(body.ravel(), tables.OP_INPUT_DIMS)
    memo: dict[int, list[int]] = {}
    flat = []
    for dims in raw:
        got = memo.get(id(dims))
        if got is None:
            got = memo[id(dims)] = list(_ints(dims))[:MAX_LEN_VALUES]
        flat.append(got)
    k, p = body.shape
    out = []
    for j in range(p):
        rows = [flat[t * p + j] for t in range(k)]
        if any(len(x) != len(rows[0]) for x in rows):
            return None
        out.append(np.asarray(rows, dtype=np.int64).reshape(k, len(rows[0])))
    return out


def _growth(grid: np.ndarray) -> np.ndarray | None:
    """The varying columns of one op's grid (repetitions × values) as indices; None when one of them does
    not grow by the same positive stride every repetition."""
    varying = np.flatnonzero((grid != grid[0]).any(axis=0))
    if not len(varying):
        return varying
    steps = np.diff(grid[:, varying], axis=0)
    if not ((steps == steps[:1]).all() and (steps[0] > 0).all()):
        return None
    return varying


def _weight_offset(rank: RankTrace, row: int, name: str) -> int | None:
    """Where a weight GEMM op's 2-D weight starts in its flattened input dims; None for any other op."""
    at = WEIGHT_GEMMS.get(name)
    dims = rank.op_inputs(row).get(tables.OP_INPUT_DIMS) or []
    if at is None or len(dims) <= at or not isinstance(dims[at], list) or len(dims[at]) != 2:
        return None
    return sum(len(list(_ints(d))) for d in dims[:at])


def _loop(rank: RankTrace, names: np.ndarray, body: np.ndarray) -> tuple[np.ndarray, int, int, int, int] | None:
    """(per body cell the share a one-position forward keeps (1 in the first repetition), first length,
    last length, stride, growing weight GEMMs per forward) of a repeated block that is a forward over a
    growing sequence; None for any other block."""
    grids = _grids(rank, body)
    if grids is None:
        return None
    k, p = body.shape
    found = [_growth(g) for g in grids]
    growth = [g for g in found if g is not None]
    if len(growth) < p or not any(len(g) for g in growth):
        return None
    gemms = growing = 0
    for j in range(p):
        offset = _weight_offset(rank, int(body[0, j]), str(names[body[0, j]]))
        g = growth[j]
        if offset is None:
            continue
        if ((g >= offset) & (g < offset + 2)).any():
            continue  # the "weight" changes shape: not a weight
        gemms += 1
        growing += bool(len(g)) and bool((g < offset).any())
    if not growing or growing < MIN_GROWING_GEMMS * gemms:
        return None
    # the stride: the smallest per-repetition growth of any size (the sequence dim; B × L grows by B × n)
    stride = min(int(grids[j][1, c] - grids[j][0, c]) for j in range(p) for c in growth[j].tolist())
    j, c = next((j, c) for j in range(p) for c in growth[j].tolist()
                if grids[j][1, c] - grids[j][0, c] == stride)
    first, last = int(grids[j][0, c]), int(grids[j][-1, c])
    if stride >= first:
        return None  # lengths 128, 256, 384 ...: a sweep over lengths, not tokens appended to a prompt
    share = np.ones((k, p))
    for j, g in enumerate(growth):
        if len(g):
            c = int(g[0])
            step = float(grids[j][1, c] - grids[j][0, c])
            share[1:, j] = step / grids[j][1:, c]
    return share, first, last, stride, growing


@dataclass(frozen=True)
class _Issued:
    """Rows of rank.gpu or rank.runtime grouped by the top-level op that issued them (sorted once: a
    trace with a generation loop in every one of many steps stays linear)."""

    order: np.ndarray
    keys: np.ndarray  # the issuing op of each row of `order`, ascending

    @classmethod
    def of(cls, top_of_row: np.ndarray) -> _Issued:
        order = np.argsort(top_of_row, kind="stable")
        return cls(order, top_of_row[order])

    def rows(self, cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the rows the ops `cells` issued, per row the index of its op in `cells`)."""
        lo = np.searchsorted(self.keys, cells, "left")
        counts = np.searchsorted(self.keys, cells, "right") - lo
        offsets = np.repeat(lo - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
        return self.order[offsets + np.arange(int(counts.sum()))], np.repeat(np.arange(len(cells)), counts)


def find_generation(rank: RankTrace, steps: StepsOf, top: TopLevel | None = None,
                    seqs: tuple[StepOps, ...] | None = None,
                    bodies: list[tuple[int, int, np.ndarray]] | None = None) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """GENERATION_COLUMNS rows, one per step and thread whose launching top-level ops are one forward
    repeated k ≥ MIN_FORWARDS times over a growing sequence, and per rank.gpu row the share of its work a
    one-position forward keeps (0: not launched by a forward after the first) and its duration (µs; NaN
    where the share is 0)."""
    ops, rt, gpu = rank.ops, rank.runtime, rank.gpu
    share = np.zeros(len(gpu))
    if not len(ops) or not len(rt) or not len(gpu):
        return empty(), share, np.full(len(gpu), np.nan)
    top = top if top is not None else TopLevel.of(rank)
    seqs = seqs if seqs is not None else step_sequences(rank, steps, top)
    launches, gpu_top = top.launches, top.gpu_top
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    ts, end = ops[tables.OP_TS].to_numpy(dtype=float), ops[tables.OP_END].to_numpy(dtype=float)
    gpu_dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    kinds = rt[tables.RT_KIND].to_numpy(dtype=object)
    rt_dur = rt[tables.RT_DUR].to_numpy(dtype=float)
    is_sync, is_launch = np.isin(kinds, tables.SYNC_KINDS), np.isin(kinds, tables.LAUNCH_KINDS)
    rows = []
    kernels_of: _Issued | None = None
    calls_of: _Issued | None = None
    found = bodies if bodies is not None else launching_bodies(seqs, launches, names, MIN_FORWARDS, MIN_BODY_OPS)
    for step, thread, body in found:
        repeats, period = body.shape
        loop = _loop(rank, names, body)
        if loop is None:
            continue
        kept, first, last, stride, gemms = loop
        if kernels_of is None or calls_of is None:
            kernels_of, calls_of = _Issued.of(gpu_top), _Issued.of(top.rt_top)
        later = body[1:].ravel()
        hit, cell = kernels_of.rows(later)
        share[hit] = kept[1:].ravel()[cell]
        issued, cell = calls_of.rows(body.ravel())
        fast = float(np.percentile(rt_dur[issued[is_launch[issued]]], FAST_PERCENTILE))
        calls = issued[cell >= period]  # the forwards after the first
        waited = float(rt_dur[calls[is_sync[calls]]].sum()
                       + np.maximum(rt_dur[calls[is_launch[calls]]] - fast, 0.0).sum())
        rows.append({GN_STEP: step, GN_THREAD: thread, GN_FORWARDS: int(repeats),
                     GN_OPS: " → ".join(str(n).removeprefix("aten::") for n in names[body[0]])[:OPS_CHARS],
                     GN_FIRST: first, GN_LAST: last, GN_STRIDE: stride, GN_GEMMS: gemms,
                     GN_LAUNCHES: float(launches[body.ravel()].sum()) / repeats,
                     GN_HOST_US: max(float(end[later].max() - ts[body[1, 0]]) - waited, 0.0),
                     GN_GPU_US: float(gpu_dur[hit].sum())})
    table = pd.DataFrame(rows, columns=list(GENERATION_COLUMNS)) if rows else empty()
    return table, share, np.where(share > 0, gpu_dur, np.nan)
