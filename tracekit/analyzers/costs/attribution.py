"""FLOPs and bytes per GPU activity, from the launching op's recorded shapes (estimate_costs).

Each op call is costed once per distinct (name, shapes, types, strides, concrete inputs) by the
models in costs.models; its cost goes to the kernel(s) of that call doing the op's work (the GEMM,
attention or conv kernel: `OpCost.work`), the others are helpers with unknown cost. memcpy and
memset rows carry the bytes the trace records. NaN / None = unknown, never a guess; the calls no
model costs but whose kernels name the counts (costs.estimates) get per-kernel estimates, SOURCE
`estimate`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from tracekit.analyzers.costs.estimates import estimate_calls
from tracekit.analyzers.costs.models import TRITON_PREFIX, model_for, op_cost, parent_cost
from tracekit.analyzers.costs.models_matmul import PARENT_MODELS
from tracekit.analyzers.costs.op_args import LONGEST, OpArgs, OpCost, Shapes, shapes_of
from tracekit.analyzers.kernels import CLASS, NO_COST_MODEL, SLEEP, KernelClassification
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

# --- columns of KernelCosts.table (aligned with RankTrace.gpu row positions) --------------------
FLOPS = "flops"  # float, NaN = unknown
BYTES = "bytes"  # float, NaN = unknown
DTYPE = "dtype"  # short dtype name of the op ("bf16", "fp32", ...) or None
OP = "op"  # name of the launching op, or None
SHAPES = "shapes"  # the launching op's tensor shapes (op_args.Shapes: tuples), or None
ROLE = "role"  # ROLE_* below
SOURCE = "source"  # SOURCE_* below

ROLE_MAIN = "main"  # does the op's work: carries (its share of) the op's FLOPs and bytes
ROLE_HELPER = "helper"  # another kernel of the same op call (bias, cast, split-K reduce)
ROLE_TRANSFER = "transfer"  # memcpy / memset
ROLE_NONE = ""  # no op link, or no model for the op
SOURCE_MODEL = "op-model"
SOURCE_INDUCTOR = "inductor"
SOURCE_TRITON = "triton"
SOURCE_TRANSFER = "transfer"
SOURCE_ESTIMATE = "estimate"  # from the kernels' names and grids (costs.estimates): an estimate
SOURCE_NONE = ""

# Element size of TensorList ops (cat, _foreach_*, fused optimizers) from the kernel name:
# the profiler records no dtype for lists. First match wins; (dtype, bytes), None = from group 1.
KERNEL_ELEMENT: tuple[tuple[str, tuple[str, int] | None], ...] = (
    (r"OpaqueType<(\d+)", None),
    (r"c10::BFloat16|__nv_bfloat16", ("bf16", 2)),
    (r"c10::Half|\b__half\b", ("fp16", 2)),
    (r"\bdouble\b", ("fp64", 8)),
    (r"\bfloat\b", ("fp32", 4)),
)
_KERNEL_ELEMENT = tuple((re.compile(p), v) for p, v in KERNEL_ELEMENT)
_SIZE_DTYPE = {1: "uint8", 2: "fp16", 4: "fp32", 8: "fp64"}


@dataclass(frozen=True)
class KernelCosts:
    """Estimated FLOPs and bytes of each GPU activity of one rank, and how much time they cover."""

    rank: int
    table: pd.DataFrame  # FLOPS, BYTES, DTYPE, OP, SHAPES, ROLE, SOURCE; rows = RankTrace.gpu rows
    total_us: float  # summed duration of all GPU activities
    flops_known_us: float  # ... of those with known FLOPs
    bytes_known_us: float  # ... of those with known bytes
    unmodeled: tuple[tuple[str, float], ...]  # (op name, GPU µs): shapes recorded, cost unknown
    unshaped_us: float = 0.0  # kernel time under ops without recorded shapes (record_shapes=False)
    estimated: tuple[tuple[str, float], ...] = ()  # (op name, GPU µs) costed by costs.estimates

    @property
    def flops_known_share(self) -> float:
        return self.flops_known_us / self.total_us if self.total_us else 0.0

    @property
    def bytes_known_share(self) -> float:
        return self.bytes_known_us / self.total_us if self.total_us else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "total_us": self.total_us,
            "flops_known_share": self.flops_known_share,
            "bytes_known_share": self.bytes_known_share,
            "flops": float(np.nansum(self.table[FLOPS].to_numpy())),
            "bytes": float(np.nansum(self.table[BYTES].to_numpy())),
            "unmodeled": [{"op": name, "time_us": us} for name, us in self.unmodeled],
            "unshaped_us": self.unshaped_us,
        }


def estimate_costs(rank: RankTrace, classification: KernelClassification | None = None) -> KernelCosts:
    """FLOPs/bytes per GPU row of `rank`. `classification` (kernels.classify's result, or None)
    tells which kernel of a multi-kernel op call does the work; without it, the longest does."""
    gpu, ops = rank.gpu, rank.ops
    n = len(gpu)
    flops = np.full(n, np.nan)
    nbytes = np.full(n, np.nan)
    dtype = np.full(n, None, dtype=object)
    role = np.full(n, ROLE_NONE, dtype=object)
    source = np.full(n, SOURCE_NONE, dtype=object)
    op_name = np.full(n, None, dtype=object)
    shapes = np.full(n, None, dtype=object)

    kind = gpu[tables.GPU_KIND].to_numpy()
    dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    op = gpu[tables.GPU_OP].to_numpy()
    transfer = kind != tables.KIND_KERNEL
    recorded = gpu[tables.GPU_BYTES].to_numpy()
    flops[transfer] = 0.0
    nbytes[transfer] = np.where(recorded[transfer] >= 0, recorded[transfer], np.nan)
    role[transfer] = ROLE_TRANSFER
    source[transfer] = SOURCE_TRANSFER

    cls = _classes(classification, n)
    linked = op >= 0
    unshaped_us = 0.0
    costs: dict[int, tuple[OpCost, str]] = {}
    unmodeled: dict[str, float] = {}
    estimated: dict[str, float] = {}
    calls = op
    if linked.any():
        rows = np.unique(op[linked])
        names = ops[tables.OP_NAME].to_numpy()[rows]
        info = _op_info(ops, rows, names, costs, _triton_arg_names(rank))
        op_name[linked] = ops[tables.OP_NAME].to_numpy()[op[linked]]
        by_row = np.full(len(ops), None, dtype=object)  # tuples stay elements (a list would not)
        for r, value in info.items():
            by_row[r] = value
        shapes[linked] = by_row[op[linked]]
        # a sleep (torch.cuda._sleep) does no work: no shapes or model would give it FLOPs or bytes
        uncosted = linked & ~transfer & ~np.isin(op, list(costs)) & (cls != SLEEP)
        shaped = np.zeros(n, dtype=bool)
        shaped[uncosted] = [info.get(r) is not None for r in op[uncosted]]
        unshaped_us = float(dur[uncosted & ~shaped].sum())
        uncosted &= shaped
        calls = _op_calls(gpu, op, len(ops))
        for i, (f, b, d) in estimate_calls(gpu, ops, op, calls, uncosted, rank.annotations).items():
            flops[i], nbytes[i], dtype[i], role[i], source[i] = f, b, d, ROLE_MAIN, SOURCE_ESTIMATE
            uncosted[i] = False
            estimated[op_name[i]] = estimated.get(op_name[i], 0.0) + float(dur[i])
        # a collective moves data between ranks (bytes on a link), a sleep spins: no FLOPs to model
        uncosted &= ~np.isin(cls, NO_COST_MODEL)
        if uncosted.any():
            s = pd.Series(dur[uncosted]).groupby(op_name[uncosted]).sum()
            unmodeled = {str(k): float(v) for k, v in s.sort_values(ascending=False).items()}

    _transfer_bytes(ops, op, transfer & np.isnan(nbytes) & linked, nbytes)
    _assign(costs, op, dur, kind, cls, gpu[tables.GPU_NAME].to_numpy(), flops, nbytes, dtype, role, source,
            calls=calls)

    table = pd.DataFrame({FLOPS: flops, BYTES: nbytes, **{
        col: pd.Series(values, dtype=object)  # None stays None (pandas 3 infers str and NaN)
        for col, values in ((DTYPE, dtype), (OP, op_name), (SHAPES, shapes), (ROLE, role),
                            (SOURCE, source))}})
    total = float(dur.sum())
    return KernelCosts(
        rank=rank.rank,
        table=table,
        total_us=total,
        flops_known_us=float(dur[~np.isnan(flops)].sum()),
        bytes_known_us=float(dur[~np.isnan(nbytes)].sum()),
        unmodeled=tuple(list(unmodeled.items())[:20]),
        unshaped_us=unshaped_us,
        estimated=tuple(sorted(estimated.items(), key=lambda kv: -kv[1])),
    )


# memcpy under these ops moves argument N of the op (when the trace records no `bytes`, as some
# ROCm traces do not): copy_(dst, src) moves src, item() moves its one-element tensor
TRANSFER_SOURCE_ARG = {"aten::copy_": 1, "aten::_local_scalar_dense": 0}


def _transfer_bytes(ops: pd.DataFrame, op: np.ndarray, rows: np.ndarray, nbytes: np.ndarray) -> None:
    """Bytes of memcpy rows that have none recorded, from the copying op's source tensor."""
    if not rows.any():
        return
    names = ops[tables.OP_NAME].to_numpy()
    for i in np.flatnonzero(rows):
        r = op[i]
        pos = TRANSFER_SOURCE_ARG.get(names[r])
        if pos is None:
            continue
        src = OpArgs.of(ops[tables.OP_INPUT_DIMS].iat[r], ops[tables.OP_INPUT_TYPES].iat[r]).tensor(pos)
        if src is not None:
            nbytes[i] = src.nbytes


def _triton_arg_names(rank: RankTrace) -> list[object]:
    """Parameter names of the user Triton kernels `tracekit profile` recorded, by table index
    (docs/triton-metadata.md: meta.tracekit["triton_kernels"][i]["arg_names"])."""
    table = (rank.meta.tracekit or {}).get(tables.TRITON_TABLE_KEY)
    if not isinstance(table, list):
        return []
    return [k.get(tables.ARG_NAMES_KEY) if isinstance(k, dict) else None for k in table]


def _signatures(rows: np.ndarray, names: np.ndarray, parents: np.ndarray, all_names: np.ndarray,
                columns: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(first position, group per position) of `rows` grouped by what _op_info reads of a row: its
    name, the identities of its input/extra objects, and its parent's name and input objects (the
    loader decodes equal values into one shared object, so a group is one set of arguments)."""
    parent = parents[rows]
    none = parent < 0
    up = np.where(none, 0, parent)

    def of_parent(column: np.ndarray) -> list:
        values = column[up].astype(object)
        values[none] = None
        return values.tolist()

    keys = zip(names.tolist(), *(map(id, c[rows].tolist()) for c in columns),
               *(map(id, of_parent(c)) for c in (all_names, *columns[:4])), strict=True)
    index: dict[tuple, int] = {}
    group = np.fromiter((index.setdefault(k, len(index)) for k in keys), dtype=np.int64, count=len(rows))
    return np.unique(group, return_index=True)[1], group


def _op_info(ops: pd.DataFrame, rows: np.ndarray, names: np.ndarray,
             costs: dict[int, tuple[OpCost, str]], arg_names: list[object]) -> dict[int, Shapes | None]:
    """Cost each linked op row (once per distinct signature); return op row -> its Shapes."""
    dims = ops[tables.OP_INPUT_DIMS].to_numpy()
    types = ops[tables.OP_INPUT_TYPES].to_numpy()
    strides = ops[tables.OP_INPUT_STRIDES].to_numpy()
    concrete = ops[tables.OP_CONCRETE_INPUTS].to_numpy()
    extra = ops[tables.OP_EXTRA].to_numpy()
    parents = ops[tables.OP_PARENT].to_numpy()
    all_names = ops[tables.OP_NAME].to_numpy()
    first, group = _signatures(rows, names, parents, all_names, (dims, types, strides, concrete, extra))
    cache: dict[bytes, tuple[OpCost, str] | None] = {}
    by_dims: dict[bytes, Shapes | None] = {}
    encode = msgspec.json.encode
    group_shapes: list[Shapes | None] = []
    group_costs: list[tuple[OpCost, str] | None] = []
    for r, name in zip(rows[first].tolist(), names[first].tolist(), strict=True):
        d = dims[r]
        dkey = encode(d)
        if dkey not in by_dims:
            by_dims[dkey] = shapes_of(d)
        group_shapes.append(by_dims[dkey])
        group_costs.append(None)
        p = parents[r]
        if p >= 0 and name.removeprefix("aten::") in PARENT_MODELS and dims[p]:
            cost = parent_cost(name, all_names[p], dims[p], types[p], strides[p], concrete[p])
            if cost is not None:
                group_costs[-1] = (cost, SOURCE_MODEL)
                continue
        ex: dict[str, Any] | None = extra[r] if isinstance(extra[r], dict) else None
        user = ex.get(tables.USER_TRITON_KEY) if ex else None
        if ex and isinstance(user, int) and 0 < user <= len(arg_names) and tables.ARG_NAMES_KEY not in ex:
            ex = {**ex, tables.ARG_NAMES_KEY: arg_names[user - 1]}
        if not d or (ex is None and not name.startswith(TRITON_PREFIX) and _model(name) is None):
            continue
        arg_key = ex.get(tables.ARG_NAMES_KEY) if ex else None
        key = encode((name, dkey, types[r], strides[r], concrete[r], arg_key))
        if key not in cache:
            cost = op_cost(name, d, types[r], strides[r], concrete[r], ex)
            cache[key] = None if cost is None else (cost, _source(name, ex))
        group_costs[-1] = cache[key]
    row_list, group_list = rows.tolist(), group.tolist()
    for r, g in zip(row_list, group_list, strict=True):
        found = group_costs[g]
        if found is not None:
            costs[r] = found
    return dict(zip(row_list, [group_shapes[g] for g in group_list], strict=True))


@lru_cache(maxsize=4096)
def _model(name: str) -> object:
    return model_for(name)


def _source(name: str, extra: dict | None) -> str:
    if extra and extra.get(tables.USER_TRITON_KEY):
        return SOURCE_TRITON
    if name.startswith(TRITON_PREFIX) or (extra and extra.get(tables.KERNEL_BACKEND_KEY) == tables.TRITON_BACKEND):
        return SOURCE_INDUCTOR
    return SOURCE_MODEL


def _classes(classification: KernelClassification | None, n: int) -> np.ndarray:
    if classification is None or len(classification.table) != n:
        return np.full(n, None, dtype=object)
    return classification.table[CLASS].to_numpy(dtype=object)


def _op_calls(gpu: pd.DataFrame, op: np.ndarray, n_ops: int) -> np.ndarray:
    """One id per op call: the op row, except that a graph-replayed kernel's op (captured once,
    run at every replay) makes one call per graph launch."""
    if tables.GPU_GRAPH not in gpu:
        return op
    replayed = (gpu[tables.GPU_GRAPH].to_numpy() >= 0) & (op >= 0)
    if not replayed.any():
        return op
    calls = op.copy()
    pairs = pd.MultiIndex.from_arrays([op[replayed], gpu[tables.GPU_LAUNCH].to_numpy()[replayed]])
    calls[replayed] = n_ops + pd.factorize(pairs)[0]
    return calls


def _assign(costs: dict[int, tuple[OpCost, str]], op: np.ndarray, dur: np.ndarray,
            kind: np.ndarray, cls: np.ndarray, kname: np.ndarray, flops: np.ndarray,
            nbytes: np.ndarray, dtype: np.ndarray, role: np.ndarray, source: np.ndarray,
            calls: np.ndarray | None = None) -> None:
    """Give each costed op call's cost to its working kernel(s); the rest become helpers.
    `calls` tells op calls apart where one op row runs several times (graph replays)."""
    keys = np.fromiter(costs, dtype=np.int64, count=len(costs))
    idx = np.flatnonzero((kind == tables.KIND_KERNEL) & np.isin(op, keys) & (cls != SLEEP))  # a sleep does no work
    if not len(idx):
        return
    order = np.argsort(keys)
    keys = keys[order]
    entries = [costs[int(k)] for k in keys]
    c_flops = np.array([np.nan if c.flops is None else c.flops for c, _ in entries])
    c_bytes = np.array([np.nan if c.bytes is None else c.bytes for c, _ in entries])
    c_list = np.array([np.nan if c.list_elems is None else c.list_elems for c, _ in entries])
    c_dtype = np.array([c.dtype for c, _ in entries], dtype=object)
    c_src = np.array([src for _, src in entries], dtype=object)
    c_longest = np.array([c.pick == LONGEST for c, _ in entries])
    c_work = [c.work for c, _ in entries]

    pos = np.searchsorted(keys, op[idx])
    cand = np.ones(len(idx), dtype=bool)
    for work in {w for w in c_work if w is not None}:
        of_work = np.array([w == work for w in c_work])[pos]
        cand[of_work] = np.isin(cls[idx][of_work], list(work))
    call = (op if calls is None else calls)[idx]
    frame = pd.DataFrame({"op": call, "dur": dur[idx], "cand": cand, "longest": c_longest[pos]})
    has_cand = frame.groupby("op")["cand"].transform("any").to_numpy()
    frame.loc[~has_cand, "cand"] = True  # no kernel of the expected class: any kernel works
    weight = np.zeros(len(idx))
    chosen = frame[frame["cand"] & frame["longest"]]
    if len(chosen):
        weight[chosen.groupby("op")["dur"].idxmax().to_numpy()] = 1.0
    split = frame[frame["cand"] & ~frame["longest"]]
    if len(split):
        grouped = split.groupby("op")["dur"]
        total = grouped.transform("sum").to_numpy()
        count = grouped.transform("size").to_numpy()
        d = split["dur"].to_numpy()
        weight[split.index.to_numpy()] = np.where(total > 0, d / np.where(total > 0, total, 1),
                                                  1.0 / count)
    main = weight > 0
    rows = idx
    dtype[rows] = c_dtype[pos]
    source[rows] = c_src[pos]
    role[rows] = np.where(main, ROLE_MAIN, ROLE_HELPER)
    flops[rows[main]] = c_flops[pos][main] * weight[main]
    nbytes[rows[main]] = c_bytes[pos][main] * weight[main]
    listed = main & np.isnan(c_bytes[pos]) & ~np.isnan(c_list[pos])
    for i in np.flatnonzero(listed):
        el = _kernel_element(kname[rows[i]])
        if el is not None:
            nbytes[rows[i]] = c_list[pos[i]] * el[1] * weight[i]
            dtype[rows[i]] = dtype[rows[i]] or el[0]


@lru_cache(maxsize=4096)
def _kernel_element(name: str) -> tuple[str, int] | None:
    """(dtype, bytes per element) of a TensorList op's kernel, from its template arguments."""
    for pattern, value in _KERNEL_ELEMENT:
        m = pattern.search(name)
        if m:
            if value is None:
                size = int(m.group(1))
                return _SIZE_DTYPE.get(size, f"{size}B"), size
            return value
    return None
