"""The timeline's critical-path band: each steady step's critical path (tracekit.model.critical) as JSON-ready data, capped."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tracekit.model.critical import PathSegment, critical_segments, path_parts
from tracekit.model.outlook import RankModel
from tracekit.model.path import PATH_KINDS
from tracekit.report.palette import PATH_COLORS
from tracekit.units import fmt_int, fmt_pct, fmt_time, plural

# At most this many segments per rank go into the page (each ~10 bytes of JSON): whole steps, the
# slowest steady step (the report's Perfetto hand-off) and its neighbours while they fit; the slowest
# cut short when it alone is larger.
MAX_PATH_SEGMENTS = 4000
PATH_LABELS = {"cpu": "CPU work", "launch": "launch calls and latency", "sync": "host syncs", "gpu": "GPU work"}


def _step_entry(step: int, segments: Sequence[PathSegment], t0_us: float) -> dict[str, Any]:
    """One step's path: its boundaries (µs after the timeline start; segment i is [t[i], t[i + 1]])
    and one kind digit per segment (an index into PATH_KINDS)."""
    bounds = [segments[0].start_us, *(s.end_us for s in segments)] if segments else []
    return {"step": step, "t": [round(b - t0_us, 3) for b in bounds],
            "k": "".join(str(PATH_KINDS.index(s.kind)) for s in segments)}


def _around_slowest(counts: Sequence[int], spans: Sequence[float], budget: int) -> list[int]:
    """Positions of a run of consecutive steps holding at most `budget` segments: the slowest step,
    then its neighbours, later one first, while they fit ([] when the slowest alone does not)."""
    k = max(range(len(spans)), key=lambda i: spans[i])
    if counts[k] > budget:
        return []
    lo = hi = k
    used = counts[k]
    while True:
        grown = False
        for i in (hi + 1, lo - 1):
            if 0 <= i < len(counts) and used + counts[i] <= budget:
                used += counts[i]
                lo, hi = min(lo, i), max(hi, i)
                grown = True
        if not grown:
            return list(range(lo, hi + 1))


def critical_band(model: RankModel | None, t0_us: float, max_segments: int = MAX_PATH_SEGMENTS) -> dict[str, Any] | None:
    """The band over the timeline (times relative to `t0_us`, the timeline's start): per steady
    step its critical path as replayed from the recorded durations (aligned with the trace), the
    kinds' colours and shares over all modelled steps, and a note when the cap left steps out or
    the model abstains. None without a model."""
    if model is None:
        return None
    if not model.steps:
        why = model.unprofiled.abstained[0][1] if model.unprofiled.abstained else model.fidelity.reason
        return {"steps": [], "legend": [], "segments": 0, "total": 0,
                "note": f"No critical path: the execution model abstains on this rank ({why})."}
    paths = [(s.graph.step, critical_segments(s.graph)) for s in model.steps]
    total = sum(len(p) for _, p in paths)
    parts = path_parts(seg for _, p in paths for seg in p)
    span = sum(parts.values())
    chosen = _around_slowest([len(p) for _, p in paths], [s.graph.traced_span_us for s in model.steps], max_segments)
    note = ""
    if not chosen:  # the slowest step alone is over the cap: its first max_segments segments
        k = max(range(len(paths)), key=lambda i: model.steps[i].graph.traced_span_us)
        step, segments = paths[k]
        steps = [_step_entry(step, segments[:max_segments], t0_us)]
        used = max_segments
        note = (f"Critical path drawn for the first {fmt_time(segments[max_segments - 1].end_us - segments[0].start_us)}"
                f" of step {step} (the slowest steady step) only: {fmt_int(max_segments)} of its "
                f"{fmt_int(len(segments))} segments (at most {fmt_int(max_segments)} per rank in the page; the "
                "shares cover every steady step).")
    else:
        steps = [_step_entry(*paths[i], t0_us) for i in chosen]
        used = sum(len(paths[i][1]) for i in chosen)
        if len(chosen) < len(paths):
            note = (f"Critical path drawn for {plural(len(chosen), 'steady step')} of {len(paths)}, around the "
                    f"slowest (at most {fmt_int(max_segments)} segments per rank in the page, {fmt_int(total)} in "
                    "all; the shares cover every steady step).")
    legend = [{"kind": k, "label": PATH_LABELS[k], "color": PATH_COLORS[k],
               "share": fmt_pct(parts[k] / span) if span > 0 else fmt_pct(0.0),
               "per_step": fmt_time(parts[k] / len(paths))} for k in PATH_KINDS]
    return {
        "kinds": list(PATH_KINDS),
        "labels": [PATH_LABELS[k] for k in PATH_KINDS],
        "colors": [PATH_COLORS[k] for k in PATH_KINDS],
        "steps": steps,
        "legend": legend,
        "segments": used,
        "total": total,
        "note": note,
    }
