"""Requests served one at a time: a step made of the same forward repeated k times at batch 1 with the same shapes (an encoder or classifier called once per request), which one forward at batch k would do; or, at any batch, each round of a loop running the same forward k times in a row (classifier-free guidance's two passes), which one forward on the k inputs stacked would do."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.analyzers.detectors.toplevel import (
    StepOps,
    TopLevel,
    dims_texts,
    repeated_block,
    step_sequences,
    text_codes,
)
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

MIN_REQUESTS = 2  # forwards per step: fewer is one request, nothing to batch it with
# Launches of the step outside the repeated forwards: at most this share of one forward's. A single
# forward whose layers repeat has its embedding before them and its head after (a layer stack is not
# a request loop: each layer's input is the previous layer's output).
OUTSIDE_SHARE = 0.25
BATCH_ONE_SHARE = 0.5  # at least this share of the forward's launching ops read a tensor whose first dim is 1
# Ops before the first forward that only stage the requests' inputs, the k of them at once (heldout15
# lora_tenant_loop: two copy_ of [16, 128] ids and masks, then 16 forwards of a [1, 128] row each): no
# layer of a forward. Any other launching op there, or staging of one input (heldout8 dit_sampler: a
# [1, 4, 32, 32] latent, then 10 sampler passes, each on the previous one's output), means the
# repeats are a forward's layers or a sequential loop.
STAGING_OPS = frozenset({"aten::copy_", "aten::to", "aten::_to_copy", "aten::pin_memory", "aten::empty",
                         "aten::empty_strided", "aten::zeros", "aten::ones", "aten::full"})

# --- columns of Patterns.requests (one row per step served as repeated batch-1 forwards) -------------
RQ_STEP = "step"
RQ_THREAD = "thread"
RQ_REQUESTS = "requests"  # forwards in the step
RQ_OPS = "ops"  # top-level ops of one forward that launch work
RQ_FIRST = "first"  # the forward's first op with its input shapes, in words
RQ_LAUNCHES = "launches"  # launch calls of one forward
RQ_GPU_US = "gpu_us"  # GPU time of all the forwards' activities
RQ_ROUNDS = "rounds"  # loop rounds that each run the `requests` forwards (1: the step is one round of them)
REQUEST_COLUMNS = (RQ_STEP, RQ_THREAD, RQ_REQUESTS, RQ_OPS, RQ_FIRST, RQ_LAUNCHES, RQ_GPU_US, RQ_ROUNDS)
FIRST_CHARS = 120  # of RQ_FIRST (trace names and shapes are untrusted text: kept short)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(REQUEST_COLUMNS))


def _batch_one(rank: RankTrace, row: int) -> bool:
    dims = rank.op_inputs(row).get(tables.OP_INPUT_DIMS) or []
    return any(isinstance(d, list) and len(d) >= 2 and d[0] == 1 for d in dims)


def _staged(rank: RankTrace, names: np.ndarray, rows: np.ndarray, k: int) -> bool:
    """Whether op rows `rows` (before the first forward) only stage inputs (STAGING_OPS) and one of
    them holds k requests' inputs (a first dim of k)."""
    if not np.isin(names[rows], list(STAGING_OPS)).all():
        return False
    for row in rows.tolist():
        dims = rank.op_inputs(row).get(tables.OP_INPUT_DIMS) or []
        if any(isinstance(d, list) and len(d) >= 2 and d[0] == k for d in dims):
            return True
    return False


def _finest(codes: np.ndarray, launches: np.ndarray, start: int, period: int, repeats: int,
            ) -> tuple[np.ndarray, int]:
    """(positions of the repeated forwards in the sequence, how many forwards): the block found, or,
    where the block is one forward repeated from its start and then a few ops of its own (a clip's
    frames embedded one by one, then the clip's mean), that forward in every block. `launches`: per
    position, the launch calls of its op."""
    whole = np.arange(start, start + period * repeats)
    inner = repeated_block(codes[start:start + period])
    if inner is None:
        return whole, repeats
    s, p, k = inner
    block = launches[start:start + period]
    tail = int(block.sum() - block[s:s + p * k].sum())
    if block[:s].sum() > 0 or tail > OUTSIDE_SHARE * block[s:s + p].sum():
        return whole, repeats  # the block's own work is more than a few ops: a forward whose layers repeat
    one = np.arange(s, s + p * k)
    return (start + np.arange(repeats)[:, None] * period + one[None, :]).ravel(), repeats * k


MAX_ROUND_FORWARDS = 4  # forwards per round: guidance passes (2, 3 with two conditions), not a model's layers
LAYER_SHARE = 0.5  # of a round's forward's launches, in its own repeated layers


def _rounds(codes: np.ndarray, launches: np.ndarray, start: int, period: int, rounds: int
            ) -> tuple[np.ndarray, int] | None:
    """(positions of the forwards, k) where each of the `rounds` repetitions of the block is k ≥
    MIN_REQUESTS same-shaped forwards in a row and a few ops of the round's own, before or after them
    (at most OUTSIDE_SHARE of one forward's launches): classifier-free guidance's conditional and
    unconditional passes in each denoising step, the step's update after them (held-out dit_cfg_two_passes,
    H100: 12 rounds of 2 forwards at batch 8; one forward on both halves took the bare step from 82.4 to
    43.1 ms). The rounds depend on each other; the k forwards of a round are taken not to (two calls of a
    model on its own output would also repeat, the trace cannot tell)."""
    inner = repeated_block(codes[start:start + period])
    if inner is None or not MIN_REQUESTS <= inner[2] <= MAX_ROUND_FORWARDS or rounds < MIN_REQUESTS:
        return None
    s, p, k = inner
    block = launches[start:start + period]
    if block.sum() - block[s:s + p * k].sum() > OUTSIDE_SHARE * block[s:s + p].sum():
        return None
    # a forward is a model: its own layers repeat and make up most of it (a layer stack's layers do not
    # hold repeated layers; held-out int8_bert_scale_item's 12 layers in each of 3 calls are not rounds)
    layers = repeated_block(codes[start + s:start + s + p])
    one = launches[start + s:start + s + p]
    if layers is None or one[layers[0]:layers[0] + layers[1] * layers[2]].sum() < LAYER_SHARE * one.sum():
        return None
    at = np.arange(s, s + p * k)
    return (start + np.arange(rounds)[:, None] * period + at[None, :]).ravel(), k


def find_requests(rank: RankTrace, steps: StepsOf, top: TopLevel | None = None,
                  seqs: tuple[StepOps, ...] | None = None) -> tuple[pd.DataFrame, np.ndarray]:
    """One row per step whose launching thread runs the same forward k ≥ MIN_REQUESTS times at batch 1
    (REQUEST_COLUMNS), and per rank.gpu row whether one of those forwards launched it. `top` and `seqs`
    are TopLevel.of(rank) and step_sequences of it (computed here when not given)."""
    ops, rt, gpu = rank.ops, rank.runtime, rank.gpu
    in_request = np.zeros(len(gpu), dtype=bool)
    if not len(ops) or not len(rt) or not len(gpu):
        return empty(), in_request
    top = top if top is not None else TopLevel.of(rank)
    seqs = seqs if seqs is not None else step_sequences(rank, steps, top)
    launches = top.launches + top.syncs
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    tid = ops[tables.OP_TID].to_numpy()
    gpu_dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    rows = []
    texts: dict[bytes, str] = {}
    batch_ones: dict[str, bool] = {}
    for step_ops in seqs:
        step, mine = step_ops.step, step_ops.rows
        thread = Counter(tid[mine].tolist()).most_common(1)[0][0]
        seq = dict(step_ops.threads)[thread]
        dims = dims_texts(rank, seq, texts)
        sigs = [f"{name}{d}" for name, d in zip(names[seq].tolist(), dims, strict=True)]
        codes = text_codes(sigs)
        found = repeated_block(codes)
        if found is None:
            continue
        start, period, repeats = found
        at, repeats = _finest(codes, launches[seq], start, period, repeats)
        before = seq[:start][launches[seq[:start]] > 0]
        if len(before) and not _staged(rank, names, before, repeats):
            continue  # work before the first forward on its thread: the repeats are a forward's layers
        covered, one_at = seq[at], at[:len(at) // repeats]
        one = seq[one_at]
        outside = int(launches[mine].sum() - launches[covered].sum())
        per_forward = int(launches[one].sum())
        for r, i in zip(one.tolist(), one_at.tolist(), strict=True):
            if dims[i] not in batch_ones:  # a function of the dims, which their text determines
                batch_ones[dims[i]] = _batch_one(rank, r)
        batch_one = sum(batch_ones[dims[i]] for i in one_at.tolist())
        start, period = int(one_at[0]), len(one_at)
        served, rounds = repeats, 1
        if batch_one < BATCH_ONE_SHARE * period:  # not batch 1: k forwards in each round of a loop, or nothing
            paired = _rounds(codes, launches[seq], found[0], found[1], found[2])
            if paired is None:
                continue
            at, served = paired
            rounds = found[2]
            covered, one = seq[at], seq[at[:len(at) // (served * rounds)]]
            start = int(at[0])
            outside = int(launches[mine].sum() - launches[covered].sum())
            per_forward = int(launches[one].sum())
            if outside > OUTSIDE_SHARE * per_forward * rounds:
                continue
        elif outside > OUTSIDE_SHARE * per_forward:
            continue
        hit = np.isin(top.gpu_top, covered)
        in_request |= hit
        first = sigs[start][:FIRST_CHARS]
        rows.append({RQ_STEP: int(step), RQ_THREAD: int(thread), RQ_REQUESTS: served, RQ_ROUNDS: rounds,
                     RQ_OPS: " → ".join(str(names[r]).removeprefix("aten::") for r in one.tolist())[:FIRST_CHARS],
                     RQ_FIRST: first, RQ_LAUNCHES: per_forward, RQ_GPU_US: float(gpu_dur[hit].sum())})
    return pd.DataFrame(rows, columns=list(REQUEST_COLUMNS)), in_request
