"""torch.compile graph breaks: compiled regions and cache lookups per step, the host work between consecutive compiled graphs, and recompiles from the region counters.

Dynamo records `TorchDynamo Cache Lookup` (its guard check) and `Torch-Compiled Region: F/C` (frame F's
C-th compiled version running) for every frame it runs; Inductor's graphs run inside
`## Call CompiledFxGraph <hash> ##` annotations (AOTAutograd's `CompiledFunction` op in training).
A graph break splits a frame: its first graph runs, the breaking code runs eagerly, then the resume
function is a new frame (a lookup and a region of its own, nested in the first region or after it).
A break here is the stretch between two consecutive compiled graphs on one thread in one step that
holds a cache lookup or a region start (so the second graph belongs to another compiled frame);
the stretch from the forward's last graph to a backward graph holds neither. Only steps where a region
runs inside another on the thread have breaks: a broken frame calls its resume function from inside
its own region, while functions compiled one by one (`torch.compile(rms_norm)`) and called from
eager code give sibling regions, none inside another, and eager code between them that is no break
(sample_traces/bare/compile_graph_breaks: the resume frame 2/0 inside 1/0 in every block;
train_llm_fused: 22 sibling regions a step). Sibling regions are breaks too where the eager code
between them syncs with the host and runs no backward: a data-dependent branch in a loop makes Dynamo
skip the loop's frame and compile each callee on its own, so the model runs as sibling graphs with a
sync between each (heldout7 compile_nancheck: `if not torch.isfinite(x).all()` after each of 4 blocks,
frame 1/0 four times a step, an `aten::is_nonzero` sync between)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.hostside import SYNC_ORIGINS, StepsOf
from tracekit.analyzers.names import matches
from tracekit.trace import tables
from tracekit.trace.intervals import busy_in_windows, merge_intervals
from tracekit.trace.model import RankTrace

REGION = re.compile(r"^Torch-Compiled Region: ([0-9]{1,9})/([0-9]{1,9})$")
LOOKUP = "TorchDynamo Cache Lookup"
GRAPH_CALL = re.compile(r"^## Call CompiledFxGraph |^CompiledFunction$")
# torch.compile's own machinery between graphs (AOTAutograd's wrappers, Dynamo's bytecode hooks): not
# the op at a break (torch 2.11 names)
MACHINERY = re.compile(r"^(?:AOTDispatcher |Pregraph bytecode|Postgraph bytecode|Torch-Compiled Region|"
                       r"TorchDynamo |CompiledFunction|## )")
# the autograd engine running a backward: a stretch that holds one is forward → backward, not a break
BACKWARD = re.compile(r"^autograd::engine::|Backward")
# the autograd engine running one compiled backward graph (AOTAutograd's CompiledFunction's backward)
BACKWARD_GRAPH = "autograd::engine::evaluate_function: CompiledFunctionBackward"
TOP_OPS = 3  # op names a break lists
NAME_CHARS = 60  # of each name (trace text is untrusted)

# --- columns of Patterns.compiled (one row per step with a compiled region) --------------------------
CR_STEP = "step"
CR_REGIONS = "regions"  # Torch-Compiled Region events
CR_LOOKUPS = "lookups"  # TorchDynamo Cache Lookup events
CR_FRAMES = "frames"  # distinct compiled frames (F of F/C)
CR_RECOMPILED = "recompiled"  # "F/C" of the regions with C ≥ 1 (frame F recompiled), sorted, comma-separated
COMPILED_COLUMNS = (CR_STEP, CR_REGIONS, CR_LOOKUPS, CR_FRAMES, CR_RECOMPILED)

# --- columns of Patterns.graph_breaks (one row per break) ------------------------------------------
GB_STEP = "step"
GB_TID = "tid"
GB_START = "start"  # end of the graph before the break (trace µs)
GB_END = "end"  # start of the graph after it
GB_HOST_US = "host_us"  # end − start: the host time between the two graphs
GB_CPU_START = "cpu_start"  # end of the thread's last runtime call before the break (graph A's last launch)
GB_CPU_END = "cpu_end"  # start of its first runtime call after it (graph B's first launch)
GB_SYNC_US = "sync_us"  # time in host-sync runtime calls inside it
GB_GUARD_US = "guard_us"  # time in TorchDynamo Cache Lookup (the guard check) inside it
GB_GPU_IDLE_US = "gpu_idle_us"  # GPU idle from the start to the first GPU activity after the end
GB_OPS = "ops"  # the ops at the break: sync origins first (aten::item...), then the longest top-level ops
BREAK_COLUMNS = (GB_STEP, GB_TID, GB_START, GB_END, GB_HOST_US, GB_CPU_START, GB_CPU_END, GB_SYNC_US, GB_GUARD_US, GB_GPU_IDLE_US, GB_OPS)


# --- columns of Patterns.backward_breaks (one row per stretch between two compiled backward graphs
# of a step with forward breaks: merging the forward graphs merges their backward graphs too) ----------
BB_STEP = "step"
BB_TID = "tid"
BB_CPU_START = "cpu_start"  # end of the thread's last runtime call inside the graph before
BB_CPU_END = "cpu_end"  # start of its first runtime call inside the graph after
BACKWARD_BREAK_COLUMNS = (BB_STEP, BB_TID, BB_CPU_START, BB_CPU_END)


def empty_backward_breaks() -> pd.DataFrame:
    return pd.DataFrame(columns=list(BACKWARD_BREAK_COLUMNS))


def empty_compiled() -> pd.DataFrame:
    return pd.DataFrame(columns=list(COMPILED_COLUMNS))


def empty_breaks() -> pd.DataFrame:
    return pd.DataFrame(columns=list(BREAK_COLUMNS))


def _compiled_steps(names: np.ndarray, op_steps: np.ndarray, region: np.ndarray, lookup: np.ndarray) -> pd.DataFrame:
    recs = []
    for step in sorted({int(s) for s in op_steps[region | lookup]}):
        here = op_steps == step
        ids = [REGION.match(str(n)) for n in names[region & here]]
        pairs = [(int(m.group(1)), int(m.group(2))) for m in ids if m is not None]
        recompiled = sorted({p for p in pairs if p[1] >= 1})
        recs.append({CR_STEP: step, CR_REGIONS: len(pairs), CR_LOOKUPS: int((lookup & here).sum()),
                     CR_FRAMES: len({f for f, _ in pairs}),
                     CR_RECOMPILED: ", ".join(f"{f}/{c}" for f, c in recompiled)})
    return pd.DataFrame(recs, columns=list(COMPILED_COLUMNS))


def _segments(rank: RankTrace, op_names: np.ndarray, region: np.ndarray,
              an_steps: np.ndarray, op_steps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(tid, start, end, step) of the compiled graphs: the graph-call annotations and ops, else
    the regions that hold no other region."""
    an, ops = rank.annotations, rank.ops
    cpu_an = ~an[tables.AN_GPU].to_numpy(dtype=bool) if len(an) else np.zeros(0, dtype=bool)
    a_hit = cpu_an & matches(an[tables.AN_NAME], GRAPH_CALL) if len(an) else cpu_an
    o_hit = matches(ops[tables.OP_NAME], GRAPH_CALL)
    if a_hit.any() or o_hit.any():
        tid = np.concatenate([an[tables.AN_TID].to_numpy()[a_hit], ops[tables.OP_TID].to_numpy()[o_hit]])
        ts = np.concatenate([an[tables.AN_TS].to_numpy(float)[a_hit], ops[tables.OP_TS].to_numpy(float)[o_hit]])
        end = np.concatenate([an[tables.AN_END].to_numpy(float)[a_hit], ops[tables.OP_END].to_numpy(float)[o_hit]])
        step = np.concatenate([an_steps[a_hit], op_steps[o_hit]])
        return tid, ts, end, step
    parent = ops[tables.OP_PARENT].to_numpy(dtype=np.int64)
    has_child = np.zeros(len(ops), dtype=bool)
    inner = np.flatnonzero(region)
    for r in inner.tolist():  # mark the regions' region ancestors
        p = int(parent[r])
        while p >= 0:
            if region[p]:
                has_child[p] = True
            p = int(parent[p])
    leaf = region & ~has_child
    return (ops[tables.OP_TID].to_numpy()[leaf], ops[tables.OP_TS].to_numpy(float)[leaf],
            ops[tables.OP_END].to_numpy(float)[leaf], op_steps[leaf])


def _ops_at(ops: pd.DataFrame, tid: object, lo: float, hi: float, skip: np.ndarray) -> str:
    """The ops inside [lo, hi] on `tid`: the sync origins among them first, then the longest outermost ones."""
    sel = ((ops[tables.OP_TID].to_numpy() == tid) & (ops[tables.OP_TS].to_numpy(float) >= lo)
           & (ops[tables.OP_END].to_numpy(float) <= hi) & ~skip)
    if not sel.any():
        return ""
    names = ops[tables.OP_NAME].to_numpy(dtype=object)[sel]
    dur = ops[tables.OP_DUR].to_numpy(float)[sel]
    seen = {str(n) for n in names}
    picked = [n for n in SYNC_ORIGINS if n in seen][:TOP_OPS]
    parent = ops[tables.OP_PARENT].to_numpy(dtype=np.int64)[sel]
    rows = np.flatnonzero(sel)
    outer = ~np.isin(parent, rows)
    order = np.argsort(-dur[outer], kind="stable")
    for n in names[outer][order]:
        if len(picked) >= TOP_OPS:
            break
        if str(n) not in picked:
            picked.append(str(n))
    return ", ".join(p[:NAME_CHARS] for p in picked)


def _nested_steps(ops: pd.DataFrame, region: np.ndarray, op_steps: np.ndarray) -> set[tuple[object, int]]:
    """(thread, step) pairs where a compiled region starts inside an earlier region on that thread."""
    rows = np.flatnonzero(region)
    out: set[tuple[object, int]] = set()
    if len(rows) < 2:
        return out
    tid, ts, end = ops[tables.OP_TID].to_numpy()[rows], ops[tables.OP_TS].to_numpy(float)[rows], \
        ops[tables.OP_END].to_numpy(float)[rows]
    for t in pd.unique(tid):
        mine = np.flatnonzero(tid == t)
        mine = mine[np.argsort(ts[mine], kind="stable")]
        reach = np.maximum.accumulate(end[mine])  # the latest end among the regions started so far
        inside = np.zeros(len(mine), dtype=bool)
        inside[1:] = ts[mine][1:] < reach[:-1]
        out.update((t, int(op_steps[rows[i]])) for i in mine[inside])
    return out


def _backward_breaks(rank: RankTrace, op_steps: np.ndarray, breaks: pd.DataFrame) -> pd.DataFrame:
    """BACKWARD_BREAK_COLUMNS: in each step with n forward breaks, the stretches between its first n+1
    consecutive compiled backward graphs on one thread (from the last runtime call inside one to the
    first inside the next: the graph's epilogue, the engine's hand-over, the next graph's prologue)."""
    ops, rt = rank.ops, rank.runtime
    graph = ops[tables.OP_NAME].to_numpy(dtype=object) == BACKWARD_GRAPH
    if not len(breaks) or not graph.any():
        return empty_backward_breaks()
    per_step = breaks[GB_STEP].value_counts()
    r_ts, r_end, r_tid = rt[tables.RT_TS].to_numpy(float), rt[tables.RT_END].to_numpy(float), rt[tables.RT_TID].to_numpy()
    g_rows = np.flatnonzero(graph & np.isin(op_steps, per_step.index.to_numpy()))
    g_tid, g_ts, g_end = (ops[tables.OP_TID].to_numpy()[g_rows], ops[tables.OP_TS].to_numpy(float)[g_rows],
                          ops[tables.OP_END].to_numpy(float)[g_rows])
    recs = []
    for (t, step), idx in pd.Series(range(len(g_rows))).groupby([g_tid, op_steps[g_rows]]).groups.items():
        mine = np.asarray(idx)[np.argsort(g_ts[np.asarray(idx)], kind="stable")]
        on = np.flatnonzero(r_tid == t)
        for a, b in list(zip(mine[:-1].tolist(), mine[1:].tolist(), strict=True))[: int(per_step[step])]:
            in_a = on[(r_ts[on] >= g_ts[a]) & (r_end[on] <= g_end[a])]
            in_b = on[(r_ts[on] >= g_ts[b]) & (r_end[on] <= g_end[b])]
            lo = float(r_end[in_a].max()) if len(in_a) else float(g_end[a])
            hi = float(r_ts[in_b].min()) if len(in_b) else float(g_ts[b])
            if hi > lo:
                recs.append({BB_STEP: int(step), BB_TID: t, BB_CPU_START: lo, BB_CPU_END: hi})
    return pd.DataFrame(recs, columns=list(BACKWARD_BREAK_COLUMNS)) if recs else empty_backward_breaks()


def in_compiled_graphs(rank: RankTrace, steps: StepsOf) -> np.ndarray:
    """Per rank.runtime row: the call runs inside a compiled graph's call (`_segments`) on its thread,
    the launches that mode="reduce-overhead" captures in the graph it replays; all False without Dynamo."""
    rt = rank.runtime
    out = np.zeros(len(rt), dtype=bool)
    ops = rank.ops
    if not len(ops) or not len(rt):
        return out
    region = matches(ops[tables.OP_NAME], REGION)
    if not region.any():
        return out
    tid, ts, end, _ = _segments(rank, ops[tables.OP_NAME].to_numpy(dtype=object), region, steps.annotations, steps.ops)
    r_tid, r_ts = rt[tables.RT_TID].to_numpy(), rt[tables.RT_TS].to_numpy(float)
    for t in pd.unique(tid):
        lo, hi = merge_intervals(ts[tid == t], end[tid == t])
        mine = np.flatnonzero(r_tid == t)
        at = np.searchsorted(lo, r_ts[mine], side="right") - 1
        out[mine] = (at >= 0) & (r_ts[mine] <= hi[np.maximum(at, 0)])
    return out


def region_spans(rank: RankTrace) -> np.ndarray:
    """(start, end) of every Torch-Compiled Region, merged over threads: the host time of compiled
    functions (their guards, wrappers, graph calls, CUDA-graph trees' warm-ups and recordings)."""
    ops = rank.ops
    if not len(ops):
        return np.zeros((0, 2))
    region = matches(ops[tables.OP_NAME], REGION)
    if not region.any():
        return np.zeros((0, 2))
    lo, hi = merge_intervals(ops[tables.OP_TS].to_numpy(float)[region], ops[tables.OP_END].to_numpy(float)[region])
    return np.column_stack((lo, hi))


def find_compiled(rank: RankTrace, steps: StepsOf) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, np.ndarray]:
    """(COMPILED_COLUMNS per step, BREAK_COLUMNS per graph break, BACKWARD_BREAK_COLUMNS per stretch
    between the compiled backward graphs of steps with breaks, per rank.runtime row whether it runs on
    a thread with either) of one rank; empty without Dynamo."""
    ops = rank.ops
    none = np.zeros(len(rank.runtime), dtype=bool)
    if not len(ops):
        return empty_compiled(), empty_breaks(), empty_backward_breaks(), none
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    region = matches(ops[tables.OP_NAME], REGION)
    lookup = names == LOOKUP
    if not (region.any() or lookup.any()):
        return empty_compiled(), empty_breaks(), empty_backward_breaks(), none
    per_step = _compiled_steps(names, steps.ops, region, lookup)
    tid, ts, end, step = _segments(rank, names, region, steps.annotations, steps.ops)
    marks_ts = ops[tables.OP_TS].to_numpy(float)[region | lookup]
    marks_tid = ops[tables.OP_TID].to_numpy()[region | lookup]
    l_ts, l_end, l_tid = (ops[tables.OP_TS].to_numpy(float)[lookup], ops[tables.OP_END].to_numpy(float)[lookup],
                          ops[tables.OP_TID].to_numpy()[lookup])
    rt = rank.runtime
    r_ts, r_end, r_tid = rt[tables.RT_TS].to_numpy(float), rt[tables.RT_END].to_numpy(float), rt[tables.RT_TID].to_numpy()
    sync = rt[tables.RT_KIND].to_numpy(dtype=object) == tables.KIND_SYNC
    s_ts, s_end, s_tid = (rt[tables.RT_TS].to_numpy(float)[sync], rt[tables.RT_END].to_numpy(float)[sync],
                          rt[tables.RT_TID].to_numpy()[sync])
    g_ts, g_end = merge_intervals(rank.gpu[tables.GPU_TS].to_numpy(float), rank.gpu[tables.GPU_END].to_numpy(float))
    skip = region | lookup | matches(ops[tables.OP_NAME], GRAPH_CALL) | matches(ops[tables.OP_NAME], MACHINERY)
    recs = []
    for t in pd.unique(tid):
        mine = np.flatnonzero((tid == t) & (step >= 0))
        mine = mine[np.argsort(ts[mine], kind="stable")]
        for a, b in zip(mine[:-1].tolist(), mine[1:].tolist(), strict=True):
            lo, hi = float(end[a]), float(ts[b])
            if step[a] != step[b] or hi <= lo:
                continue
            if not ((marks_tid == t) & (marks_ts >= lo) & (marks_ts <= hi)).any():
                continue  # no compiled frame entered between them: forward → backward, not a break
            in_sync = (s_tid == t) & (s_ts >= lo) & (s_end <= hi)
            in_guard = (l_tid == t) & (l_ts >= lo) & (l_end <= hi)
            before = (r_tid == t) & (r_end <= lo)
            after = (r_tid == t) & (r_ts >= hi)
            cpu_lo = float(r_end[before].max()) if before.any() else lo
            cpu_hi = float(r_ts[after].min()) if after.any() else hi
            nxt = int(np.searchsorted(g_ts, hi, side="right"))  # the first GPU work starting after hi
            gpu_end = float(g_ts[nxt]) if nxt < len(g_ts) else hi
            busy = float(busy_in_windows(g_ts, g_end, np.array([lo]), np.array([gpu_end]))[0])
            recs.append({GB_STEP: int(step[a]), GB_TID: t, GB_START: lo, GB_END: hi, GB_HOST_US: hi - lo,
                         GB_CPU_START: cpu_lo, GB_CPU_END: cpu_hi,
                         GB_SYNC_US: float((s_end[in_sync] - s_ts[in_sync]).sum()),
                         GB_GUARD_US: float((l_end[in_guard] - l_ts[in_guard]).sum()),
                         GB_GPU_IDLE_US: max(gpu_end - lo - busy, 0.0), GB_OPS: _ops_at(ops, t, lo, hi, skip)})
    nested = _nested_steps(ops, region, steps.ops)
    backward = matches(ops[tables.OP_NAME], BACKWARD)  # the backward ops, found once for every break
    bw_ts, bw_tid = ops[tables.OP_TS].to_numpy(float)[backward], ops[tables.OP_TID].to_numpy()[backward]
    recs = [r for r in recs if (r[GB_TID], r[GB_STEP]) in nested
            or (r[GB_SYNC_US] > 0
                and not ((bw_tid == r[GB_TID]) & (bw_ts >= r[GB_START]) & (bw_ts <= r[GB_END])).any())]
    breaks = pd.DataFrame(recs, columns=list(BREAK_COLUMNS)) if recs else empty_breaks()
    backward = _backward_breaks(rank, steps.ops, breaks)
    threads = np.concatenate([breaks[GB_TID].to_numpy(), backward[BB_TID].to_numpy()])
    on_thread = np.isin(rt[tables.RT_TID].to_numpy(), threads) if recs else none
    return per_step, breaks, backward, on_thread
