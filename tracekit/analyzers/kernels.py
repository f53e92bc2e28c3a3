"""Kernel classification: every GPU activity gets a class (what it does) and a library (who wrote it)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analyzers import kernel_patterns as kp
from tracekit.analyzers.costs.op_args import OpArgs, user_gemm_flops
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

# --- classes and libraries --------------------------------------------------------------------
GEMM = "gemm"
ATTENTION = "attention"
CONV = "conv"
ELEMENTWISE = "elementwise"
REDUCTION = "reduction"
NORMALIZATION = "normalization"
SOFTMAX = "softmax"
EMBEDDING = "embedding"
COPY = "copy"
MEMCPY = "memcpy"
MEMSET = "memset"
COMMUNICATION = "communication"
SLEEP = "sleep"  # GPU busy-wait that does no work: torch.cuda._sleep's spin_kernel
OTHER = "other"
CLASSES: tuple[str, ...] = (
    GEMM, ATTENTION, CONV, ELEMENTWISE, REDUCTION, NORMALIZATION, SOFTMAX, EMBEDDING, COPY,
    MEMCPY, MEMSET, COMMUNICATION, SLEEP, OTHER,
)
# classes of GPU time that is not computation. SLEEP is not in it: the program waits on a sleep
# as on a kernel that computes (GPU busy, and work beside it, e.g. a collective, is hidden by it),
# and HTA's temporal breakdown counts it as computation too.
NOT_COMPUTE = (COMMUNICATION, MEMCPY, MEMSET)
# kernel classes no FLOPs/bytes model describes: their time is neither `unmodeled` work nor a reason
# to ask for shapes (a collective moves data between GPUs; a sleep spins on the clock)
NO_COST_MODEL = (COMMUNICATION, SLEEP)
MATMUL_CLASSES = frozenset({GEMM, ATTENTION, CONV})  # tensor-core work
LIB_TRITON = "triton"
LIB_INDUCTOR = "inductor"
LIB_CUDA = "cuda"
LIB_OTHER = "other"
LIBRARIES: tuple[str, ...] = (
    "cublas", "cutlass", "cudnn", "cusparse", "aten", LIB_TRITON, LIB_INDUCTOR, "flash-attn", "nccl", "rccl",
    "rocblas", "hipblaslt", "miopen", "ck", "aiter", "sgl-kernel", "trtllm", LIB_CUDA, LIB_OTHER,
)

# --- columns of KernelClassification.table (aligned with RankTrace.gpu row positions) ----------
CLASS = "class"
LIBRARY = "library"
RULE = "rule"  # index into kernel_patterns.CLASS_RULES that gave the class, -1 otherwise

# --- columns of the per-class / per-library summary tables ----------------------------------------
SUM_KEY = "key"  # the class or library name
SUM_TIME = "time_us"  # summed durations (not the union)
SUM_COUNT = "count"
SUM_SHARE = "share"  # time_us / total GPU activity time, 0..1

_KIND_CLASS = {tables.KIND_MEMCPY: MEMCPY, tables.KIND_MEMSET: MEMSET}


@dataclass(frozen=True)
class KernelClassification:
    """Class and library of each GPU activity of one rank, with time per class and per library."""

    rank: int
    table: pd.DataFrame  # CLASS, LIBRARY, RULE; one row per RankTrace.gpu row, same positions
    classes: pd.DataFrame  # SUM_KEY (class), SUM_TIME, SUM_COUNT, SUM_SHARE; sorted by time
    libraries: pd.DataFrame  # SUM_KEY (library), SUM_TIME, SUM_COUNT, SUM_SHARE; sorted by time
    total_us: float  # summed duration of all GPU activities

    @property
    def other_share(self) -> float:
        """Share of GPU activity time whose class is `other` (0 when there is no GPU time)."""
        row = self.classes[self.classes[SUM_KEY] == OTHER]
        return float(row[SUM_SHARE].iloc[0]) if len(row) else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "total_us": self.total_us,
            "other_share": self.other_share,
            "classes": summary_records(self.classes, "class"),
            "libraries": summary_records(self.libraries, "library"),
        }


def summary_records(table: pd.DataFrame, key_name: str) -> list[dict[str, Any]]:
    """A class/library summary table as JSON-ready records with the key under `key_name`."""
    return [
        {key_name: str(r[SUM_KEY]), "time_us": float(r[SUM_TIME]), "count": int(r[SUM_COUNT]),
         "share": float(r[SUM_SHARE])}
        for r in table.to_dict("records")
    ]


def summarize(keys: pd.Series, dur: pd.Series) -> pd.DataFrame:
    """Time, count and share per key (class or library), largest time first."""
    total = float(dur.sum())
    frame = pd.DataFrame({SUM_KEY: keys.to_numpy(), "d": dur.to_numpy(dtype=float)})
    out = frame.groupby(SUM_KEY, sort=False)["d"].agg(["sum", "count"]).reset_index()
    out.columns = [SUM_KEY, SUM_TIME, SUM_COUNT]
    out[SUM_SHARE] = out[SUM_TIME] / total if total > 0 else 0.0
    out = out.sort_values([SUM_TIME, SUM_KEY], ascending=[False, True], kind="stable")
    return out.reset_index(drop=True)


@lru_cache(maxsize=1)
def _compiled() -> tuple[tuple, tuple, tuple, re.Pattern]:
    def comp(rules: tuple[kp.Rule, ...]) -> tuple:
        return tuple(
            (re.compile(r.name), None if r.op is None else re.compile(r.op), r.value) for r in rules
        )

    return (comp(kp.LIBRARY_RULES), comp(kp.CLASS_RULES), comp(kp.OP_CLASS_RULES),
            re.compile(kp.DRIVER_LAUNCH_RE))


def _first(rules: tuple, name: str, op: str) -> tuple[int, str | None]:
    for i, (name_re, op_re, value) in enumerate(rules):
        if op_re is not None and not op_re.search(op):
            continue
        if name_re.search(name):
            return i, value
    return -1, None


def classify_name(
    name: str,
    kind: str = tables.KIND_KERNEL,
    op: str = "",
    api: str = "",
    *,
    inductor: bool = False,
    user_triton: bool = False,
    uses_dot: bool = False,
    platform: str = "cuda",
) -> tuple[str, str, int]:
    """(class, library, rule) of one GPU activity from its name, kind, launching op and launch API.

    `op` is the launching op's name, optionally followed by its aten ancestors joined by
    kernel_patterns.OP_CHAIN_SEP ("aten::index_select < aten::embedding"): op-restricted rules
    search the whole chain, the op-class fallback looks at the innermost op only."""
    lib_rules, class_rules, op_rules, driver_re = _compiled()
    name, op = name[:kp.MAX_NAME_CHARS], op[:kp.MAX_NAME_CHARS]
    innermost = op.split(kp.OP_CHAIN_SEP, 1)[0]
    if kind in _KIND_CLASS:
        return _KIND_CLASS[kind], LIB_CUDA, -1
    if user_triton:
        library = LIB_TRITON
    elif inductor:
        library = LIB_INDUCTOR
    else:
        _, matched = _first(lib_rules, name, op)
        if matched is not None:
            library = matched
        else:
            from_driver = bool(driver_re.match(api))
            library = LIB_TRITON if from_driver and not innermost.startswith("aten::") else LIB_OTHER
    library = kp.PLATFORM_LIBRARY.get((platform, library), library)
    if user_triton and uses_dot:
        return GEMM, library, -1
    rule, cls = _first(class_rules, name, op)
    if cls is None:
        _, cls = _first(op_rules, innermost, "")
    return cls or OTHER, library, rule


def _truthy_key(extra: object, keys: tuple[str, ...]) -> bool:
    return isinstance(extra, dict) and any(bool(extra.get(k)) for k in keys)


def _uses_dot(extra: object, kernel_table: list[object], ops: pd.DataFrame, row: int) -> bool:
    """tl.dot flag of a user Triton launch: in its op args, or in the trace's kernel table entry;
    where neither says (recordings before the table carried it), whether op row `row`'s arguments are
    a matmul's (M, N, K matching A[M, K] and B[K, N]: op_args.user_gemm_flops)."""
    if _truthy_key(extra, tables.DOT_OP_KEYS):
        return True
    if not isinstance(extra, dict):
        return False
    try:
        entry = kernel_table[int(extra[tables.USER_TRITON_KEY]) - 1]
    except (KeyError, TypeError, ValueError, IndexError):
        return False
    if not isinstance(entry, dict):
        return False
    if any(k in entry for k in tables.DOT_TABLE_KEYS):
        return any(bool(entry.get(k)) for k in tables.DOT_TABLE_KEYS)
    args = OpArgs.of(ops[tables.OP_INPUT_DIMS].iat[row], ops[tables.OP_INPUT_TYPES].iat[row], None,
                     ops[tables.OP_CONCRETE_INPUTS].iat[row])
    return user_gemm_flops(args, entry.get(tables.ARG_NAMES_KEY)) is not None


def _op_chains(ops: pd.DataFrame, rows: np.ndarray) -> dict[int, str]:
    """For each op row: its name, then its aten ancestors' names (up to OP_CHAIN_DEPTH, nearest
    first), joined by OP_CHAIN_SEP. Each ancestor's own list is found once (ops share ancestors)."""
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    parent = ops[tables.OP_PARENT].to_numpy().tolist()
    depth = kp.OP_CHAIN_DEPTH
    above: dict[int, tuple[str, ...]] = {-1: ()}  # op row -> the aten names from it upwards, capped
    out: dict[int, str] = {}
    for row in rows.tolist():
        path = []
        p = parent[row]
        while p not in above:
            path.append(p)
            p = parent[p]
        known = above[p]
        for q in reversed(path):
            name = str(names[q])
            known = ((name, *known) if name.startswith("aten::") else known)[:depth]
            above[q] = known
        out[row] = kp.OP_CHAIN_SEP.join((str(names[row]), *above[parent[row]]))
    return out


def classify(rank: RankTrace) -> KernelClassification:
    """Classify every GPU activity of `rank` (a RankTrace) with the pattern tables in kernel_patterns."""
    gpu = rank.gpu
    n = len(gpu)
    ops, runtime = rank.ops, rank.runtime
    op_pos = gpu[tables.GPU_OP].to_numpy()
    launch_pos = gpu[tables.GPU_LAUNCH].to_numpy()
    op_extra = ops[tables.OP_EXTRA].to_numpy(dtype=object) if len(ops) else []
    rt_names = runtime[tables.RT_NAME].to_numpy(dtype=object) if len(runtime) else []
    provenance = getattr(rank.meta, "tracekit", None)
    table = provenance.get(tables.TRITON_TABLE_KEY) if isinstance(provenance, dict) else None
    kernel_table = table if isinstance(table, list) else []
    used = np.unique(op_pos[op_pos >= 0]) if n else np.empty(0, dtype=np.int64)
    chains = _op_chains(ops, used) if len(used) else {}
    # what classify_name reads of a launching op, once per op row (kernels repeat their ops)
    op_keys: dict[tuple[str, bool, bool, bool], int] = {}
    op_code = np.full(len(ops) + 1, -1, dtype=np.int64)  # by op row; the last slot: no op
    op_code[-1] = op_keys.setdefault(("", False, False, False), len(op_keys))
    for i in used.tolist():
        extra = op_extra[i]
        key = (chains[i], False, False, False) if extra is None else (
            chains[i], _truthy_key(extra, (tables.INDUCTOR_OP_KEY,)), _truthy_key(extra, (tables.USER_TRITON_KEY,)),
            _uses_dot(extra, kernel_table, ops, i))
        op_code[i] = op_keys.setdefault(key, len(op_keys))
    names = gpu[tables.GPU_NAME].astype(str).to_numpy()
    kinds = gpu[tables.GPU_KIND].astype(str).to_numpy()
    apis = np.array([str(rt_names[i]) if i >= 0 else "" for i in launch_pos.tolist()], dtype=object)
    kernel_op = op_code[np.where(op_pos >= 0, op_pos, -1)]
    parts = [pd.factorize(names, use_na_sentinel=False)[0], pd.factorize(kinds, use_na_sentinel=False)[0], kernel_op,
             pd.factorize(apis, use_na_sentinel=False)[0]]
    radix = [int(p.max()) + 1 if n else 1 for p in parts]
    if float(np.prod(np.array(radix, dtype=float))) < 2.0 ** 62:  # one int per distinct (name, kind, op, API)
        combined = np.zeros(n, dtype=np.int64)
        for p, r in zip(parts, radix, strict=True):
            combined = combined * r + p
    else:
        combined = np.unique(np.stack(parts), axis=1, return_inverse=True)[1].reshape(-1)
    _, first, inverse = np.unique(combined, return_index=True, return_inverse=True)
    platform = getattr(rank.meta, "platform", "cuda") or "cuda"
    by_op = list(op_keys)
    results = []
    for g in first.tolist():
        op, inductor, user, dot = by_op[int(kernel_op[g])]
        results.append(classify_name(names[g], kinds[g], op, apis[g], inductor=inductor, user_triton=user,
                                     uses_dot=dot, platform=platform))
    inverse = inverse.reshape(-1)
    table = pd.DataFrame({
        CLASS: np.array([c for c, _, _ in results], dtype=object)[inverse] if n else [],
        LIBRARY: np.array([lib for _, lib, _ in results], dtype=object)[inverse] if n else [],
        RULE: np.array([rule for _, _, rule in results], dtype="int64")[inverse] if n else pd.Series([], dtype="int64"),
    })
    dur = gpu[tables.GPU_DUR].astype(float)
    return KernelClassification(
        rank=int(rank.rank),
        table=table,
        classes=summarize(table[CLASS], dur),
        libraries=summarize(table[LIBRARY], dur),
        total_us=float(dur.sum()),
    )
