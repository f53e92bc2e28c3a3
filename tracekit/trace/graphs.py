"""Give CUDA/HIP graph replays their ops: join replayed kernels to captured launches or eager twins.

A graph launch (cudaGraphLaunch) links to many GPU activities and no op. During capture the
profiler records each launch call inside its op (with shapes) but no GPU activity; the replay runs
the same work in the same order. `join_graphs` aligns each distinct replayed sequence (a "graph")
with the captured launch sequences of the trace itself and of the capture traces given, and copies
the capture ops (with their ancestors) into the execution rank's ops table. A graph no capture
explains gets the ops of an eager run of the same kernels in the same trace ("inferred").
Columns written: gpu tables.GPU_GRAPH, tables.GPU_GRAPH_MATCH (MATCH_* values), ops tables.OP_ORIGIN.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import msgspec
import numpy as np
import pandas as pd

from tracekit.trace import tables
from tracekit.trace.align import Budget, SeedIndex, align
from tracekit.trace.graph_ops import append_capture_ops, decode_linked
from tracekit.trace.model import RankTrace
from tracekit.units import plural

MATCH_NAME = "capture:name"  # aligned to a captured launch; kernel name and grid agree with the capture
MATCH_ORDER = "capture:order"  # aligned to a captured launch by order and kind (no name evidence)
MATCH_INFERRED = "inferred"  # op of an eager run of the same kernels in the same trace
MIN_ALIGNED = 0.5  # share of a graph's activities a capture must align to be joined
MIN_AGREE = 0.9  # share of the aligned launches with name evidence whose kernel name/grid must agree
# (H200, torch 2.11: the right capture agrees on 97-100 %, another model's of the same shape of
# code on 71 %, another batch size's on 40 %; cuBLAS may pick another algorithm while capturing)
MIN_EVIDENCE = 3  # launches with name evidence needed before disagreement rejects a capture
MAX_CANDIDATES = 64  # captured sequences tried per graph when none has the graph's exact shape
MAX_SAME_SHAPE = 256  # captured sequences of the graph's exact shape tried (vLLM captures ~70 batch sizes)
MAX_NOT_JOINED = 256  # (capture, graph) pairs scored to say why a capture trace was not joined
CAPTURE_MARKERS = re.compile(r"StreamBeginCapture|StreamEndCapture|GraphInstantiate")
# coarse classes that let order-only alignment tell a GEMM launch from the others (Cijk_*: ROCm's
# hipBLASLt / rocBLAS Tensile GEMMs, whose names say no 'gemm'; xDiT's HIP graphs on MI300X)
GEMM_KERNEL = re.compile(r"gemm|gemv|xmma|cutlass|cublas|wgmma|matmul|splitK|nvjet|^Cijk_", re.IGNORECASE)
GEMM_OP = re.compile(r"^aten::(_?(add)?mm|bmm|baddbmm|matmul|linear|addmv|mv|_scaled_mm|_int_mm)$")


def _coarse(kind: str, gemm: bool) -> str:
    """Kind of a launch for alignment without kernel names: 'kernel:gemm', 'kernel', 'memcpy'..."""
    return f"{kind}:gemm" if gemm and kind == tables.KIND_KERNEL else kind


@functools.lru_cache(maxsize=4096)
def _kernel_kind(kind: str, name: str) -> str:
    """_coarse of a GPU activity, by its kernel name (names repeat: searched once each)."""
    return _coarse(kind, bool(GEMM_KERNEL.search(name)))


@dataclass
class _Captured:
    """One captured launch sequence of one source trace."""

    source: int
    ops: list[int]  # op row in the source's ops table per launch (-1 when none)
    kinds: tuple[str, ...]
    tokens: list  # the kernel an eager twin of each launch ran (name, grid, block), else a placeholder
    evidence: np.ndarray  # bool per launch: tokens[i] is a real kernel


@dataclass
class _Graph:
    tokens: tuple
    kinds: tuple[str, ...]
    launches: list[np.ndarray] = field(default_factory=list)  # gpu rows of each replay, in order


def _gpu_tokens(gpu: pd.DataFrame, rows: np.ndarray) -> list[tuple]:
    cols = [gpu[c].to_numpy()[rows].tolist() for c in (tables.GPU_KIND, tables.GPU_NAME, *tables.GPU_GRID, *tables.GPU_BLOCK)]
    return list(zip(*cols, strict=True))


def _launch_kinds(rank: RankTrace) -> np.ndarray:
    """Runtime kind of each GPU row's launch call ('' when unlinked)."""
    launch = rank.gpu[tables.GPU_LAUNCH].to_numpy()
    kinds = rank.runtime[tables.RT_KIND].to_numpy(dtype=object) if len(rank.runtime) else np.array([], dtype=object)
    out = np.full(len(launch), "", dtype=object)
    ok = launch >= 0
    out[ok] = kinds[launch[ok]]
    return out


def _graphs(rank: RankTrace, launch_kind: np.ndarray) -> tuple[list[_Graph], np.ndarray]:
    """Distinct replayed sequences and the graph id of every GPU row (-1 for eager work)."""
    gpu = rank.gpu
    graph_id = np.full(len(gpu), -1, dtype=np.int64)
    rows = np.flatnonzero(launch_kind == tables.KIND_GRAPH)
    if not len(rows):
        return [], graph_id
    launch = gpu[tables.GPU_LAUNCH].to_numpy()[rows]
    order = np.lexsort((gpu[tables.GPU_TS].to_numpy()[rows], launch))
    rows, launch = rows[order], launch[order]
    tokens = _gpu_tokens(gpu, rows)
    cuts = np.flatnonzero(np.diff(launch)) + 1
    graphs: list[_Graph] = []
    by_sig: dict[tuple, int] = {}
    for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), len(rows)], strict=True):
        sig = tuple(tokens[lo:hi])
        g = by_sig.get(sig)
        if g is None:
            g = by_sig[sig] = len(graphs)
            graphs.append(_Graph(sig, tuple(_kernel_kind(t[0], t[1]) for t in sig)))
        graphs[g].launches.append(rows[lo:hi])
        graph_id[rows[lo:hi]] = g
    return graphs, graph_id


def _raw_dims(rank: RankTrace, rows: np.ndarray) -> list[bytes]:
    store = rank.op_input_store
    if store is not None and len(store.starts) == len(rank.ops):
        return store.raw_values(rows, tables.OP_INPUT_DIMS)
    values = rank.ops[tables.OP_INPUT_DIMS].to_numpy(dtype=object)[rows]
    return [msgspec.json.encode(v) for v in values]


def _launch_keys(rank: RankTrace, launches: np.ndarray) -> list[tuple | None]:
    """(op name, its input dims as recorded, position of the launch within the op call) per launch:
    equal keys in eager work and in a capture mean the same kernel launch."""
    rt = rank.runtime
    op = rt[tables.RT_OP].to_numpy()[launches]
    ordinal = pd.Series(op).groupby(op).cumcount().to_numpy()
    names = rank.ops[tables.OP_NAME].to_numpy(dtype=object)
    has_op = op >= 0
    dims = dict(zip(np.unique(op[has_op]).tolist(), _raw_dims(rank, np.unique(op[has_op])), strict=True))
    return [(names[o], dims[o], int(k)) if o >= 0 else None
            for o, k in zip(op.tolist(), ordinal.tolist(), strict=True)]


def _scan(source: int, rank: RankTrace, evidence: dict) -> list[_Captured]:
    """Record eager launches' kernels in `evidence` (by launch key); return the captured sequences:
    runs of launches without GPU work, cut by eager launches, syncs and capture begin/end calls."""
    rt, gpu = rank.runtime, rank.gpu
    if not len(rt):
        return []
    kind = rt[tables.RT_KIND].to_numpy(dtype=object)
    work = np.isin(kind, tables.GPU_KINDS)
    corr = rt[tables.RT_CORRELATION].to_numpy()
    linked = gpu[tables.GPU_LAUNCH].to_numpy() if len(gpu) else np.array([], dtype=np.int64)
    first_gpu = np.full(len(rt), -1, dtype=np.int64)
    ok = linked >= 0
    first_gpu[linked[ok][::-1]] = np.flatnonzero(ok)[::-1]
    eager = work & (first_gpu >= 0)
    captured = work & (first_gpu < 0) & (corr >= 0)
    if not captured.any():
        return []
    marker = rt[tables.RT_NAME].astype(str).str.contains(CAPTURE_MARKERS).to_numpy()
    cut = eager | marker | np.isin(kind, (tables.KIND_SYNC, tables.KIND_GRAPH))
    segment = np.cumsum(cut)
    launches = np.flatnonzero(work)
    keys = _launch_keys(rank, launches)
    key_of = dict(zip(launches.tolist(), keys, strict=True))
    eager_rows = np.flatnonzero(eager)
    for r, tok in zip(eager_rows.tolist(), _gpu_tokens(gpu, first_gpu[eager_rows]), strict=True):
        if key_of[r] is not None:
            evidence.setdefault(key_of[r], tok)
    out = []
    crow = np.flatnonzero(captured)
    ops = rt[tables.RT_OP].to_numpy()
    op_names = rank.ops[tables.OP_NAME].to_numpy(dtype=object)
    gemm = np.array([o >= 0 and bool(GEMM_OP.match(str(op_names[o]))) for o in ops[crow].tolist()])
    coarse = np.empty(len(rt), dtype=object)
    coarse[crow] = [_coarse(k, g) for k, g in zip(kind[crow].tolist(), gemm.tolist(), strict=True)]
    for seg_rows in np.split(crow, np.flatnonzero(np.diff(segment[crow])) + 1):
        out.append(_Captured(source, ops[seg_rows].tolist(), tuple(coarse[seg_rows].tolist()), [],
                             np.zeros(len(seg_rows), dtype=bool)))
        out[-1].tokens = [key_of[r] for r in seg_rows.tolist()]  # resolved once all evidence is in
    return out


def _resolve(captured: list[_Captured], evidence: dict) -> None:
    for c in captured:
        tokens = []
        for i, key in enumerate(c.tokens):
            tok = evidence.get(key) if key is not None else None
            c.evidence[i] = tok is not None
            tokens.append(tok if tok is not None else ("?", id(c), i))
        c.tokens = tokens


@dataclass
class _Choice:
    captured: _Captured | None = None
    pairs: list[tuple[int, int]] = field(default_factory=list)
    aligned: int = 0
    evidenced: int = 0
    agree: int = 0
    accepted: bool = False


def _score(c: _Captured, g: _Graph, budget: Budget) -> _Choice:
    pairs = align(c.tokens, g.tokens, c.kinds, g.kinds, budget)
    ev = [i for i, _ in pairs if c.evidence[i]]
    agree = sum(1 for i, j in pairs if c.evidence[i] and c.tokens[i] == g.tokens[j])
    accepted = (len(pairs) >= MIN_ALIGNED * len(g.tokens)
                and (len(ev) < MIN_EVIDENCE or agree >= MIN_AGREE * len(ev)))
    return _Choice(c, pairs, len(pairs), len(ev), agree, accepted)


class _Candidates:
    """The captured sequences a graph is scored against: those of its exact shape (kinds), else
    the MAX_CANDIDATES nearest in length (within half to twice the graph's), ties in scan order.
    Indexed by shape and by length, so each graph costs its candidates, not all the captures."""

    def __init__(self, captured: list[_Captured]) -> None:
        self.by_kinds: dict[tuple, list[_Captured]] = {}
        self.by_len: dict[int, list[int]] = {}
        self.captured = captured
        for p, c in enumerate(captured):
            self.by_kinds.setdefault(c.kinds, []).append(c)
            self.by_len.setdefault(len(c.kinds), []).append(p)
        self.lengths = sorted(self.by_len)

    def of(self, g: _Graph) -> list[_Captured]:
        same = self.by_kinds.get(g.kinds)
        if same:
            return same[:MAX_SAME_SHAPE]
        n = len(g.kinds)
        lo, hi = bisect.bisect_left(self.lengths, (n + 1) // 2), bisect.bisect_right(self.lengths, 2 * n)
        left = bisect.bisect_left(self.lengths, n, lo, hi) - 1
        right = left + 1
        out: list[int] = []
        while len(out) < MAX_CANDIDATES and (left >= lo or right < hi):
            d_left = n - self.lengths[left] if left >= lo else None
            d_right = self.lengths[right] - n if right < hi else None
            d = min(x for x in (d_left, d_right) if x is not None)
            ring: list[int] = []
            if d_left == d:
                ring += self.by_len[self.lengths[left]]
                left -= 1
            if d_right == d:
                ring += self.by_len[self.lengths[right]]
                right += 1
            out += sorted(ring)
        return [self.captured[p] for p in out[:MAX_CANDIDATES]]


def _best_capture(g: _Graph, cands: list[_Captured], budget: Budget) -> _Choice:
    best = _Choice()
    for c in cands:
        s = _score(c, g, budget)
        if (s.accepted, s.agree, s.aligned) > (best.accepted, best.agree, best.aligned):
            best = s
            if s.accepted and s.agree == len(g.tokens):  # every kernel confirmed: none can do better
                break
    return best


@dataclass(frozen=True)
class JoinResult:
    rank: RankTrace
    notes: tuple[str, ...]


def join_graphs(rank: RankTrace, captures: list[RankTrace], *, own_capture: bool = True) -> JoinResult:
    """`rank` with every graph-replayed GPU row given an op where a capture (in `rank` itself or in
    `captures`) or an eager run of the same kernels explains it; one note per capture not joined.
    own_capture=False ignores captures recorded in `rank` itself (to measure the inferred path)."""
    gpu, ops = rank.gpu, rank.ops  # fresh from the loader: columns are added in place
    ops[tables.OP_ORIGIN] = ""
    match = np.full(len(gpu), "", dtype=object)
    replays = len(rank.runtime) > 0 and bool((rank.runtime[tables.RT_KIND] == tables.KIND_GRAPH).any())
    graphs, graph_id = _graphs(rank, _launch_kinds(rank)) if replays else ([], np.full(len(gpu), -1))
    gpu[tables.GPU_GRAPH] = graph_id
    gpu[tables.GPU_GRAPH_MATCH] = match
    if not graphs:
        notes = tuple(f"{c.path}: capture trace not joined: {Path(rank.path).name} replays no "
                      "CUDA/HIP graph" for c in captures)
        return JoinResult(rank, notes)
    sources = [rank, *captures]
    evidence: dict = {}
    captured = [c for s, r in enumerate(sources) for c in _scan(s, r, evidence) if s or own_capture]
    _resolve(captured, evidence)
    candidates = _Candidates(captured)
    budget = Budget(len(gpu) + sum(len(c.kinds) for c in captured))  # exact alignment, for the whole join
    op_col = gpu[tables.GPU_OP].to_numpy().copy()
    wanted: dict[int, dict[int, int]] = {}  # source -> its op row -> row in `ops` (filled below)
    assigned: list[tuple[np.ndarray, np.ndarray, int, str]] = []  # gpu rows, source op rows, source, how
    used_sources: set[int] = set()
    unmatched = []
    for g in graphs:
        ch = _best_capture(g, candidates.of(g), budget)
        if not ch.accepted or ch.captured is None:
            unmatched.append(g)
            continue
        c = ch.captured
        used_sources.add(c.source)
        how = MATCH_NAME if ch.agree >= MIN_AGREE * max(ch.aligned, 1) else MATCH_ORDER
        js = np.array([j for i, j in ch.pairs if c.ops[i] >= 0], dtype=np.int64)
        src_ops = np.array([c.ops[i] for i, _ in ch.pairs if c.ops[i] >= 0], dtype=np.int64)
        if c.source:
            wanted.setdefault(c.source, {}).update(dict.fromkeys(src_ops.tolist(), -1))
        assigned.append((np.concatenate([rows[js] for rows in g.launches]), src_ops, c.source, how))
    if unmatched:
        _infer(rank, unmatched, op_col, match, budget)
    if wanted:
        ops, store = append_capture_ops(rank, ops, sources, wanted)
    else:
        store = rank.op_input_store
    for rows, src_ops, source, how in assigned:  # rows: every launch's, in turn
        mapped = np.array([wanted[source][o] for o in src_ops.tolist()]) if source else src_ops
        op_col[rows] = np.tile(mapped, len(rows) // max(len(mapped), 1))
        match[rows] = how
    gpu[tables.GPU_OP] = op_col
    gpu[tables.GPU_GRAPH_MATCH] = match
    decode_linked(ops, store, op_col[match != ""])
    notes = tuple(_not_joined(s, cap, rank, captured, graphs, budget) for s, cap in enumerate(captures, start=1)
                  if s not in used_sources)
    return JoinResult(replace(rank, gpu=gpu, ops=ops, op_input_store=store), notes)


def _not_joined(source: int, cap: RankTrace, rank: RankTrace, captured: list[_Captured],
                graphs: list[_Graph], budget: Budget) -> str:
    """The one line saying why capture trace `cap` explains none of the graphs (its best fit among
    the first MAX_NOT_JOINED pairs of similar length)."""
    mine = [c for c in captured if c.source == source]
    best = _Choice()
    pairs = ((c, g) for c in mine for g in graphs if len(g.kinds) / 2 <= len(c.kinds) <= 2 * len(g.kinds))
    for c, g in itertools.islice(pairs, MAX_NOT_JOINED):
        sc = _score(c, g, budget)
        if (sc.agree, sc.aligned) > (best.agree, best.aligned):
            best = sc
    if not mine:
        why = "it holds no graph capture (no launch without GPU work)"
    elif best.captured is None:
        why = (f"none of its {plural(len(mine), 'captured sequence')} has the length of the "
               f"{plural(len(graphs), 'graph')} replayed")
    else:
        why = (f"at best only {best.agree} of {best.evidenced} launches match a replayed kernel's name and grid "
               f"({best.aligned} aligned): probably a capture of another model or batch size")
    return f"{cap.path}: capture trace not joined to {Path(rank.path).name}: {why}"


def _infer(rank: RankTrace, graphs: list[_Graph], op_col: np.ndarray, match: np.ndarray,
           budget: Budget) -> None:
    """Ops of eager runs of the same kernels (same names, grids and blocks) in the same trace."""
    gpu = rank.gpu
    launch_kind = _launch_kinds(rank)
    eager = np.flatnonzero((launch_kind != tables.KIND_GRAPH) & (launch_kind != ""))
    if not len(eager):
        return
    eager = eager[np.lexsort((gpu[tables.GPU_TS].to_numpy()[eager], gpu[tables.GPU_STREAM].to_numpy()[eager]))]
    tokens = _gpu_tokens(gpu, eager)
    kinds = [_kernel_kind(t[0], t[1]) for t in tokens]
    index = SeedIndex(tokens)
    eager_op = gpu[tables.GPU_OP].to_numpy()[eager]
    for g in graphs:
        win = index.window(g.tokens)
        if win is None:
            continue
        lo, hi = win
        pairs = [(i, j) for i, j in align(tokens[lo:hi], g.tokens, kinds[lo:hi], g.kinds, budget)
                 if tokens[lo + i] == g.tokens[j] and eager_op[lo + i] >= 0]
        if len(pairs) < MIN_ALIGNED * len(g.tokens):
            continue
        js = np.array([j for _, j in pairs], dtype=np.int64)
        src = eager_op[[lo + i for i, _ in pairs]]
        for rows in g.launches:
            op_col[rows[js]] = src
            match[rows[js]] = MATCH_INFERRED
