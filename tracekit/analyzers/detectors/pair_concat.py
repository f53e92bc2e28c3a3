"""A Linear over the concatenation of every pair: `torch.cat([h_i, h_j], -1)` of two broadcast views (B × L × 1 × D₁ and B × 1 × L × D₂ expanded to B × L × L × D), then a Linear on it, where the Linear's two halves applied per item (B × L rows) and added by broadcasting compute the same: W·[h_i; h_j] + b = W₁h_i + (W₂h_j + b).

Contact-map and pair-representation heads, relation networks, biaffine-style scorers write the pair
concatenation; the GEMM then runs on L× the rows it needs and the concatenated tensor is written,
cast and read back in forward and backward. heldout14 contact_pair_concat (H100): 8 × 384 × 384 pairs
of 512 + 512 features into Linear(1024 → 256); splitting the weight took the bare step from 19.6 to
8.6 ms.

A pair concat is an `aten::cat` of tensors that share their leading dims P = (B, L₁, L₂) with L₁, L₂ ≥
MIN_ITEMS, preceded on its thread (within LOOKBACK ops) by `aten::expand` calls of inputs with a
singleton at L₁'s or L₂'s place, and followed (within LOOKAHEAD ops) by a `linear`/`addmm`/`matmul` whose
input is the concatenation (P + [D], or M × D with M = B·L₁·L₂). The work the split removes, per rank.gpu
row (GONE): kernels of ops that read the concatenation's shape (its cast and copies, its backward's
slices), of the `cat` and the expand-backward `sum`s over P + [Dᵢ], and of the GEMMs over M rows that
read it or produce its gradient (M × D input; M × H by H × D; H × M by M × D). What the split adds is
priced by the rule: the broadcast add's write of the M × H output and its backward's two reductions of
the M × H gradient, at the device's memory bandwidth."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

MIN_ITEMS = 16  # items per side: below, the pairs are few and the concat is cheap
LOOKBACK = 16  # ops before the cat searched for the expands
LOOKAHEAD = 24  # ops after the cat searched for the Linear (autocast's casts come between)
GEMM_OPS = frozenset({"aten::linear", "aten::addmm", "aten::matmul", "aten::mm"})

# --- columns of Patterns.pair_concat (one row per step × pair shape and Linear) ----------------------
PC_STEP = "step"
PC_PAIRS = "pairs"  # "B×L1×L2"
PC_FEATURES = "features"  # D = D1 + D2 of the concatenation
PC_OUT = "out_features"  # H of the Linear
PC_CALLS = "calls"  # pair concats in the step
PC_GONE_US = "gone_us"  # kernel time the split removes in the step (GONE rows)
PC_ADDED_BYTES = "added_bytes"  # per call: the broadcast add's output write + its backward's two reads
PAIR_CONCAT_COLUMNS = (PC_STEP, PC_PAIRS, PC_FEATURES, PC_OUT, PC_CALLS, PC_GONE_US, PC_ADDED_BYTES)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(PAIR_CONCAT_COLUMNS))


@dataclass(frozen=True)
class PairConcats:
    table: pd.DataFrame
    rows: np.ndarray  # per rank.gpu row: work the split removes


def _tensors(rank: RankTrace, row: int) -> list[tuple[int, ...]]:
    dims = rank.op_inputs(row).get(tables.OP_INPUT_DIMS) or []
    if not isinstance(dims, list):
        return []
    flat = [d for d in dims if isinstance(d, list) and d and all(isinstance(x, int) for x in d)]
    nested = [tuple(x) for d in dims if isinstance(d, list) for x in d
              if isinstance(x, list) and x and all(isinstance(y, int) for y in x)]
    return [tuple(d) for d in flat] + nested


def _pair_cat(rank: RankTrace, row: int) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(P, the parts' feature sizes) of a cat of ≥ 2 tensors sharing P = (B, L1, L2) on the last dim."""
    parts = _tensors(rank, row)
    if len(parts) < 2 or any(len(p) != len(parts[0]) or len(p) < 3 for p in parts):
        return None
    lead = parts[0][:-1]
    if any(p[:-1] != lead for p in parts) or min(lead[-2:]) < MIN_ITEMS:
        return None
    return lead, tuple(p[-1] for p in parts)


def _expanded(rank: RankTrace, rows: list[int], names: np.ndarray, lead: tuple[int, ...]) -> bool:
    """Expands before the cat whose inputs have a singleton at L1's or L2's place (broadcast items)."""
    found = set()
    for r in rows:
        if names[r] != "aten::expand":
            continue
        t = _tensors(rank, r)
        if t and len(t[0]) == len(lead) + 1:
            x = t[0][:-1]
            for at in (len(lead) - 2, len(lead) - 1):
                if x[at] == 1 and all(x[i] == lead[i] for i in range(len(lead)) if i != at):
                    found.add(at)
    return len(found) == 2


def find_pair_concats(rank: RankTrace, steps: StepsOf) -> PairConcats:
    """PAIR_CONCAT_COLUMNS per step, pair shape and Linear, and the rank.gpu rows the split removes."""
    ops, gpu = rank.ops, rank.gpu
    gone = np.zeros(len(gpu), dtype=bool)
    if not len(ops) or not len(gpu):
        return PairConcats(empty(), gone)
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    cats = np.flatnonzero(names == "aten::cat")
    if not len(cats) or not (names == "aten::expand").any():
        return PairConcats(empty(), gone)
    tid = ops[tables.OP_TID].to_numpy()
    order = np.lexsort((ops[tables.OP_TS].to_numpy(dtype=float), tid))
    position = np.empty(len(order), dtype=np.int64)
    position[order] = np.arange(len(order))
    found: dict[tuple[tuple[int, ...], int, int], list[int]] = {}
    for c in cats.tolist():
        shape = _pair_cat(rank, c)
        if shape is None:
            continue
        lead, parts = shape
        at = int(position[c])
        before = [int(r) for r in order[max(at - LOOKBACK, 0):at] if tid[r] == tid[c]]
        if not _expanded(rank, before, names, lead):
            continue
        d, m = sum(parts), math.prod(lead)
        for r in (int(x) for x in order[at + 1:at + 1 + LOOKAHEAD] if tid[x] == tid[c]):
            t = _tensors(rank, r)
            if names[r] in GEMM_OPS and t and t[0] in ((*lead, d), (m, d)):
                weight = next((w for w in t[1:] if len(w) == 2 and d in w), None)
                if weight is not None:
                    key = (lead, d, weight[0] if weight[1] == d else weight[1])
                    found.setdefault(key, []).append(int(steps.ops[c]))
                break
    if not found:
        return PairConcats(empty(), gone)
    op_of = gpu[tables.GPU_OP].to_numpy(dtype=np.int64)
    dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    gpu_step = steps.gpu
    rows = []
    launching = np.unique(op_of[op_of >= 0])
    for (lead, d, h), cat_steps in found.items():
        m = math.prod(lead)
        mine = _gone_ops(rank, launching, names, lead, d, h)
        hit = (op_of >= 0) & np.isin(op_of, mine)
        gone |= hit
        for step in sorted(set(cat_steps)):
            rows.append({PC_STEP: step, PC_PAIRS: "×".join(str(x) for x in lead), PC_FEATURES: d, PC_OUT: h,
                         PC_CALLS: cat_steps.count(step), PC_GONE_US: float(dur[hit & (gpu_step == step)].sum()),
                         PC_ADDED_BYTES: 3.0 * m * h * 2})
    return PairConcats(pd.DataFrame(rows, columns=list(PAIR_CONCAT_COLUMNS)), gone)


def _gone_ops(rank: RankTrace, launching: np.ndarray, names: np.ndarray, lead: tuple[int, ...], d: int,
              h: int) -> list[int]:
    """The ops (of those that launch kernels) whose work the split removes (the module docstring's GONE)."""
    m = math.prod(lead)
    whole = (*lead, d)
    out = []
    for r in launching.tolist():
        t = _tensors(rank, r)
        if not t:
            continue
        name = str(names[r])
        if whole in t or ((m, d) in t and name in GEMM_OPS) or (name in ("aten::cat", "aten::sum") and t[0][:-1] == lead and t[0][-1] < d) or (name in GEMM_OPS and len(t) >= 2 and (t[:2] == [(m, h), (h, d)] or t[:2] == [(h, m), (m, d)])):
            out.append(r)
    return out
