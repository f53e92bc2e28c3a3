"""Chart data for the report: the binned GPU timeline strip and the roofline points, as JSON-ready dicts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from tracekit.report.format import fmt_gbps, fmt_tflops, fmt_time, num
from tracekit.report.palette import class_color
from tracekit.report.tables import short_name
from tracekit.trace import tables as T

TIMELINE_BINS = 480  # columns of the strip, whatever the trace length
MAX_STREAM_ROWS = 12  # busiest streams get their own row; the rest are merged
MAX_ROOFLINE_POINTS = 1500  # the longest kernel rows; the note says how many were left off


def _merged(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals, as sorted disjoint (starts, ends)."""
    if len(starts) == 0:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    run_end = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    last = np.append(idx[1:] - 1, len(s) - 1)
    return s[idx], run_end[last]


def busy_fractions(starts: np.ndarray, ends: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Fraction of each bin [edges[i], edges[i+1]) covered by the union of the intervals."""
    s, e = _merged(np.asarray(starts, float), np.asarray(ends, float))
    if len(s) == 0:
        return np.zeros(len(edges) - 1)
    lengths = e - s
    cum = np.concatenate(([0.0], np.cumsum(lengths)))
    k = np.searchsorted(s, edges, side="right") - 1  # interval starting at or before each edge
    inside = np.where(k >= 0, np.clip(edges - s[np.maximum(k, 0)], 0, lengths[np.maximum(k, 0)]), 0)
    covered = np.where(k >= 0, cum[np.maximum(k, 0)] + inside, 0.0)  # busy time in [-inf, edge)
    width = np.diff(edges)
    return np.clip(np.diff(covered) / np.where(width > 0, width, 1), 0, 1)


def _row(label: str, kind: str, frac: np.ndarray, busy_us: float) -> dict[str, Any]:
    return {
        "label": label,
        "kind": kind,
        "busy": [round(float(x), 2) for x in frac],
        "busy_text": fmt_time(busy_us),
    }


def timeline(rank: Any) -> dict[str, Any] | None:
    """Busy fraction per bin for each GPU stream, the CPU launch thread(s) and the steps; None if empty."""
    gpu = getattr(rank, "gpu", None)
    runtime = getattr(rank, "runtime", None)
    steps = getattr(rank, "steps", None)
    if not isinstance(gpu, pd.DataFrame) or not len(gpu):
        return None
    launches = None
    if isinstance(runtime, pd.DataFrame) and len(runtime) and T.RT_KIND in runtime:
        launches = runtime[runtime[T.RT_KIND].isin(T.LAUNCH_KINDS)]
    frames = [f for f in (gpu, launches) if f is not None and len(f)]
    t0 = min(float(f[T.GPU_TS].min()) for f in frames)
    t1 = max(float(f[T.GPU_END].max()) for f in frames)
    if isinstance(steps, pd.DataFrame) and len(steps):
        t0, t1 = min(t0, float(steps[T.STEP_TS].min())), max(t1, float(steps[T.STEP_END].max()))
    if t1 <= t0:
        t1 = t0 + 1.0
    edges = np.linspace(t0, t1, TIMELINE_BINS + 1)
    rows: list[dict[str, Any]] = []
    all_gpu = _merged(gpu[T.GPU_TS].to_numpy(float), gpu[T.GPU_END].to_numpy(float))
    rows.append(
        _row("GPU (all streams)", "gpu", busy_fractions(*all_gpu, edges), float((all_gpu[1] - all_gpu[0]).sum()))
    )
    busy = (gpu[T.GPU_END] - gpu[T.GPU_TS]).groupby(gpu[T.GPU_STREAM]).sum()
    ordered = busy.sort_values(ascending=False).index.tolist()
    shown, rest = ordered[:MAX_STREAM_ROWS], ordered[MAX_STREAM_ROWS:]
    if len(ordered) > 1:
        for stream in shown:
            g = gpu[gpu[T.GPU_STREAM] == stream]
            s, e = _merged(g[T.GPU_TS].to_numpy(float), g[T.GPU_END].to_numpy(float))
            rows.append(_row(f"stream {stream}", "stream", busy_fractions(s, e, edges), float((e - s).sum())))
        if rest:
            g = gpu[gpu[T.GPU_STREAM].isin(rest)]
            s, e = _merged(g[T.GPU_TS].to_numpy(float), g[T.GPU_END].to_numpy(float))
            label = f"{len(rest)} other streams"
            rows.append(_row(label, "stream", busy_fractions(s, e, edges), float((e - s).sum())))
    if launches is not None and len(launches):
        s, e = _merged(launches[T.RT_TS].to_numpy(float), launches[T.RT_END].to_numpy(float))
        rows.append(_row("CPU launch calls", "cpu", busy_fractions(s, e, edges), float((e - s).sum())))
    marks = []
    if isinstance(steps, pd.DataFrame) and len(steps) <= 200:
        for r in steps.itertuples(index=False):
            marks.append({"label": f"step {r.step}", "start": float(r.ts) - t0, "end": float(r.end) - t0})
    return {
        "span_us": t1 - t0,
        "span_text": fmt_time(t1 - t0),
        "bin_us": (t1 - t0) / TIMELINE_BINS,
        "bin_text": fmt_time((t1 - t0) / TIMELINE_BINS),
        "rows": rows,
        "steps": marks,
    }


def _tflops(value: object) -> float | None:
    v = num(value)
    if v is None or v <= 0:
        return None
    return v / 1e12 if v > 1e6 else v  # FLOP/s or TFLOP/s


def _gbps(value: object) -> float | None:
    v = num(value)
    if v is None or v <= 0:
        return None
    return v / 1e9 if v > 1e6 else v  # B/s or GB/s


def peaks(device: Mapping[str, Any]) -> tuple[dict[str, float], float | None]:
    """Compute roofs in TFLOP/s by dtype and the memory bandwidth in GB/s, from the device entry.

    Accepts `peak_tflops` ({dtype: TFLOP/s}) with `memory_gbps`, or a flat `peaks` dict of FLOP/s
    (or TFLOP/s) per dtype plus a bandwidth key.
    """
    roofs: dict[str, float] = {}
    bandwidth = None
    for key, value in (device.get("peaks") or {}).items():
        k = str(key).lower()
        if any(tag in k for tag in ("bandwidth", "gbps", "hbm", "mem", "bytes")):
            bandwidth = _gbps(value) or bandwidth
            continue
        v = _tflops(value)
        if v is not None:
            roofs[k.replace("_tflops", "").replace("_flops", "")] = v
    for key, value in (device.get("peak_tflops") or {}).items():
        v = num(value)
        if v is not None and v > 0:
            roofs[str(key)] = v
    for key in ("memory_gbps", "bandwidth_gbps", "hbm_gbps"):
        if bandwidth is None and num(device.get(key)) is not None:
            bandwidth = _gbps(device[key])
    return roofs, bandwidth


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


def roofline(device: Mapping[str, Any], kernels: Sequence[Mapping[str, Any]], shapes_text) -> dict[str, Any]:
    """Roofs and one point per kernel row that has both intensity and achieved TFLOP/s."""
    roofs, bandwidth = peaks(device)
    pts = []
    for k in kernels:
        x, y, t = num(k.get("intensity")), num(k.get("achieved_tflops")), num(k.get("time_us"))
        if x is None or y is None or x <= 0 or y <= 0:
            continue
        pts.append((t or 0.0, k, x, y))
    pts.sort(key=lambda p: -p[0])
    total = len(pts)
    points = []
    for t, k, x, y in pts[:MAX_ROOFLINE_POINTS]:
        points.append(
            {
                "name": short_name(str(k.get("name", ""))),
                "cls": str(k.get("class") or "other"),
                "color": class_color(k.get("class")),
                "x": float(f"{x:.4g}"),
                "y": float(f"{y:.4g}"),
                "t": float(f"{t:.4g}"),
                "label": " · ".join(
                    p
                    for p in (
                        str(k.get("op") or ""),
                        shapes_text(k.get("shapes")),
                        str(k.get("dtype") or ""),
                        f"{k['roof']} roof" if k.get("roof") else "",
                        fmt_time(t),
                        fmt_tflops(y),
                        fmt_gbps(k.get("achieved_gbps")),
                    )
                    if p and p != "–"
                ),
            }
        )
    used = {str(k.get(key)) for k in kernels for key in ("roof", "dtype") if k.get(key)}
    return {
        "roofs": roof_lines(roofs, used),
        "bandwidth_gbps": bandwidth,
        "bandwidth_text": fmt_gbps(bandwidth),
        "points": points,
        "total_points": total,
        "capped": total > MAX_ROOFLINE_POINTS,
    }
