"""The trace section of a rank (metadata and extra numbers), its warnings, and CPU ops of CPU-only traces."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from tracekit.report import charts
from tracekit.report.format import DASH, fmt_bytes, fmt_gbps, fmt_tflops
from tracekit.report.suggest_view import fmt_value
from tracekit.report.tables import Bar, bars
from tracekit.trace import tables as T

SHAPES_WARNING = "No input shapes in this trace: record with record_shapes=True to get FLOPs, bytes and the roofline."
# extra summary numbers listed under "Trace" when present (the headline shows the main ones)
EXTRA_SUMMARY = {
    "kernels_per_token": "Kernels per token",
    "tokens_per_step": "Tokens per step",
    "kernels_per_step": "Kernels per step",
    "gpu_ops": "GPU activities",
    "short_kernels": "Kernels shorter than their launch",
    "syncs": "Host syncs",
    "sync_us": "Time in host syncs",
    "queue_p50_us": "Queue delay p50",
    "queue_p90_us": "Queue delay p90",
    "queue_max_us": "Queue delay max",
    "other_share": "GPU time classified 'other'",
}



def meta_rows(a: Mapping[str, Any], rank: Any, has_gpu: bool = True) -> tuple[tuple[str, str], ...]:
    rows: list[tuple[str, str]] = []
    meta = getattr(rank, "meta", None)
    if rank is not None:
        rows.append(("File", str(getattr(rank, "path", ""))))
        rows.append(("Rank", str(getattr(rank, "rank", ""))))
    if meta is not None:
        rows.append(("Platform", str(getattr(meta, "platform", "") or DASH)))
        rows.append(("Trace schema", f"{getattr(meta, 'schema', '')} (version {getattr(meta, 'schema_version', DASH)})"))
        gpus: dict[str, int] = {}
        for prop in getattr(meta, "device_properties", None) or []:
            if isinstance(prop, Mapping) and prop.get("name"):
                mem = fmt_bytes(prop.get("totalGlobalMem"))
                cc = f"{prop.get('computeMajor', '?')}{prop.get('computeMinor', '?')}"
                text = f"{prop['name']} · {prop.get('numSms', DASH)} SMs · {mem} · sm_{cc}"
                gpus[text] = gpus.get(text, 0) + 1
        for text, n in gpus.items():
            rows.append(("GPUs in the machine" if n > 1 else "GPU", f"{n} × {text}" if n > 1 else text))
        for key, value in (getattr(meta, "versions", None) or {}).items():
            rows.append((str(key), str(value)))
        dist = getattr(meta, "distributed", None)
        if dist:  # scalars only: process-group configs can list thousands of ranks
            text = ", ".join(f"{k}={v}" for k, v in dist.items() if not isinstance(v, (Mapping, list, tuple)))
            rows.append(("Distributed", text or DASH))
    device = a.get("device") or {}
    roofs, bandwidth = charts.peaks(device)
    if roofs or bandwidth:
        text = [f"{d} {fmt_tflops(v)}" for d, v in sorted(roofs.items(), key=lambda kv: -kv[1])]
        if bandwidth:
            text.append(f"memory {fmt_gbps(bandwidth)}")
        rows.append(("Device peaks", " · ".join(text)))
    if device.get("source"):
        rows.append(("Peaks source", str(device["source"])))
    summary = a.get("summary") or {}
    for key, label in EXTRA_SUMMARY.items() if has_gpu else ():
        value = summary.get(key)
        if value is not None and not isinstance(value, (Mapping, list)):
            rows.append((label, fmt_value(key, value)))
    counts = getattr(rank, "counts", None)
    if counts:
        rows.append(("Events", ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])[:10])))
    skipped = getattr(rank, "skipped", 0)
    if skipped:
        rows.append(("Malformed events skipped", f"{skipped:,}"))
    return tuple(rows)


def _has_shapes(rank: Any) -> bool | None:
    """Whether any CPU op in the trace recorded input shapes; None when the trace is not at hand."""
    ops = getattr(rank, "ops", None)
    if not isinstance(ops, pd.DataFrame) or T.OP_INPUT_DIMS not in ops:
        return None
    if ops[T.OP_INPUT_DIMS].notna().any():  # decoded up front for ops that issued GPU work
        return True
    store = getattr(rank, "op_input_store", None)
    return store is not None and store.has_values(T.OP_INPUT_DIMS)


def warnings(a: Mapping[str, Any], rank: Any, shown: Sequence[str]) -> tuple[str, ...]:
    out = [str(w) for w in (a.get("warnings") or ()) if str(w) not in shown]
    kernels = [k for k in (a.get("kernels") or ()) if k.get("class") not in ("memcpy", "memset", "communication")]
    if kernels and all(k.get("flops") is None for k in kernels):
        has = _has_shapes(rank)
        if has is False or (has is None and all(not k.get("shapes") for k in kernels)):
            out.append(SHAPES_WARNING)
    return tuple(dict.fromkeys(out))


def cpu_ops(rank: Any) -> tuple[Bar, ...]:
    """Top-level CPU ops by total time: the useful view of a trace with no GPU activity."""
    ops = getattr(rank, "ops", None)
    if not isinstance(ops, pd.DataFrame) or not len(ops):
        return ()
    top = ops[ops["depth"] == 0] if "depth" in ops else ops
    g = top.groupby("name")["dur"].agg(["sum", "count"])
    items = {str(n): (float(r["sum"]), int(r["count"])) for n, r in g.iterrows()}
    return tuple(bars(items, colors=False))
