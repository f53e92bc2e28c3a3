"""The host work of each small value read that syncs (`.item()`, `.tolist()`, `.cpu()` of a few values): the runtime calls of the read op, and of the `stack`/`cat` right before it that only gathers the values for it.

A value kept on the device instead of read back (avoid_sync's change) removes more than the wait: the
read op's own host work goes too (its dispatch, the small device-to-host copy, the stream sync), and
so does a `torch.stack([...])` / `torch.cat` issued right before it (past `resolve_conj`-like no-ops) on the same thread under the same
parent op whose output the read takes (same dims): it exists only to read several values with one
copy. Held-out int8_bert_scale_item (H100): `torch.stack([inv, sx]).tolist()` per Linear, 144 a step;
keeping the scales on the device saved 6.72 ms of a 34.2 ms unprofiled step, where the syncs' waits
alone were 0.39 ms traced (aten::to 38.6 µs and aten::stack 21.1 µs traced per read).

A read is a round trip when an op right after it (ROUND_TRIP_OPS of the same parent on the thread)
takes a Python number (a wrapped `double` input): the value went to the host only to come back as a
kernel argument, so a CUDA graph would freeze it and torch.compile breaks the graph there (int8_bert:
`x * inv` after each `.tolist()`); a convergence check's `.item()` decides Python control flow
instead, and the ops between two checks can be captured (held-out sinkhorn_check: 100 checks a step).

Per rank.runtime row: the runtime row of the sync call whose read it belongs to, -1 outside any; and
per rank.runtime row, the sync calls whose read is a round trip."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.item_reads import D2H, MAX_BYTES
from tracekit.analyzers.names import matches
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

# the ops a Python-side value read runs as (the outermost one in the sync's ancestors is the read)
READ_OPS = frozenset(("aten::item", "aten::_local_scalar_dense", "aten::to", "aten::_to_copy", "aten::cpu",
                      "aten::copy_", "aten::tolist"))
GATHER_OPS = frozenset(("aten::stack", "aten::cat"))  # ops that gather the values for one read
READ_DEPTH = 4  # ancestors of the sync's op searched for the outermost read op
ROUND_TRIP_OPS = 3  # ops after the read searched for one taking a Python number
HOST_NUMBER = "double"  # the recorded input type of a Python float passed to an op (a wrapped number)
# ops `.tolist()` / `.numpy()` run between the gather and the copy, without work of their own
PASS_OPS = frozenset(("aten::resolve_conj", "aten::resolve_neg", "aten::detach", "aten::alias", "aten::lift_fresh"))


def find_sync_read_calls(rank: RankTrace) -> tuple[np.ndarray, np.ndarray]:
    """Per rank.runtime row: the sync call (runtime row) whose small value read issued it, -1 outside;
    and whether the call is the sync of a round-trip read."""
    rt, ops, gpu = rank.runtime, rank.ops, rank.gpu
    out = np.full(len(rt), -1, dtype=np.int64)
    trip = np.zeros(len(rt), dtype=bool)
    if not len(rt) or not len(ops) or not len(gpu):
        return out, trip
    kind = rt[tables.RT_KIND].to_numpy(dtype=object)
    op_of = rt[tables.RT_OP].to_numpy(dtype=np.int64)
    syncs = np.flatnonzero(np.isin(kind, tables.SYNC_KINDS) & (op_of >= 0))
    if not len(syncs):
        return out, trip
    # ops whose calls copied a few bytes to the host: the reads
    launch = gpu[tables.GPU_LAUNCH].to_numpy(dtype=np.int64)
    size = np.nan_to_num(gpu[tables.GPU_BYTES].to_numpy(dtype=float))
    small_d2h = (launch >= 0) & (gpu[tables.GPU_KIND].to_numpy(dtype=object) == tables.KIND_MEMCPY) \
        & matches(gpu[tables.GPU_NAME].to_numpy(dtype=object), D2H) & (size <= MAX_BYTES)
    copy_ops = set(op_of[launch[small_d2h]].tolist()) - {-1}
    if not copy_ops:
        return out, trip
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    parent = ops[tables.OP_PARENT].to_numpy(dtype=np.int64)
    ts = ops[tables.OP_TS].to_numpy(dtype=float)
    end = ops[tables.OP_END].to_numpy(dtype=float)
    dims = ops[tables.OP_INPUT_DIMS].to_numpy(dtype=object) if tables.OP_INPUT_DIMS in ops else None
    op_tid = ops[tables.OP_TID].to_numpy(dtype=object)
    by_thread = _calls_by_thread(rt[tables.RT_TID].to_numpy(dtype=object), rt[tables.RT_TS].to_numpy(dtype=float))
    siblings = _previous_sibling(parent, ts, op_tid)
    following = np.full(len(siblings), -1, dtype=np.int64)
    following[siblings[siblings >= 0]] = np.flatnonzero(siblings >= 0)
    types = ops[tables.OP_INPUT_TYPES].to_numpy(dtype=object) if tables.OP_INPUT_TYPES in ops else None
    for s in syncs.tolist():
        chain = _read_chain(int(op_of[s]), names, parent, copy_ops)
        if not chain:
            continue
        read = chain[-1]
        start = ts[read]
        prev = int(siblings[read])
        for _ in range(len(PASS_OPS)):
            if prev < 0 or names[prev] not in PASS_OPS:
                break
            prev = int(siblings[prev])
        if prev >= 0 and names[prev] in GATHER_OPS and _feeds(dims, prev, chain):
            start = ts[prev]
        thread = by_thread.get(str(op_tid[read]))
        if thread is not None:
            starts, rows = thread
            inside = rows[np.searchsorted(starts, start, side="left"):np.searchsorted(starts, end[read], side="right")]
            out[inside[out[inside] < 0]] = s
        trip[s] = types is not None and _takes_host_number(types, following, read)
    return out, trip


def _takes_host_number(types: np.ndarray, following: np.ndarray, read: int) -> bool:
    """One of the ROUND_TRIP_OPS ops after `read` (same thread and parent) takes a Python number."""
    nxt = int(following[read])
    for _ in range(ROUND_TRIP_OPS):
        if nxt < 0:
            return False
        got = types[nxt]
        if isinstance(got, list | tuple) and HOST_NUMBER in got:
            return True
        nxt = int(following[nxt])
    return False


def _calls_by_thread(tid: np.ndarray, ts: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per thread (its id as text: ids of mixed types in untrusted traces), its runtime calls' start
    times in order and their rows: each read's calls are one binary search away."""
    keys = np.asarray([str(t) for t in tid.tolist()], dtype=object)
    order = np.lexsort((ts, keys.astype(str)))
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    if not len(order):
        return out
    cuts = np.flatnonzero(keys[order[1:]] != keys[order[:-1]]) + 1
    for part in np.split(order, cuts):
        out[str(keys[part[0]])] = (ts[part], part)
    return out


def _read_chain(op: int, names: np.ndarray, parent: np.ndarray, copy_ops: set[int]) -> list[int]:
    """`op` and its ancestors up to the outermost READ_OPS op among them (the read, last), when one of
    them copied to the host; [] otherwise."""
    chain, read, copied, p = [], -1, False, op
    for _ in range(READ_DEPTH + 1):
        if p < 0:
            break
        chain.append(p)
        copied |= p in copy_ops
        if names[p] in READ_OPS:
            read = len(chain)
        p = int(parent[p])
    return chain[:read] if copied and read > 0 else []


def _previous_sibling(parent: np.ndarray, ts: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """Per op: the op before it on its thread with the same parent (by start time), -1 for the first."""
    threads = pd.factorize(pd.Series(tid, dtype=object).astype(str))[0].astype(np.int64)
    keys = threads * (int(parent.max(initial=0)) + 2) + (parent + 1)
    order = np.lexsort((ts, keys))
    prev = np.full(len(parent), -1, dtype=np.int64)
    same = keys[order[1:]] == keys[order[:-1]]
    prev[order[1:][same]] = order[:-1][same]
    return prev


def _feeds(dims: np.ndarray | None, gather: int, chain: list[int]) -> bool:
    """The gather's output is what the read copies (the read's input dims, or the first op below it in
    `chain` that recorded them): a stack of n values of shape S gives (n, *S); a cat gives the sum
    along the first dim. Without recorded shapes the gather is not counted."""
    if dims is None:
        return False
    got = dims[gather]
    want = next((dims[c] for c in reversed(chain) if isinstance(dims[c], list | tuple) and dims[c]), None)
    if not isinstance(got, list | tuple) or not got or not isinstance(got[0], list | tuple) or want is None:
        return False
    first = want[0]
    parts = [d for d in got[0] if isinstance(d, list | tuple)]
    if not isinstance(first, list | tuple) or not parts or len(parts) != len(got[0]):
        return False
    stacked = [len(parts), *parts[0]] if all(list(d) == list(parts[0]) for d in parts) else None
    return list(first) == stacked or (len(first) > 0 and sum(d[0] for d in parts if d) == first[0])
