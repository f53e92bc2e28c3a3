"""A fixed context projected again for every generated token: an encoder–decoder's cross-attention keys and values (`k_proj(encoder_out)`, `v_proj(encoder_out)`) recomputed in every layer at every decoding step, where a cross-attention cache projects them once per sequence.

Decoding shows as one forward (top-level launching ops) repeated k ≥ MIN_FORWARDS times back to back in
a step, with a token-selection op (argmax, sampling, top-k) in each repetition. Its weight GEMMs
(`aten::linear`/`addmm`/`mm`/`matmul` with a 2-D weight) mostly read the new positions' few rows; a
GEMM whose input dims are the same in every repetition and whose rows are at least MIN_ROWS and
ROWS_RATIO× the fewest rows of the forward's weight GEMMs projects the same context each time, when
such GEMMs are at most MAX_CONTEXT_SHARE of the forward's (the others read the new tokens; an encoder
run over batches of one shape, pooled by an argmax, has them all large) (held-out
cross_kv_recompute, H100: 12 projections of 32 × 1,500 encoder frames per forward, 16 forwards a step:
27.5 of the 63.9 ms unprofiled step; cached, the step took 33.5 ms). A cached encoder–decoder runs
those GEMMs in the first forward only, so the later repetitions do not hold them and this finds
nothing; a diffusion sampler's text context is smaller than its latent rows, so it is not one either.

One row per step × thread with such projections; per rank.runtime row, whether such a projection in a
forward after the first issued it."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

# the decoding loop: generation.py's thresholds (find_all.py searches the repeated forwards once for both)
from tracekit.analyzers.detectors.generation import (
    MIN_BODY_OPS,
    MIN_FORWARDS,
    WEIGHT_GEMMS,
    _Issued,
)
from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.analyzers.detectors.samples import _ints
from tracekit.analyzers.detectors.toplevel import (
    StepOps,
    TopLevel,
    launching_bodies,
    step_sequences,
)
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

MIN_ROWS = 256  # a context of fewer rows costs little to project again
ROWS_RATIO = 16.0  # the context's rows over the fewest rows of the forward's weight GEMMs
MAX_CONTEXT_SHARE = 0.5  # of the forward's weight GEMMs at most: the rest read the new tokens
TOKEN_SELECT = frozenset({"aten::argmax", "aten::multinomial", "aten::topk", "aten::sort", "aten::max",
                          "aten::argsort"})

# --- columns of Patterns.context_projection (one row per step × thread) -------------------------------
CX_STEP = "step"
CX_THREAD = "thread"
CX_FORWARDS = "forwards"  # repetitions of the forward in the step
CX_GEMMS = "gemms"  # projections of the fixed context per forward
CX_ROWS = "rows"  # the context's rows (largest of those GEMMs)
CX_QUERY_ROWS = "query_rows"  # the fewest rows of the forward's weight GEMMs
CX_SHAPE = "shape"  # the context projection's input dims, "32×1500×1024 @ 1024×1024"
CX_GPU_US = "gpu_us"  # their kernels' time in the forwards after the first
CX_CALLS = "calls"  # their launch calls in the forwards after the first
CONTEXT_COLUMNS = (CX_STEP, CX_THREAD, CX_FORWARDS, CX_GEMMS, CX_ROWS, CX_QUERY_ROWS, CX_SHAPE, CX_GPU_US, CX_CALLS)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(CONTEXT_COLUMNS))


@dataclass(frozen=True)
class ContextProjection:
    """The table; per rank.runtime row a re-projection's call (what the rule's what-if removes)."""

    table: pd.DataFrame
    calls: np.ndarray


def _gemm_dims(rank: RankTrace, row: int, name: str) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(activation dims, weight dims) of a weight GEMM op, None for anything else (untrusted shapes)."""
    at = WEIGHT_GEMMS.get(name)
    dims = rank.op_inputs(row).get(tables.OP_INPUT_DIMS) or []
    if at is None or len(dims) <= at or not isinstance(dims[at], list) or len(dims[at]) != 2:
        return None
    act, weight = tuple(_ints(dims[at - 1])), tuple(_ints(dims[at]))
    return (act, weight) if len(act) >= 2 and len(weight) == 2 else None


def _context_cells(rank: RankTrace, names: np.ndarray, body: np.ndarray) -> tuple[list[int], int, int, str]:
    """(body columns that project a fixed context, its rows, the fewest rows, the first one's shape text)."""
    k, p = body.shape
    fixed: list[tuple[int, int, str]] = []
    fewest, gemms = math.inf, 0
    for j in range(p):
        name = str(names[body[0, j]])
        if name not in WEIGHT_GEMMS:
            continue
        shapes = [_gemm_dims(rank, int(body[t, j]), name) for t in range(k)]
        if any(s is None for s in shapes):
            continue
        rows = [math.prod(s[0][:-1]) for s in shapes if s is not None]
        gemms += 1
        fewest = min(fewest, rows[-1])
        first = shapes[0]
        if first is not None and all(s == first for s in shapes):
            text = f"{'×'.join(map(str, first[0]))} @ {'×'.join(map(str, first[1]))}"
            fixed.append((j, rows[0], text))
    if not fixed or not math.isfinite(fewest):
        return [], 0, 0, ""
    big = [f for f in fixed if f[1] >= MIN_ROWS and f[1] >= ROWS_RATIO * fewest]
    if not big or len(big) > MAX_CONTEXT_SHARE * gemms:  # most GEMMs large: an encoder over batches, no decoder
        return [], 0, 0, ""
    top = max(big, key=lambda f: f[1])
    return [f[0] for f in big], top[1], int(fewest), top[2]


def find_context_projections(rank: RankTrace, steps: StepsOf, top: TopLevel | None = None,
                             seqs: tuple[StepOps, ...] | None = None,
                             bodies: list[tuple[int, int, np.ndarray]] | None = None) -> ContextProjection:
    """CONTEXT_COLUMNS per step × thread whose decoding loop projects a fixed context in every forward
    (`bodies`: toplevel.launching_bodies at MIN_FORWARDS and MIN_BODY_OPS, when already found)."""
    ops, rt, gpu = rank.ops, rank.runtime, rank.gpu
    calls_mask = np.zeros(len(rt), dtype=bool)
    none = ContextProjection(empty(), calls_mask)
    if not len(ops) or not len(rt) or not len(gpu):
        return none
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    if not np.isin(names, list(TOKEN_SELECT)).any():
        return none
    top = top if top is not None else TopLevel.of(rank)
    seqs = seqs if seqs is not None else step_sequences(rank, steps, top)
    gpu_dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    is_launch = np.isin(rt[tables.RT_KIND].to_numpy(dtype=object), tables.LAUNCH_KINDS)
    selects = np.isin(names[top.top], list(TOKEN_SELECT)) if len(top.top) else np.zeros(0, dtype=bool)
    out = []
    kernels_of: _Issued | None = None
    calls_of: _Issued | None = None
    found = bodies if bodies is not None else launching_bodies(seqs, top.launches, names, MIN_FORWARDS, MIN_BODY_OPS)
    for step, thread, body in found:
        repeats = len(body)
        if not selects[body[0]].any():
            continue  # no token chosen per repetition: a loop, not decoding
        cells, rows, fewest, shape = _context_cells(rank, names, body)
        if not cells:
            continue
        if kernels_of is None or calls_of is None:
            kernels_of, calls_of = _Issued.of(top.gpu_top), _Issued.of(top.rt_top)
        later = body[1:, cells].ravel()
        hit, _ = kernels_of.rows(later)
        issued, _ = calls_of.rows(later)
        calls_mask[issued] = True
        out.append({CX_STEP: step, CX_THREAD: thread, CX_FORWARDS: int(repeats),
                    CX_GEMMS: len(cells), CX_ROWS: rows, CX_QUERY_ROWS: fewest, CX_SHAPE: shape,
                    CX_GPU_US: float(gpu_dur[hit].sum()), CX_CALLS: int(is_launch[issued].sum())})
    if not out:
        return none
    return ContextProjection(pd.DataFrame(out, columns=list(CONTEXT_COLUMNS)), calls_mask)
