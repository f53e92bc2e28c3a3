"""Kernel sequences behind the suggestion rules: elementwise chains and same-shape GEMM loops (unfused attention: attention.py).

Kineto records no tensor identities, so "between the same tensors" is read from shapes: two kernels
are linked when they run back to back on one stream (no other kernel between them) and the output
shape of the first one's op is among the input shapes of the second one's op."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analyzers.costs import attribution
from tracekit.analyzers.costs.op_args import DTYPE_SIZE, OpArgs, broadcast, widest_float
from tracekit.analyzers.detectors.chain_walk import OpShapes, chain_nodes
from tracekit.analyzers.kernels import (
    ELEMENTWISE,
    GEMM,
    LIB_INDUCTOR,
    LIB_TRITON,
    NORMALIZATION,
)
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

FUSABLE_CLASSES = frozenset({ELEMENTWISE, NORMALIZATION})
PREFUSED_LIBRARIES = frozenset({LIB_INDUCTOR, LIB_TRITON})  # generated kernels: already fused
_OpShapes = OpShapes  # name, input (shape, dtype)s, output (shape, dtype)
# Ops never chained: multi-tensor / optimizer updates, RNG fills, ops without a tensor output.
NO_CHAIN_OP = re.compile(r"^aten::(_foreach_|_fused_|fill_|zero_|normal_|uniform_|random_|bernoulli_|"
                         r"exponential_|empty|resize_|set_|copy_)")
# Ancestors under which same-shape consecutive ops are usually different tensors (per-parameter loops).
NO_CHAIN_ANCESTOR = re.compile(r"^Optimizer\.|AccumulateGrad|zero_grad|^aten::_foreach_")
ANCESTOR_DEPTH = 6

LOOP_MIN_RUN = 8  # consecutive same-shape GEMM kernels that count as a loop

# --- columns of Patterns.chains (one row per distinct elementwise chain) -------------------------
CH_OPS = "ops"  # "aten::mul → aten::add → aten::gelu"
CH_SHAPE = "shape"  # the shape flowing along the chain, e.g. "[8192, 8192]"
CH_DTYPE = "dtype"
CH_COUNT = "count"  # occurrences
CH_KERNELS = "kernels"  # kernels over all occurrences
CH_TIME_US = "time_us"  # summed kernel time over all occurrences
CH_BYTES = "bytes"  # summed estimated kernel bytes (NaN if any unknown)
CH_AVOIDED_BYTES = "avoided_bytes"  # 2 x intermediate bytes per link, over all occurrences
CH_STEPS = "steps"  # distinct steps the chain ran in

# --- columns of Patterns.loops (one row per GEMM signature that ran in loops) -------------------
LP_NAME = "name"
LP_OP = "op"
LP_SHAPES = "shapes"
LP_DTYPE = "dtype"
LP_RUNS = "runs"  # loop occurrences (runs of >= LOOP_MIN_RUN consecutive kernels)
LP_GEMMS = "gemms"  # kernels over all runs
LP_PER_RUN = "per_run"  # median kernels per run
LP_WALL_US = "wall_us"  # summed GPU wall time of the runs (first start to last end)
LP_BUSY_US = "busy_us"  # summed kernel time
LP_KERNEL_US = "kernel_us"  # median kernel duration
LP_BLOCKS = "blocks"  # median thread blocks per kernel (grid x*y*z), -1 unknown
LP_FLOPS = "flops"  # total, NaN unknown
LP_BYTES = "bytes"  # total, NaN unknown


class _Inputs:
    """Recorded tensor inputs of op rows, decoded on demand and cached."""

    def __init__(self, ops: pd.DataFrame):
        self.dims = ops[tables.OP_INPUT_DIMS].to_numpy(dtype=object) if len(ops) else np.empty(0, dtype=object)
        self.types = ops[tables.OP_INPUT_TYPES].to_numpy(dtype=object) if len(ops) else np.empty(0, dtype=object)
        self.cache: dict[int, list[tuple[tuple[int, ...], str]] | None] = {}
        # equal recorded values are one shared object (OpInputStore.decode_rows): decoded once per pair
        self.by_value: dict[tuple[int, int], list[tuple[tuple[int, ...], str]] | None] = {}

    def __call__(self, row: int) -> list[tuple[tuple[int, ...], str]] | None:
        """(shape, dtype) of each tensor input of op `row`, or None when its inputs were not recorded."""
        if row not in self.cache:
            dims, types = self.dims[row], self.types[row]
            key = (id(dims), id(types))
            if key not in self.by_value:
                self.by_value[key] = ([(t.dims, t.dtype) for t in OpArgs.of(dims, types).tensors()]
                                      if dims else None)
            self.cache[row] = self.by_value[key]
        return self.cache[row]


def _out_shape(name: str, tensors: list[tuple[tuple[int, ...], str]]) -> tuple[tuple[int, ...], str] | None:
    """(shape, dtype) an elementwise/normalization op writes: in-place ops write their first input,
    norms their first input's shape, pointwise ops the broadcast of their inputs."""
    if not tensors:
        return None
    base = name.split("::")[-1]
    if base.endswith("_") or "norm" in base:
        return tensors[0]
    shape = broadcast([s for s, _ in tensors])
    # 0-dim inputs are wrapped Python numbers (recorded as 'double'): the tensors with dimensions decide
    dimensioned = [d for s, d in tensors if s]
    dtype = widest_float(dimensioned or [d for _, d in tensors])
    return (shape, dtype or tensors[0][1]) if shape is not None else None


def _stream_order(rank: RankTrace, kernels_only: bool = True, rows: np.ndarray | None = None) -> np.ndarray:
    """Kernel (or every GPU activity) row positions ordered by (stream, start); only `rows` (bool per
    GPU row: the headline steps' activities) when given, else those inside ProfilerSteps."""
    gpu = rank.gpu
    keep = gpu[tables.GPU_KIND].to_numpy(dtype=object) == tables.KIND_KERNEL
    if not kernels_only:
        keep = np.ones(len(gpu), dtype=bool)
    if rows is not None:
        keep &= rows
    elif len(rank.steps):
        keep &= np.isin(gpu[tables.GPU_STEP].to_numpy(), rank.steps[tables.STEP_NUMBER].to_numpy())
    kernels = np.flatnonzero(keep)
    if not len(kernels):
        return kernels
    stream = gpu[tables.GPU_STREAM].to_numpy()[kernels]
    ts = gpu[tables.GPU_TS].to_numpy(dtype=float)[kernels]
    return kernels[np.lexsort((ts, stream))]


def _excluded_ops(ops: pd.DataFrame, rows: set[int]) -> set[int]:
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    parent = ops[tables.OP_PARENT].to_numpy()
    out = set()
    hit: dict[object, bool] = {}  # name -> NO_CHAIN_ANCESTOR matches it (names repeat)
    for r in rows:
        p, depth = r, 0
        while p >= 0 and depth <= ANCESTOR_DEPTH:
            name = names[p]
            if name not in hit:
                hit[name] = bool(NO_CHAIN_ANCESTOR.search(str(name)))
            if hit[name]:
                out.add(r)
                break
            p, depth = int(parent[p]), depth + 1
    return out


def _fmt_shape(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def find_chains(rank: RankTrace, classes: np.ndarray, libraries: np.ndarray,
                costs: attribution.KernelCosts | None, skip: np.ndarray | None = None,
                rows: np.ndarray | None = None) -> pd.DataFrame:
    """Chains of >= 2 elementwise/normalization op calls linked by shape on one stream (see module doc).
    `skip` (bool per GPU row) removes kernels another pattern already explains (unfused attention)."""
    gpu, ops = rank.gpu, rank.ops
    order = _stream_order(rank, rows=rows)
    op_pos = gpu[tables.GPU_OP].to_numpy()
    names = ops[tables.OP_NAME].to_numpy(dtype=object) if len(ops) else np.empty(0, dtype=object)
    fusable = np.isin(classes, list(FUSABLE_CLASSES)) & ~np.isin(libraries, list(PREFUSED_LIBRARIES))
    fusable &= op_pos >= 0
    if skip is not None:
        fusable &= ~skip
    op_rows = {int(op_pos[i]) for i in order if fusable[i]}
    excluded = _excluded_ops(ops, op_rows)
    inputs = _Inputs(ops)
    info: dict[int, _OpShapes | None] = {}
    outs: dict[tuple[str, int], tuple[tuple[int, ...], str] | None] = {}  # (name, inputs object) -> out
    for r in op_rows:
        name = str(names[r])
        if r in excluded or NO_CHAIN_OP.search(name):
            info[r] = None
            continue
        tensors = inputs(r)
        if not tensors:
            info[r] = None
            continue
        key = (name, id(tensors))  # equal inputs are one shared list (_Inputs)
        if key not in outs:
            outs[key] = _out_shape(name, tensors)
        out = outs[key]
        info[r] = (name, tensors, out) if out is not None else None
    stream = gpu[tables.GPU_STREAM].to_numpy()
    step = gpu[tables.GPU_STEP].to_numpy()
    dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    nbytes = costs.table[attribution.BYTES].to_numpy(dtype=float) if costs is not None else np.full(len(gpu), np.nan)

    chains = [_chain_record(nodes, info, names, dur, nbytes, step)
              for nodes in chain_nodes(order, op_pos, fusable, info, stream, step, _linked) if len(nodes) >= 2]
    return _group_chains(chains)


def _linked(a: _OpShapes | None, b: _OpShapes | None) -> bool:
    """b reads a's output (by shape); the same op on the same shapes twice is a loop over different
    tensors (per-feature clamps, per-parameter updates), not a chain."""
    if a is None or b is None:
        return False
    if a[0] == b[0] and a[1] == b[1]:
        return False
    out_shape = a[2][0]
    return any(shape == out_shape for shape, _ in b[1])


def _chain_record(nodes: list[tuple[int, list[int]]], info: dict, names: np.ndarray,
                  dur: np.ndarray, nbytes: np.ndarray, step: np.ndarray) -> dict[str, Any]:
    kernels = [k for _, ks in nodes for k in ks]
    avoided = 0.0
    for r, _ in nodes[:-1]:
        shape, dtype = info[r][2]
        avoided += 2.0 * math.prod(shape) * DTYPE_SIZE.get(dtype, 4.0)
    shape, dtype = info[nodes[0][0]][2]
    b = nbytes[kernels]
    return {CH_OPS: " → ".join(str(names[r]) for r, _ in nodes), CH_SHAPE: _fmt_shape(shape),
            CH_DTYPE: dtype, CH_KERNELS: len(kernels), CH_TIME_US: float(dur[kernels].sum()),
            CH_BYTES: float(b.sum()) if not np.isnan(b).any() else np.nan,
            CH_AVOIDED_BYTES: avoided, "step": int(step[kernels[0]])}


CHAIN_COLUMNS = (CH_OPS, CH_SHAPE, CH_DTYPE, CH_COUNT, CH_KERNELS, CH_TIME_US, CH_BYTES,
                 CH_AVOIDED_BYTES, CH_STEPS)


def _group_chains(records: list[dict[str, Any]]) -> pd.DataFrame:
    if not records:
        return pd.DataFrame(columns=list(CHAIN_COLUMNS))
    frame = pd.DataFrame(records)
    g = frame.groupby([CH_OPS, CH_SHAPE, CH_DTYPE], sort=False, dropna=False)
    out = g.agg(**{CH_COUNT: (CH_KERNELS, "size"), CH_KERNELS: (CH_KERNELS, "sum"),
                   CH_TIME_US: (CH_TIME_US, "sum"), CH_BYTES: (CH_BYTES, lambda s: s.sum(min_count=len(s))),
                   CH_AVOIDED_BYTES: (CH_AVOIDED_BYTES, "sum"), CH_STEPS: ("step", "nunique")})
    out = out.reset_index().sort_values(CH_TIME_US, ascending=False, kind="stable")
    return out[list(CHAIN_COLUMNS)].reset_index(drop=True)


LOOP_COLUMNS = (LP_NAME, LP_OP, LP_SHAPES, LP_DTYPE, LP_RUNS, LP_GEMMS, LP_PER_RUN, LP_WALL_US,
                LP_BUSY_US, LP_KERNEL_US, LP_BLOCKS, LP_FLOPS, LP_BYTES)


def find_loops(rank: RankTrace, classes: np.ndarray, costs: attribution.KernelCosts | None,
               rows: np.ndarray | None = None) -> pd.DataFrame:
    """Runs of >= LOOP_MIN_RUN GEMM kernels back to back on one stream with the same kernel name,
    launching op and input shapes: a Python loop of independent-looking small matmuls."""
    gpu = rank.gpu
    order = _stream_order(rank, rows=rows)
    if not len(order) or costs is None:
        return pd.DataFrame(columns=list(LOOP_COLUMNS))
    key_name = gpu[tables.GPU_NAME].to_numpy(dtype=object)
    key_op = costs.table[attribution.OP].to_numpy(dtype=object)
    key_shapes = costs.table[attribution.SHAPES].to_numpy(dtype=object)
    stream = gpu[tables.GPU_STREAM].to_numpy()
    step = gpu[tables.GPU_STEP].to_numpy()
    op_row = gpu[tables.GPU_OP].to_numpy()
    is_gemm = classes == GEMM
    runs: list[list[int]] = []
    cur: list[int] = []

    def close(run: list[int]) -> None:
        # GEMMs that one op call launched are its library's own loop (cuDNN's RNN steps its recurrent
        # GEMMs inside aten::_cudnn_rnn_backward): not calls the user can batch
        if len(run) >= LOOP_MIN_RUN and not (op_row[run[0]] >= 0 and (op_row[run] == op_row[run[0]]).all()):
            runs.append(run)

    for i in order.tolist():
        sig_ok = is_gemm[i] and key_shapes[i] is not None
        if cur and sig_ok and stream[i] == stream[cur[-1]] and step[i] == step[cur[-1]] and \
                (key_name[i], key_op[i], key_shapes[i]) == (key_name[cur[-1]], key_op[cur[-1]], key_shapes[cur[-1]]):
            cur.append(i)
            continue
        close(cur)
        cur = [i] if sig_ok else []
    close(cur)
    if not runs:
        return pd.DataFrame(columns=list(LOOP_COLUMNS))
    ts = gpu[tables.GPU_TS].to_numpy(dtype=float)
    end = gpu[tables.GPU_END].to_numpy(dtype=float)
    dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    grid_parts = np.stack([gpu[c].to_numpy() for c in tables.GPU_GRID])
    grid = np.where((grid_parts > 0).all(axis=0), np.prod(grid_parts, axis=0), -1)
    flops = costs.table[attribution.FLOPS].to_numpy(dtype=float)
    nbytes = costs.table[attribution.BYTES].to_numpy(dtype=float)
    dtype = costs.table[attribution.DTYPE].to_numpy(dtype=object)
    recs = []
    for run in runs:
        blocks = grid[run]
        recs.append({LP_NAME: key_name[run[0]], LP_OP: key_op[run[0]], LP_SHAPES: key_shapes[run[0]],
                     LP_DTYPE: dtype[run[0]], "n": len(run), LP_WALL_US: float(end[run].max() - ts[run].min()),
                     LP_BUSY_US: float(dur[run].sum()), "durs": dur[run].tolist(),
                     LP_BLOCKS: float(np.median(blocks)) if (blocks > 0).all() else -1.0,
                     LP_FLOPS: float(flops[run].sum()), LP_BYTES: float(nbytes[run].sum())})
    frame = pd.DataFrame(recs)
    found: list[dict[str, Any]] = []
    for key, g in frame.groupby([LP_NAME, LP_OP, LP_SHAPES], sort=False, dropna=False):
        durs = [d for ds in g["durs"] for d in ds]
        found.append({LP_NAME: key[0], LP_OP: key[1], LP_SHAPES: key[2], LP_DTYPE: g[LP_DTYPE].iloc[0],
                     LP_RUNS: len(g), LP_GEMMS: int(g["n"].sum()), LP_PER_RUN: float(g["n"].median()),
                     LP_WALL_US: float(g[LP_WALL_US].sum()), LP_BUSY_US: float(g[LP_BUSY_US].sum()),
                     LP_KERNEL_US: float(np.median(durs)), LP_BLOCKS: float(g[LP_BLOCKS].min()),
                     LP_FLOPS: float(g[LP_FLOPS].sum(min_count=1)) if g[LP_FLOPS].notna().all() else np.nan,
                     LP_BYTES: float(g[LP_BYTES].sum()) if g[LP_BYTES].notna().all() else np.nan})
    out = pd.DataFrame(found, columns=list(LOOP_COLUMNS))
    return out.sort_values(LP_WALL_US, ascending=False, kind="stable").reset_index(drop=True)
