"""Rules about host-side stalls: syncs in loops, pageable copies, DataLoader time, exposed communication."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analyzers.analysis import Analysis, RankAnalysis
from tracekit.analyzers.detectors import hostside as H
from tracekit.suggestions.common import Scope, fmt_bytes, fmt_us, rank_tables, suggestion
from tracekit.suggestions.model import Suggestion

SYNC_LOOP_MIN = 2  # syncs of one origin per step that make a loop (or per trace without steps)
DATALOADER_MIN_PCT = 5.0  # "dominating": the GPU waits on loading for at least this share of the span
ORIGIN_LABEL = {
    "": "explicit synchronize (torch.cuda.synchronize / stream.synchronize / event.synchronize)",
    "aten::item": ".item() / float(t) / bool(t)",
    "aten::_local_scalar_dense": ".item() / float(t) / bool(t)",
    "aten::nonzero": "nonzero() / boolean-mask indexing",
    "aten::masked_select": "masked_select / boolean-mask indexing",
    "aten::to": ".to('cpu') / .cpu() / .to(device) without non_blocking",
    "aten::_to_copy": ".to('cpu') / .cpu() / .to(device) without non_blocking",
    "aten::copy_": "copy_ between host and device",
    "aten::cpu": ".cpu()",
}


def _in_scope(r: RankAnalysis, steps: np.ndarray) -> np.ndarray:
    """Rows of a per-call table inside the rank's analysed steps (all rows when it has none)."""
    if r.launch.scope != "steps":
        return np.ones(len(steps), dtype=bool)
    return np.isin(steps, r.launch.steps["step"].to_numpy())


def avoid_sync(analysis: Analysis) -> Suggestion | None:
    """Host syncs repeated within steps: Σ min(CPU wait, GPU bubble after the sync) per call."""
    scope = Scope.of(analysis)
    frames = []
    for r, table in rank_tables(analysis, "syncs"):
        t = table[_in_scope(r, table[H.SY_STEP].to_numpy()) & ~table[H.SY_PAGEABLE].astype(bool)]
        if len(t):
            frames.append(t.assign(rank=r.rank))
    if not frames:
        return None
    syncs = pd.concat(frames, ignore_index=True)
    syncs["saving"] = np.minimum(syncs[H.SY_WAIT_US], syncs[H.SY_BUBBLE_US])
    rows, total = [], 0.0
    for (origin, api), g in syncs.groupby([H.SY_ORIGIN, H.SY_API], sort=False):
        per_step = len(g) / (scope.steps * scope.ranks)
        if per_step < SYNC_LOOP_MIN:
            continue
        saving = float(g["saving"].sum())
        total += saving
        rows.append({"origin": origin or "(none)", "what": ORIGIN_LABEL.get(origin, origin), "api": api,
                     "calls": len(g), "per_step": per_step, "wait_us": float(g[H.SY_WAIT_US].sum()),
                     "bubble_us": float(g[H.SY_BUBBLE_US].sum()), "saving_us": saving})
    if not rows:
        return None
    rows.sort(key=lambda x: -x["saving_us"])
    saving = total / scope.ranks
    formula = ("Σ per sync call of min(CPU time waiting in the call, GPU idle from its return to the next "
               "GPU activity): without the sync the CPU runs ahead by at most its wait, and the GPU can "
               f"gain at most the bubble = {fmt_us(saving)} over {sum(x['calls'] for x in rows)} calls")
    title = (f"Remove host syncs from the loop: {sum(x['calls'] for x in rows)} sync calls "
             f"({', '.join(sorted({x['origin'] for x in rows}))[:80]}) drain the GPU queue")
    return suggestion("avoid_sync", title, saving, scope, formula, rows)


def pinned_memory(analysis: Analysis) -> Suggestion | None:
    """Pageable host-to-device copies: CPU blocked in the copy, at most the step's host-wait time."""
    scope = Scope.of(analysis)
    rows, total, nbytes, count = [], 0.0, 0.0, 0
    for r, table in rank_tables(analysis, "copies"):
        t = table[_in_scope(r, table[H.CP_STEP].to_numpy())]
        if not len(t):
            continue
        blocked = np.fmin(t[H.CP_CALL_US].to_numpy(dtype=float), t[H.CP_COPY_US].to_numpy(dtype=float))
        t = t.assign(blocked=blocked)
        waits = dict(zip(r.launch.steps["step"].tolist(), r.launch.steps["host_wait_us"].tolist(), strict=True))
        for step, g in t.groupby(H.CP_STEP, sort=True):
            b = float(g["blocked"].sum())
            cap = waits.get(step, b)
            saving = min(b, cap)
            total += saving
            nbytes += float(g[H.CP_BYTES].clip(lower=0).sum())
            count += len(g)
            copy_us = float(g[H.CP_COPY_US].sum())
            rows.append({"rank": r.rank, "step": int(step), "copies": len(g), "bytes": float(g[H.CP_BYTES].sum()),
                         "copy_us": copy_us, "blocked_us": b, "host_wait_us": cap,
                         "gbps": float(g[H.CP_BYTES].sum()) / copy_us / 1e3 if copy_us > 0 else None,
                         "saving_us": saving})
    if not rows:
        return None
    saving = total / scope.ranks
    formula = ("Σ per step of min(CPU time blocked in pageable copy calls = min(call, copy) per copy, the "
               f"step's GPU host-wait time) = {fmt_us(saving)}; pinned + non_blocking lets the CPU keep "
               "launching while the DMA runs")
    title = (f"Pin host memory and copy with non_blocking=True: {count} pageable host-to-device copies "
             f"({fmt_bytes(nbytes / scope.ranks)}) block the CPU")
    return suggestion("pinned_memory", title, saving, scope, formula, rows)


def dataloader_workers(analysis: Analysis) -> Suggestion | None:
    """DataLoader time on the main thread: the GPU idle time inside the loading windows."""
    scope = Scope.of(analysis)
    rows, total, load, single = [], 0.0, 0.0, False
    for r, table in rank_tables(analysis, "dataloader"):
        t = table[_in_scope(r, table[H.DL_STEP].to_numpy())]
        spans = dict(zip(r.launch.steps["step"].tolist(), r.launch.steps["span_us"].tolist(), strict=True))
        for row in t.to_dict("records"):
            total += row[H.DL_GPU_IDLE_US]
            load += row[H.DL_US]
            single |= bool(row[H.DL_SINGLE])
            span = spans.get(row[H.DL_STEP])
            rows.append({"rank": r.rank, "step": row[H.DL_STEP], "dataloader_us": row[H.DL_US],
                         "gpu_idle_us": row[H.DL_GPU_IDLE_US], "span_us": span,
                         "loading_pct": 100 * row[H.DL_US] / span if span else None,
                         "saving_us": row[H.DL_GPU_IDLE_US]})
    if not rows:
        return None
    saving = total / scope.ranks
    formula = (f"Σ GPU idle time inside the DataLoader's windows on the main thread = {fmt_us(saving)} "
               f"of {fmt_us(load / scope.ranks)} spent loading (loading the GPU did not wait for is not counted)")
    workers = "num_workers=0: batches load on the training thread" if single else "workers do not keep up"
    title = f"Load data in parallel (DataLoader num_workers, pin_memory): {workers}"
    return suggestion("dataloader_workers", title, saving, scope, formula, rows, min_pct=DATALOADER_MIN_PCT)


def overlap_comm(analysis: Analysis) -> Suggestion | None:
    """Exposed communication: min(exposed − last collective's exposed part, compute not yet overlapped)."""
    scope = Scope.of(analysis)
    rows, total, exposed = [], 0.0, 0.0
    for r, table in rank_tables(analysis, "comm"):
        t = table[_in_scope(r, table[H.CM_STEP].to_numpy())]
        for row in t.to_dict("records"):
            hideable = max(row[H.CM_EXPOSED_US] - row[H.CM_LAST_EXPOSED_US], 0.0)
            room = max(row[H.CM_COMPUTE_US] - row[H.CM_OVERLAP_US], 0.0)
            saving = min(hideable, room)
            total += saving
            exposed += row[H.CM_EXPOSED_US]
            rows.append({"rank": r.rank, "step": row[H.CM_STEP], "collectives": row[H.CM_COLLECTIVES],
                         "comm_us": row[H.CM_COMM_US], "exposed_us": row[H.CM_EXPOSED_US],
                         "compute_us": row[H.CM_COMPUTE_US], "overlap_us": row[H.CM_OVERLAP_US],
                         "saving_us": saving, "top_kernel": row[H.CM_TOP]})
    if not rows:
        return None
    rows.sort(key=lambda x: -x["saving_us"])
    saving = total / scope.ranks
    formula = ("Σ per rank and step of min(exposed communication − the last collective's exposed part (it "
               "cannot overlap), compute time not yet overlapped) = "
               f"{fmt_us(saving)} per rank (exposed: {fmt_us(exposed / scope.ranks)})")
    title = (f"Overlap communication with compute: {fmt_us(exposed / scope.ranks)} of collectives run "
             "with no compute beside them")
    return suggestion("overlap_comm", title, saving, scope, formula, rows)
