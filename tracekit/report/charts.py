"""Chart data for the report, from analyzer results: the zoomable GPU timeline and the roofline points."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analyzers.devices import Device
from tracekit.analyzers.timeline import Timeline
from tracekit.analyzers.timeline_detail import TimelineDetail
from tracekit.report.names import short_name
from tracekit.report.palette import class_color
from tracekit.report.tables import by_time, fmt_shapes
from tracekit.units import DASH, fmt_gbps, fmt_tflops, fmt_time

MAX_ROOFLINE_POINTS = 1500  # the longest kernel rows; the note says how many were left off
PHASE_TEXT = {"steady": "", "setup": "one-time work", "warmup": "warm-up", "partial": "partial", "outlier": "outlier"}


def timeline(tl: Timeline) -> dict[str, Any]:
    """The timeline as JSON-ready data: per-row busy share (per mille, ints: a smaller page) and top-name
    index per fine bin, step marks."""
    return {
        "span_us": round(tl.span_us, 3),
        "bin_us": tl.bin_us,
        "bins": len(tl.rows[0].busy) if tl.rows else 0,
        "rows": [
            {"label": r.label, "kind": r.kind, "busy": [round(1000 * b) for b in r.busy], "top": list(r.top),
             "busy_text": fmt_time(r.busy_us)}
            for r in tl.rows
        ],
        "names": [short_name(n) for n in tl.names],
        "classes": list(tl.classes),
        "steps": [
            {"label": f"step {m.step}", "start": round(m.start_us, 3), "end": round(m.end_us, 3),
             "phase": m.phase, "phase_text": PHASE_TEXT.get(m.phase, m.phase)}
            for m in tl.steps
        ],
        "detail": detail_data(tl.detail) if tl.detail is not None else None,
    }


DETAIL_UNIT_US = 0.01  # the detail's integers count 10 ns


def _ns_deltas(us: np.ndarray) -> list[int]:
    """Start times (µs, sorted) as integer steps of DETAIL_UNIT_US from the previous one (the first from 0)."""
    ns = np.round(np.asarray(us, dtype=float) / DETAIL_UNIT_US).astype(np.int64)
    return np.diff(ns, prepend=0).tolist()


def _ns(us: np.ndarray) -> list[int]:
    return np.round(np.asarray(us, dtype=float) / DETAIL_UNIT_US).astype(np.int64).tolist()


def _packed(values: list[int]) -> list[int] | int:
    """A list whose values are all equal as that one value (the page reads either)."""
    return values[0] if len(values) > 1 and values.count(values[0]) == len(values) else values


def detail_data(d: TimelineDetail) -> dict[str, Any]:
    """The per-activity arrays the timeline draws below a few ms: starts as deltas, durations and launch
    delays (-1: no launch), all in DETAIL_UNIT_US; indexes into names/shapes (-1: none)."""
    order = np.argsort(d.launch_ts, kind="stable")
    ops = np.argsort(d.op_ts, kind="stable")
    delay = np.where(np.isnan(d.gpu_delay), -1, np.round(d.gpu_delay / DETAIL_UNIT_US)).astype(np.int64).tolist()
    kernels = set(d.gpu_name.tolist())
    return {
        "steps": list(d.steps), "start": round(d.start_us, 3), "end": round(d.end_us, 3), "unit_us": DETAIL_UNIT_US,
        "names": [short_name(n) if i in kernels else n for i, n in enumerate(d.names)], "shapes": list(d.shapes),
        "gpu": {"t": _ns_deltas(d.gpu_ts), "d": _packed(_ns(d.gpu_dur)), "r": _packed(d.gpu_row.tolist()),
                "n": _packed(d.gpu_name.tolist()), "o": _packed(d.gpu_op.tolist()), "s": _packed(d.gpu_shape.tolist()),
                "q": _packed(delay)},
        "launch": {"t": _ns_deltas(d.launch_ts[order]), "d": _packed(_ns(d.launch_dur[order])),
                   "n": _packed(d.launch_name[order].tolist())},
        "ops": {"t": _ns_deltas(d.op_ts[ops]), "d": _packed(_ns(d.op_dur[ops])), "n": _packed(d.op_name[ops].tolist())},
    }


ALWAYS_ROOFS = ("bf16", "fp16", "tf32", "fp32")  # other precisions only when a kernel row uses them


def roof_lines(roofs: Mapping[str, float], used: set[str]) -> list[dict[str, Any]]:
    """Ceilings to draw, highest first; precisions with the same peak share one line ('bf16/fp16')."""
    merged: dict[float, list[str]] = {}
    for dtype, value in roofs.items():
        if dtype in ALWAYS_ROOFS or dtype in used:
            merged.setdefault(round(value, 6), []).append(dtype)
    return [
        {"dtype": "/".join(names), "tflops": value, "text": fmt_tflops(value)}
        for value, names in sorted(merged.items(), key=lambda kv: -kv[0])
    ]


def _label(k: Any, t: float, y: float) -> str:
    parts = (str(k.op or ""), fmt_shapes(k.shapes), str(k.dtype or ""), f"{k.roof} roof" if getattr(k, "roof", None) else "",
             fmt_time(t), fmt_tflops(y), fmt_gbps(k.achieved_gbps))
    return " · ".join(p for p in parts if p and p != DASH and p != "None" and p != "nan")


def roofline(device: Device | None, kernels: pd.DataFrame) -> dict[str, Any] | None:
    """Roofs and one point per kernel row with both intensity and achieved TFLOP/s; None when no row has them."""
    ordered = by_time(kernels)  # the kernel table's order: a point's "row" is its row there
    known = ordered[(ordered["intensity"] > 0) & (ordered["achieved_tflops"] > 0)]
    if not len(known):
        return None
    total = len(known)
    points = []
    for row, k in zip(known.index[:MAX_ROOFLINE_POINTS], known.head(MAX_ROOFLINE_POINTS).itertuples(index=False),
                      strict=True):
        cls = str(k._1 or "other")
        points.append({
            "row": int(row),
            "name": short_name(str(k.name)),
            "cls": cls,
            "color": class_color(cls),
            "x": float(f"{float(k.intensity):.4g}"),
            "y": float(f"{float(k.achieved_tflops):.4g}"),
            "t": float(f"{float(k.time_us):.4g}"),
            "label": _label(k, float(k.time_us), float(k.achieved_tflops)),
        })
    used = {str(v) for col in ("roof", "dtype") if col in kernels for v in kernels[col].dropna()}
    roofs = roof_lines(device.peak_tflops, used) if device is not None else []
    bandwidth = device.memory_gbps if device is not None else None
    return {
        "roofs": roofs,
        "bandwidth_gbps": bandwidth,
        "bandwidth_text": fmt_gbps(bandwidth),
        "points": points,
        "total_points": total,
        "capped": total > MAX_ROOFLINE_POINTS,
    }
