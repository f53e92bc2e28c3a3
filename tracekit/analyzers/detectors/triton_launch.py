"""User Triton launches that `tracekit profile` recorded with their launch metadata (docs/triton-metadata.md): one row per kernel and launch configuration (grid, warps, stages, constexprs) over the headline steps."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd

from tracekit.analyzers.costs.op_args import OpArgs
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

# --- columns of Patterns.triton_launches (one row per kernel, op and launch configuration) --------
TL_KERNEL = "kernel"  # the GPU kernel's name
TL_OP = "op"  # the launch's cpu_op (the kernel's Python function name)
TL_GRID = "grid"  # "[gx, gy, gz]" as recorded
TL_PROGRAMS = "programs"  # gx × gy × gz (NaN when the grid is not three ints)
TL_WARPS = "num_warps"  # NaN when not recorded (the interpreter)
TL_STAGES = "num_stages"
TL_CONSTEXPRS = "constexprs"  # "BLOCK_M=16, BLOCK_N=16": the launch's constexpr values
TL_TILE = "tile"  # "16×16×16": the BLOCK_* constexprs in signature order ("" when it has none)
TL_LAUNCHES = "launches"  # launches in the headline steps
TL_KERNELS = "kernels"  # their GPU kernels
TL_TIME_US = "time_us"  # summed kernel time
TL_TENSOR_BYTES = "tensor_bytes"  # bytes of the tensor arguments of one launch (each touched once), NaN unknown
# FLOPs of one launch of an attention kernel (its name says attention, its first three tensors are
# q, k, v of rank 4 with one batch and one head dim): 2·B·H·Lq·Lk·(E + Ev), halved under a CAUSAL
# constexpr set; NaN for any other kernel (its tensor bytes are its only known cost)
TL_ATTENTION_FLOPS = "attention_flops"
TRITON_LAUNCH_COLUMNS = (TL_KERNEL, TL_OP, TL_GRID, TL_PROGRAMS, TL_WARPS, TL_STAGES, TL_CONSTEXPRS, TL_TILE,
                         TL_LAUNCHES, TL_KERNELS, TL_TIME_US, TL_TENSOR_BYTES, TL_ATTENTION_FLOPS)
ATTENTION_NAME = re.compile(r"attn|attention|fmha|flash|sdpa", re.IGNORECASE)
CAUSAL_SET = re.compile(r"CAUSAL\s*=\s*(1|True)\b", re.IGNORECASE)
MAX_TEXT = 200  # characters kept of a recorded string (trace text is untrusted)
TILE_PREFIX = "BLOCK"  # constexprs whose name starts with this are tile sizes (BLOCK_M, BLOCK_SIZE_N, ...)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(TRITON_LAUNCH_COLUMNS))


def _programs(grid: str) -> float:
    try:
        dims = json.loads(grid)
    except (ValueError, RecursionError):
        return math.nan
    if not isinstance(dims, list) or not dims or not all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
        return math.nan
    return float(math.prod(dims))


def _int(v: object) -> float:
    return float(v) if isinstance(v, int) and not isinstance(v, bool) else math.nan


def _kernel_entry(rank: RankTrace, user: object) -> dict[str, object]:
    table = (rank.meta.tracekit or {}).get(tables.TRITON_TABLE_KEY)
    if not isinstance(user, int) or not isinstance(table, list) or not 0 < user <= len(table):
        return {}
    entry = table[user - 1]
    return entry if isinstance(entry, dict) else {}


def _constexprs(rank: RankTrace, row: int, extra: dict[str, object]) -> list[tuple[str, str]]:
    """(name, value) of the launch's constexprs: the `constexprs` text when recorded, else the
    kernel table's constexpr names matched with the launch's Concrete Inputs."""
    text = extra.get("constexprs")
    if isinstance(text, str) and text:
        pairs = [p.partition("=") for p in text[:MAX_TEXT].split(",")]
        return [(n.strip(), v.strip()) for n, _, v in pairs if n.strip()]
    entry = _kernel_entry(rank, extra.get(tables.USER_TRITON_KEY))
    arg_names, const_names = entry.get(tables.ARG_NAMES_KEY), entry.get("constexpr_names")
    if not isinstance(arg_names, list) or not isinstance(const_names, list):
        return []
    concrete = rank.op_inputs(row).get(tables.OP_CONCRETE_INPUTS)
    if not isinstance(concrete, list):
        return []
    out = []
    for i, name in enumerate(arg_names):
        if name in const_names and i < len(concrete) and isinstance(concrete[i], str) and concrete[i]:
            out.append((str(name)[:40], concrete[i][:40]))
    return out


def _tensor_bytes(rank: RankTrace, row: int) -> float:
    inputs = rank.op_inputs(row)
    args = OpArgs.of(inputs.get(tables.OP_INPUT_DIMS), inputs.get(tables.OP_INPUT_TYPES), inputs.get(tables.OP_INPUT_STRIDES))
    tensors = args.tensors()
    return float(sum(t.read_bytes for t in tensors)) if tensors else math.nan


def _attention_flops(rank: RankTrace, row: int, name: str, consts: str) -> float:
    """TL_ATTENTION_FLOPS of one launch: the sequence dim is the one of dims 1 and 2 where q and k
    differ, else the larger (heads are fewer than positions); NaN when the launch is no attention."""
    if not ATTENTION_NAME.search(name):
        return math.nan
    inputs = rank.op_inputs(row)
    found = OpArgs.of(inputs.get(tables.OP_INPUT_DIMS), inputs.get(tables.OP_INPUT_TYPES),
                      inputs.get(tables.OP_INPUT_STRIDES)).tensors()
    if len(found) < 3 or any(len(t.dims) != 4 for t in found[:3]):
        return math.nan
    q, k, v = (t.dims for t in found[:3])
    if not q[0] == k[0] == v[0] or q[3] != k[3]:
        return math.nan
    seq = 1 if q[1] != k[1] else 2 if q[2] != k[2] else (1 if q[1] >= q[2] else 2)
    heads = q[3 - seq]
    flops = 2.0 * q[0] * heads * q[seq] * k[seq] * (q[3] + v[3])
    return flops / 2.0 if CAUSAL_SET.search(consts) else flops


def find_triton_launches(rank: RankTrace, rows: np.ndarray | None = None) -> tuple[pd.DataFrame, np.ndarray]:
    """TRITON_LAUNCH_COLUMNS rows of the user Triton launches whose kernels run in the selected GPU
    rows (`rows`, a bool per rank.gpu row; None: every row), and per rank.gpu row the index of its
    launch configuration's row (-1: not a user Triton kernel)."""
    gpu, ops = rank.gpu, rank.ops
    index = np.full(len(gpu), -1, dtype=np.int64)
    if not len(gpu) or not len(ops):
        return empty(), index
    extra = ops[tables.OP_EXTRA].to_numpy(dtype=object)
    op_pos = gpu[tables.GPU_OP].to_numpy(dtype=np.int64)
    keep = (op_pos >= 0) & (gpu[tables.GPU_KIND].to_numpy(dtype=object) == tables.KIND_KERNEL)
    if rows is not None:
        keep &= rows
    kept_ops = np.unique(op_pos[keep])  # only the ops of kept kernels are read
    user = np.zeros(len(ops), dtype=bool)
    user[kept_ops] = [isinstance(e, dict) and isinstance(e.get(tables.USER_TRITON_KEY), int) for e in extra[kept_ops]]
    keep &= user[np.clip(op_pos, 0, None)]
    if not keep.any():
        return empty(), index
    names = gpu[tables.GPU_NAME].to_numpy(dtype=object)
    dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    op_names = ops[tables.OP_NAME].to_numpy(dtype=object)
    keys: dict[tuple[str, str, str, float, float, str, str], int] = {}
    recs: list[dict[str, object]] = []
    launches: list[set[int]] = []
    config_of: dict[int, tuple[str, str, float, float, str, str]] = {}
    for g in np.flatnonzero(keep).tolist():
        op = int(op_pos[g])
        if op not in config_of:
            ex = extra[op]
            grid = str(ex.get("grid", ""))[:MAX_TEXT]
            consts = _constexprs(rank, op, ex)
            config_of[op] = (str(op_names[op])[:MAX_TEXT], grid, _int(ex.get("num_warps")), _int(ex.get("num_stages")),
                             ", ".join(f"{n}={v}" for n, v in consts),
                             "×".join(v for n, v in consts if n.upper().startswith(TILE_PREFIX)))
        key = (str(names[g])[:MAX_TEXT], *config_of[op])
        i = keys.get(key)
        if i is None:
            i = keys[key] = len(recs)
            kernel, op_name, grid, warps, stages, consts_text, tile = key
            recs.append({TL_KERNEL: kernel, TL_OP: op_name, TL_GRID: grid, TL_PROGRAMS: _programs(grid),
                         TL_WARPS: warps, TL_STAGES: stages, TL_CONSTEXPRS: consts_text, TL_TILE: tile,
                         TL_TENSOR_BYTES: _tensor_bytes(rank, op),
                         TL_ATTENTION_FLOPS: _attention_flops(rank, op, f"{kernel} {op_name}", consts_text)})
            launches.append(set())
        launches[i].add(op)
        index[g] = i
    for i, (rec, ops_seen) in enumerate(zip(recs, launches, strict=True)):
        mine = index == i
        rec.update({TL_LAUNCHES: len(ops_seen), TL_KERNELS: int(mine.sum()), TL_TIME_US: float(dur[mine].sum())})
    return pd.DataFrame(recs, columns=list(TRITON_LAUNCH_COLUMNS)), index
