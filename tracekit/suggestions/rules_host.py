"""Rules about host-side stalls: syncs in loops, value checks and results read back one item at a time, pageable copies, large tensors copied to the host to be reduced there, DataLoader time, exposed communication."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pandas as pd

from tracekit.analyzers.analysis import Analysis, RankAnalysis
from tracekit.analyzers.detectors import host_reductions as hr
from tracekit.analyzers.detectors import hostside
from tracekit.analyzers.detectors import item_reads as ir
from tracekit.analyzers.detectors import value_checks as vc
from tracekit.analyzers.devices import Device
from tracekit.model.whatif import Transform, remove_calls
from tracekit.suggestions.common import (
    SILENT_BELOW_PCT,
    Scope,
    every_step_tables,
    fmt_bytes,
    fmt_us,
    in_headline,
    rank_tables,
    suggestion,
)
from tracekit.suggestions.model import Suggestion
from tracekit.suggestions.snippets import PINNED_D2H

SYNC_LOOP_MIN = 1  # syncs of one origin per headline step that make a per-step stall
PINNED_STEP_SHARE = 0.5  # pageable copies must recur in this share of the headline steps
# Host-to-device bandwidth from pinned memory the pinned_memory estimate assumes: measured on the
# H200 this project records on (PCIe Gen5: 54.0 GB/s for 64 MiB, pageable 6.2 GB/s;
# docs/validation.md); devices not listed get the PCIe Gen4 x16 figure. Device-to-host copies into
# pinned memory are priced at the same rate (a PCIe link moves DMA at the same speed both ways; no
# separate device-to-host figure was measured).
PINNED_H2D_GBPS = {"h200": 54.0, "h100": 54.0, "b200": 54.0}
PINNED_H2D_DEFAULT_GBPS = 24.0
DATALOADER_MIN_PCT = 5.0  # "dominating": the GPU waits on loading for at least this share of the span
# Round trips a step must hold before cuda_graphs and fuse_elementwise wait for avoid_sync: an int8
# layer's scale read and multiply (held-out int8_bert_scale_item: 144 a step) cut every forward into
# pieces of a few kernels; a read or two a step (a learning rate, a loss scale) leave the rest whole.
READS_SPLIT_STEP = 32
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


def avoid_sync(analysis: Analysis) -> Suggestion | None:
    """Host syncs repeated within steps: Σ min(CPU wait, GPU bubble after the sync) per call; the
    syncs inside a per-tensor loop are foreach_loops' (its change removes them), those of anomaly
    mode's NaN checks anomaly_mode's."""
    scope = Scope.of(analysis)
    frames = []
    for r, table in rank_tables(analysis, "syncs"):
        keep = in_headline(r, table[hostside.SY_STEP].to_numpy()) & ~table[hostside.SY_PAGEABLE].astype(bool)
        in_loop = r.patterns.sync_in_loop if r.patterns is not None else None
        if in_loop is not None and len(in_loop) == len(table):
            keep &= ~in_loop  # a per-tensor loop's .item(): foreach_loops' change removes it
        in_reads = r.patterns.sync_in_reads if r.patterns is not None else None
        if in_reads is not None and len(in_reads) == len(table):
            keep &= ~in_reads  # a per-item read loop's syncs: read_once's change removes them
        in_value_check = r.patterns.sync_in_checks if r.patterns is not None else None
        if in_value_check is not None and len(in_value_check) == len(table):
            keep &= ~in_value_check  # a value check's read: drop_checks' change removes it with the check
        in_calibration = r.patterns.sync_in_calibration if r.patterns is not None else None
        if in_calibration is not None and len(in_calibration) == len(table):
            keep &= ~in_calibration  # a calibrator's range read: calibration_off's change removes it
        in_check = r.patterns.sync_in_anomaly if r.patterns is not None else None
        if in_check is not None and len(in_check) == len(table):
            keep &= ~in_check  # autograd anomaly mode's NaN check: anomaly_mode's change removes it
        trips = r.patterns.sync_round_trip if r.patterns is not None else None
        t = table[keep]
        if len(t):
            frames.append(t.assign(rank=r.rank, round_trip=trips[keep] if trips is not None and len(trips) == len(table)
                                   else False))
    if not frames:
        return None
    syncs = pd.concat(frames, ignore_index=True)
    syncs["saving"] = np.minimum(syncs[hostside.SY_WAIT_US], syncs[hostside.SY_BUBBLE_US])
    rows, total = [], 0.0
    for (origin, api), g in syncs.groupby([hostside.SY_ORIGIN, hostside.SY_API], sort=False):
        per_step = len(g) / (scope.steps * scope.ranks)
        if per_step < SYNC_LOOP_MIN:
            continue
        saving = float(g["saving"].sum())
        total += saving
        rows.append({"origin": origin or "(none)", "what": ORIGIN_LABEL.get(origin, origin), "api": api,
                     "calls": len(g), "per_step": per_step,
                     "round_trips_per_step": float(g["round_trip"].sum()) / (scope.steps * scope.ranks),
                     "wait_us": float(g[hostside.SY_WAIT_US].sum()),
                     "bubble_us": float(g[hostside.SY_BUBBLE_US].sum()), "saving_us": saving})
    if not rows:
        return None
    rows.sort(key=lambda x: -x["saving_us"])
    saving = total / scope.ranks
    formula = ("Σ per sync call of min(CPU time waiting in the call, GPU idle from its return to the next "
               "GPU activity): without the sync the CPU runs ahead by at most its wait, and the GPU can "
               f"gain at most the bubble = {fmt_us(saving)} over {sum(x['calls'] for x in rows)} calls")
    per_step = sum(x["per_step"] for x in rows) / scope.ranks
    whats = ", ".join(dict.fromkeys(x["what"].split(" /")[0] for x in rows))[:80]
    title = (f"Remove host syncs from the loop: {per_step:.0f} sync call{'' if round(per_step) == 1 else 's'} "
             f"per step ({whats}) drain the GPU queue")
    return suggestion("avoid_sync", title, saving, scope, formula, rows)


def reads_split_step(s: Suggestion) -> bool:
    """avoid_sync's syncs include round trips (sync_reads.py: a value read back and passed straight to
    the next op as a Python number) at least READS_SPLIT_STEP times a step: a CUDA graph would freeze
    each value and torch.compile breaks at each, so the step is in pieces neither can span until the
    values stay on the device."""
    return sum(float(str(row.get("round_trips_per_step", 0.0))) for row in s.evidence) >= READS_SPLIT_STEP


def read_once(analysis: Analysis) -> Suggestion | None:
    """Finished results read back one item at a time (patterns.item_reads), in every headline step: the
    host time on the thread after the first item's read up to the last one's (the other items' copies
    and syncs, and the ops and Python between them). The what-if removes those calls and the host gaps
    before them (reading once leaves one copy; the per-item work done on the batch). Silent below
    SILENT_BELOW_PCT."""
    scope = Scope.of(analysis)
    rows: list[dict[str, object]] = []
    total = 0.0
    for r, t, n in every_step_tables(analysis, "item_reads", ir.IR_STEP):
        host = float(t[ir.IR_HOST_US].sum())
        total += host
        rows.append({"rank": r.rank, "reads_per_step": float(t[ir.IR_READS].sum()) / n,
                     "bytes_per_step": float(t[ir.IR_BYTES].sum()) / n, "loops_per_step": len(t) / n,
                     "host_us_per_step": host / n, "saving_us": host})
    if not rows:
        return None
    x = rows[0]
    reads = round(float(str(x["reads_per_step"])))
    title = (f"Read the results back once: {reads} small device-to-host copies per step, one item at a time, "
             f"each waiting for the GPU ({fmt_bytes(float(str(x['bytes_per_step'])))} in all; "
             f"{fmt_us(float(str(x['host_us_per_step'])))} of host time with the per-item work between them)")
    formula = ("the host time on the reading thread from the end of the first item's read to the end of the last "
               "(the other items' copies and syncs, and the ops and Python between them), per step")
    return suggestion("read_once", title, total / scope.ranks, scope, formula, rows, min_pct=SILENT_BELOW_PCT)


def calls_gone(field: str) -> Callable[[Suggestion, RankAnalysis, float], Transform | None]:
    """The what-if of a rule whose change removes the runtime calls Patterns.`field` marks (a bool per
    rank.runtime row): those calls gone with the host gaps before them; None where none is marked."""

    def transform(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
        calls = getattr(r.patterns, field, None) if r.patterns is not None else None
        if not isinstance(calls, np.ndarray) or not calls.any():
            return None
        return remove_calls(calls)

    return transform


read_once_transform = calls_gone("item_read_calls")  # the calls after each loop's first item


def drop_checks(analysis: Analysis) -> Suggestion | None:
    """Value checks read on the host in the loop (patterns.value_checks), in every headline step: each
    check's host span from its first test's start to its read's end (the wait included). The what-if
    removes the checks' calls with the host gaps before them. Silent below SILENT_BELOW_PCT."""
    scope = Scope.of(analysis)
    rows: list[dict[str, object]] = []
    total = 0.0
    for r, t, n in every_step_tables(analysis, "value_checks", vc.VC_STEP):
        host = float(t[vc.VC_HOST_US].sum())
        total += host
        rows.append({"rank": r.rank, "checks_per_step": float(t[vc.VC_CHECKS].sum()) / n,
                     "check": str(t[vc.VC_OPS].iat[0]), "calls_per_step": float(t[vc.VC_CALLS].sum()) / n,
                     "gpu_us_per_step": float(t[vc.VC_GPU_US].sum()) / n, "host_us_per_step": host / n,
                     "saving_us": host})
    if not rows:
        return None
    x = rows[0]
    checks = round(float(str(x["checks_per_step"])))
    title = (f"Take the value checks out of the loop: {checks} per step ({x['check']}), each reading a boolean "
             f"on the host and waiting for the GPU, {fmt_us(float(str(x['host_us_per_step'])))} of host time per step "
             "(torch.distributions: validate_args=False; asserts: python -O or torch._assert_async)")
    formula = ("Σ per check of its host span, from its first test op's start to the end of its host read (the "
               "tests, the reduction, the copy and the wait), per step")
    return suggestion("drop_checks", title, total / scope.ranks, scope, formula, rows, min_pct=SILENT_BELOW_PCT)


drop_checks_transform = calls_gone("value_check_calls")  # every check's calls


def pinned_bandwidth(device: Device | None) -> float:
    """GB/s of pinned host-to-device copies on `device` (PINNED_H2D_GBPS by device key)."""
    key = (device.key if device is not None else "").lower()
    return next((v for k, v in PINNED_H2D_GBPS.items() if k in key), PINNED_H2D_DEFAULT_GBPS)


def _copy_sync_waits(r: RankAnalysis) -> dict[int, float]:
    """CPU µs per step waiting in the syncs that pageable copies issue themselves (hostside.SY_PAGEABLE)."""
    syncs = r.patterns.syncs if r.patterns is not None else None
    if syncs is None or not len(syncs):
        return {}
    own = syncs[syncs[hostside.SY_PAGEABLE].astype(bool)]
    return {int(k): float(v) for k, v in own.groupby(hostside.SY_STEP)[hostside.SY_WAIT_US].sum().items()}


def pinned_memory(analysis: Analysis) -> Suggestion | None:
    """Pageable copies that recur in the headline steps: host-to-device, and bulk device-to-host
    (.cpu() / .to('cpu') / .numpy() of big tensors, hostside.D2H_MIN_BYTES). Pinned + non_blocking
    (preallocated pinned host buffers filled by copy_(..., non_blocking=True) on a side stream for
    device-to-host), a copy no longer blocks the CPU (its call and its own syncs: the CPU keeps
    launching) and runs at the pinned bandwidth, so per step: span − max(CPU time outside those
    calls, GPU busy time with the copies at pinned speed); at least the copies' GPU time − their bytes
    at pinned speed."""
    scope = Scope.of(analysis)
    gbps = pinned_bandwidth(analysis.device)
    rows, total, nbytes, count = [], 0.0, 0.0, 0
    directions: dict[str, int] = {}
    for r, table in rank_tables(analysis, "copies"):
        t = table[in_headline(r, table[hostside.CP_STEP].to_numpy())]
        steady = len(r.launch.steady_steps)
        if not len(t) or t[hostside.CP_STEP].nunique() < PINNED_STEP_SHARE * steady:
            continue  # a one-off upload, not a per-step copy
        totals = {p.step: tot for p, tot in zip(r.launch.phases, r.launch.step_totals, strict=True)}
        sync_waits = _copy_sync_waits(r)
        for step, g in t.groupby(hostside.CP_STEP, sort=True):
            b = float(g[hostside.CP_BYTES].clip(lower=0).sum())
            copy_us = float(g[hostside.CP_COPY_US].sum())
            pinned_us = b / gbps / 1e3
            blocked = float(g[hostside.CP_CALL_US].fillna(0.0).sum()) + sync_waits.get(int(step), 0.0)
            tot = totals.get(step)
            saving = max(copy_us - pinned_us, 0.0)
            cpu_us = gpu_us = None
            if tot is not None and tot.span_us > 0:
                cpu_us = max(tot.span_us - blocked, 0.0)
                gpu_us = max(tot.gpu_busy_us - copy_us + pinned_us, 0.0)
                saving = max(tot.span_us - max(cpu_us, gpu_us), saving)
            total += saving
            nbytes += b
            count += len(g)
            for d, n in g[hostside.CP_DIRECTION].value_counts().items():
                directions[str(d)] = directions.get(str(d), 0) + int(n)
            rows.append({"rank": r.rank, "step": int(step), "copies": len(g),
                         "direction": "+".join(sorted(set(g[hostside.CP_DIRECTION].astype(str)))), "bytes": b,
                         "copy_us": copy_us, "pinned_copy_us": pinned_us, "blocked_us": blocked,
                         "cpu_after_us": cpu_us, "gpu_after_us": gpu_us,
                         "gbps": b / copy_us / 1e3 if copy_us > 0 else None, "saving_us": saving})
    if not rows:
        return None
    saving = total / scope.ranks
    formula = ("Σ per step of span − max(CPU time outside the copy calls and their own syncs, GPU busy time "
               f"with the copies at pinned speed, {gbps:.0f} GB/s), at least the copies' GPU time − their "
               f"bytes at pinned speed = {fmt_us(saving)}; pinned + non_blocking copies run at full link "
               "speed and let the CPU keep launching")
    if not directions.get(hostside.DIR_D2H, 0):  # host-to-device only: no direction column
        rows = [{k: v for k, v in row.items() if k != "direction"} for row in rows]
    if directions.get(hostside.DIR_H2D, 0) >= directions.get(hostside.DIR_D2H, 0):
        title = (f"Pin host memory and copy with non_blocking=True: {count} pageable host-to-device copies "
                 f"({fmt_bytes(nbytes / scope.ranks)}) block the CPU and crawl at pageable speed")
        return suggestion("pinned_memory", title, saving, scope, formula, rows)
    title = (f"Copy to the host into preallocated pinned buffers (copy_(..., non_blocking=True) on a side "
             f"stream), or keep the copy on the GPU: {count} blocking .cpu() copies "
             f"({fmt_bytes(nbytes / scope.ranks)}) into fresh pageable memory stall every step")
    found = suggestion("pinned_memory", title, saving, scope, formula, rows)
    return None if found is None else dataclasses.replace(found, snippet=PINNED_D2H)


def dataloader_workers(analysis: Analysis) -> Suggestion | None:
    """DataLoader time on the main thread: the GPU idle time inside the loading windows."""
    scope = Scope.of(analysis)
    rows, total, load, single = [], 0.0, 0.0, False
    for r, table in rank_tables(analysis, "dataloader"):
        t = table[in_headline(r, table[hostside.DL_STEP].to_numpy())]
        spans = dict(zip(r.launch.steps["step"].tolist(), r.launch.steps["span_us"].tolist(), strict=True))
        for row in t.to_dict("records"):
            total += row[hostside.DL_GPU_IDLE_US]
            load += row[hostside.DL_US]
            single |= bool(row[hostside.DL_SINGLE])
            span = spans.get(row[hostside.DL_STEP])
            rows.append({"rank": r.rank, "step": row[hostside.DL_STEP], "dataloader_us": row[hostside.DL_US],
                         "gpu_idle_us": row[hostside.DL_GPU_IDLE_US], "span_us": span,
                         "loading_pct": 100 * row[hostside.DL_US] / span if span else None,
                         "saving_us": row[hostside.DL_GPU_IDLE_US]})
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
        t = table[in_headline(r, table[hostside.CM_STEP].to_numpy())]
        for row in t.to_dict("records"):
            hideable = max(row[hostside.CM_EXPOSED_US] - row[hostside.CM_LAST_EXPOSED_US], 0.0)
            room = max(row[hostside.CM_COMPUTE_US] - row[hostside.CM_OVERLAP_US], 0.0)
            saving = min(hideable, room)
            total += saving
            exposed += row[hostside.CM_EXPOSED_US]
            rows.append({"rank": r.rank, "step": row[hostside.CM_STEP], "collectives": row[hostside.CM_COLLECTIVES],
                         "comm_us": row[hostside.CM_COMM_US], "exposed_us": row[hostside.CM_EXPOSED_US],
                         "compute_us": row[hostside.CM_COMPUTE_US], "overlap_us": row[hostside.CM_OVERLAP_US],
                         "saving_us": saving, "top_kernel": row[hostside.CM_TOP]})
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


def reduce_on_gpu(analysis: Analysis) -> Suggestion | None:
    """Large device-to-host copies reduced on the host (patterns.host_reductions), in every headline step:
    the copy and the host op gone, the op run on the GPU (its tensor read once at the memory bandwidth) and
    its small result copied. A traced estimate, no what-if: the host op often ends its step, after the step's
    last runtime call, where the execution model has no gap to shorten. Silent below SILENT_BELOW_PCT."""
    scope = Scope.of(analysis)
    bw = analysis.device.memory_bandwidth if analysis.device is not None else 0.0
    rows: list[dict[str, object]] = []
    total = 0.0
    head: tuple[str, str, float, float, float] | None = None  # op, shape, bytes, copy µs, host µs per step
    for r, t, n in every_step_tables(analysis, "host_reductions", hr.HR_STEP):
        on_gpu = float(t[hr.HR_BYTES].sum()) / bw * 1e6 if bw else 0.0
        copy, host = float(t[hr.HR_COPY_US].sum()), float(t[hr.HR_HOST_US].sum())
        saving = max(copy + host - on_gpu, 0.0)
        total += saving
        op, shape = str(t[hr.HR_OP].iat[0]), str(t[hr.HR_SHAPE].iat[0])
        rows.append({"rank": r.rank, "op": op, "shape": shape, "copies_per_step": len(t) / n,
                     "bytes_per_step": float(t[hr.HR_BYTES].sum()) / n, "copy_us_per_step": copy / n,
                     "host_us_per_step": host / n, "on_gpu_us_per_step": on_gpu / n, "saving_us_per_step": saving / n})
        head = head or (op, shape, float(t[hr.HR_BYTES].sum()) / n, copy / n, host / n)
    if head is None:
        return None
    op, shape, nbytes, copy, host = head
    saving = total / scope.ranks
    title = (f"Run {op.removeprefix('aten::')} on the GPU and copy only its result: each step copies a {shape} tensor "
             f"({nbytes / 1e6:,.0f} MB, {fmt_us(copy)}) to the host and reduces it there ({fmt_us(host)})")
    formula = (f"the copies' time + the host ops' time − the op on the GPU (its tensor read once at the memory "
               f"bandwidth) = {fmt_us(saving)} ({fmt_us(saving / scope.steps)} per step); the result's own copy is "
               "not counted")
    return suggestion("reduce_on_gpu", title, saving, scope, formula, rows, min_pct=SILENT_BELOW_PCT)

