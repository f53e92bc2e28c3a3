"""Grouped-query attention run on an expanded K/V: the keys and values of Hkv heads copied g times (`repeat_interleave`, or Hugging Face's `repeat_kv` expand + reshape) every call so that `scaled_dot_product_attention` sees H = g·Hkv heads, where `enable_gqa=True` reads the Hkv heads as they are.

An expansion is a GPU copy launched by an `aten::copy_` whose input is 5-D [B, Hkv, g, S, D] with g > 1
(the expanded view materialised by `reshape`/`clone`), or launched under an `aten::repeat_interleave`
of a 4-D [B, Hkv, S, D] input by an integer g along dim 1. It counts when an SDPA call of the same step
has keys [B, g·Hkv, S, D] and `enable_gqa` off: the copy exists only to feed it. The attention
kernels of those calls read g× the K/V bytes a GQA-aware kernel reads; in decode (queries of at most
DECODE_QUERIES positions) the kernel is bound by those bytes.

One row per step × (B, H, Hkv, D); per rank.gpu row, whether it is such a copy, and whether it is an
attention kernel of a matched SDPA call (the rows the rule's what-if removes and shortens)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.layers import under
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

SDPA = "aten::scaled_dot_product_attention"
REPEAT = "aten::repeat_interleave"
COPY = "aten::copy_"
ENABLE_GQA_ARG = 7  # SDPA's enable_gqa position (query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
DECODE_QUERIES = 16  # query positions per call at most for the attention kernel to be bound by the K/V bytes

# --- columns of Patterns.gqa_expand (one row per step × (B, H, Hkv, D)) -----------------------------
GQ_STEP = "step"
GQ_SHAPE = "shape"  # "B=16, H=32 from Hkv=8 (g=4), D=128"
GQ_GROUP = "group"  # g
GQ_CALLS = "calls"  # SDPA calls fed by expanded K/V
GQ_QUERIES = "queries"  # the largest query length of those calls
GQ_MIN_LEN = "min_len"  # the shortest and longest K/V length S
GQ_MAX_LEN = "max_len"
GQ_COPIES = "copies"  # expansion copy kernels
GQ_COPY_US = "copy_us"  # their summed time
GQ_ATTN_US = "attn_us"  # the matched calls' attention kernel time
GQA_COLUMNS = (GQ_STEP, GQ_SHAPE, GQ_GROUP, GQ_CALLS, GQ_QUERIES, GQ_MIN_LEN, GQ_MAX_LEN, GQ_COPIES, GQ_COPY_US,
               GQ_ATTN_US)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(GQA_COLUMNS))


@dataclass(frozen=True)
class GqaExpand:
    """The table, its per-rank.gpu-row masks (copies; attention kernels of matched calls) and per
    rank.runtime row the calls that launched the copies."""

    table: pd.DataFrame
    copies: np.ndarray
    attention: np.ndarray
    calls: np.ndarray


def dims_of(v: object) -> tuple[int, ...] | None:
    """A recorded input's dims as a tuple of positive ints, None for anything else (untrusted text)."""
    if isinstance(v, list) and v and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in v):
        return tuple(int(x) for x in v)
    return None


def concrete_arg(concrete: object, i: int) -> str:
    """The i-th recorded concrete input as stripped text ('' when absent)."""
    return str(concrete[i]).strip() if isinstance(concrete, list) and len(concrete) > i else ""


def _expansion(rank: RankTrace, op: int, repeat: int) -> tuple[int, int, int, int, int] | None:
    """(B, Hkv, g, S, D) of the copy launched by op `op` (its outermost repeat_interleave: `repeat`)."""
    inputs = rank.op_inputs(op)
    dims = inputs.get(tables.OP_INPUT_DIMS) or []
    first = dims_of(dims[0]) if dims else None
    if first is not None and len(first) == 5 and first[2] > 1:
        return first[0], first[1], first[2], first[3], first[4]
    if repeat < 0:
        return None
    outer = rank.op_inputs(repeat)
    odims = outer.get(tables.OP_INPUT_DIMS) or []
    x = dims_of(odims[0]) if odims else None
    concrete = outer.get(tables.OP_CONCRETE_INPUTS)
    g, dim = concrete_arg(concrete, 1), concrete_arg(concrete, 2)
    if x is None or len(x) != 4 or not g.isdigit() or int(g) < 2 or dim not in ("1", "-3"):
        return None
    return x[0], x[1], int(g), x[2], x[3]


def find_gqa_expand(rank: RankTrace, steps_of_ops: np.ndarray, rows: np.ndarray | None = None) -> GqaExpand:
    """The expansions feeding SDPA calls of one rank (module docstring), over the selected GPU rows."""
    ops, gpu = rank.ops, rank.gpu
    none = GqaExpand(empty(), np.zeros(len(gpu), dtype=bool), np.zeros(len(gpu), dtype=bool),
                     np.zeros(len(rank.runtime), dtype=bool))
    if not len(ops) or not len(gpu):
        return none
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    is_sdpa = names == SDPA
    if not is_sdpa.any():
        return none
    gpu_op = gpu[tables.GPU_OP].to_numpy(dtype=np.int64)
    linked = (gpu_op >= 0) if rows is None else (gpu_op >= 0) & rows
    op_of = np.maximum(gpu_op, 0)
    sdpa_top = under(ops, is_sdpa, outermost=True)
    repeat_top = under(ops, names == REPEAT, outermost=True)
    # SDPA calls with enable_gqa off: (step, B, H, S, D) -> [call op rows]
    calls: dict[tuple[int, int, int, int, int], list[int]] = {}
    for c in np.flatnonzero(is_sdpa).tolist():
        inputs = rank.op_inputs(c)
        dims = inputs.get(tables.OP_INPUT_DIMS) or []
        q, k = (dims_of(dims[0]), dims_of(dims[1])) if len(dims) > 1 else (None, None)
        if q is None or k is None or len(k) != 4 or len(q) != 4 or q[1] != k[1]:
            continue
        if concrete_arg(inputs.get(tables.OP_CONCRETE_INPUTS), ENABLE_GQA_ARG) == "True":
            continue
        calls.setdefault((int(steps_of_ops[c]), *k), []).append(c)
    if not calls:
        return none
    copies = np.zeros(len(gpu), dtype=bool)
    groups: dict[tuple[int, int, int, int], dict[str, object]] = {}
    cand = np.flatnonzero(linked & ((names[op_of] == COPY) | (repeat_top[op_of] >= 0)))
    dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    for i in cand.tolist():
        e = _expansion(rank, int(op_of[i]), int(repeat_top[op_of[i]]))
        if e is None:
            continue
        b, hkv, g, s, d = e
        step = int(steps_of_ops[op_of[i]])
        if (step, b, hkv * g, s, d) not in calls:
            continue
        copies[i] = True
        grp = groups.setdefault((step, b, hkv * g, d), {"hkv": hkv, "g": g, "lens": set(), "copies": 0, "copy_us": 0.0})
        grp["copies"] = int(str(grp["copies"])) + 1
        grp["copy_us"] = float(str(grp["copy_us"])) + float(dur[i])
        grp["lens"].add(s)  # type: ignore[attr-defined]
    if not groups:
        return none
    recs = []
    call_of_row = np.where(linked, sdpa_top[op_of], -1)
    group_of_call = np.full(len(ops), -1, dtype=np.int64)  # one pass over the rows, not one per group
    members: list[list[int]] = []
    for gi, ((step, b, h, d), grp) in enumerate(sorted(groups.items())):
        lens = sorted(grp["lens"])  # type: ignore[call-overload]
        members.append([c for s in lens for c in calls.get((step, b, h, s, d), [])])
        group_of_call[members[-1]] = gi
    row_group = np.where(call_of_row >= 0, group_of_call[np.maximum(call_of_row, 0)], -1)
    attention = (row_group >= 0) & ~copies
    attn_us = np.bincount(row_group[attention], weights=dur[attention], minlength=len(members))
    for gi, ((step, b, h, d), grp) in enumerate(sorted(groups.items())):
        mine, lens = members[gi], sorted(grp["lens"])  # type: ignore[call-overload]
        queries = max((dims_of((rank.op_inputs(c).get(tables.OP_INPUT_DIMS) or [[0]])[0]) or (0, 0, 0))[2] for c in mine)
        recs.append({GQ_STEP: step, GQ_SHAPE: f"B={b}, H={h} from Hkv={grp['hkv']} (g={grp['g']}), D={d}",
                     GQ_GROUP: grp["g"], GQ_CALLS: len(mine), GQ_QUERIES: queries, GQ_MIN_LEN: lens[0],
                     GQ_MAX_LEN: lens[-1], GQ_COPIES: grp["copies"], GQ_COPY_US: grp["copy_us"],
                     GQ_ATTN_US: float(attn_us[gi])})
    launch = gpu[tables.GPU_LAUNCH].to_numpy(dtype=np.int64)
    launching = np.zeros(len(rank.runtime), dtype=bool)
    launching[launch[copies & (launch >= 0)]] = True
    return GqaExpand(pd.DataFrame(recs, columns=list(GQA_COLUMNS)), copies, attention, launching)
