"""The headline of a rank: the verdict sentence and rule, and the key-number tiles."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tracekit.report import charts
from tracekit.report.format import DASH, fmt_gbps, fmt_int, fmt_pct, fmt_tflops, fmt_time, num
from tracekit.report.tables import Bar, idle_parts, pick
from tracekit.trace import tables as T


@dataclass(frozen=True)
class Tile:
    label: str
    value: str
    sub: str = ""
    text: bool = False  # a name rather than a number: smaller, may wrap


def verdict_rule(verdict: str) -> str:
    """How the verdict is chosen (tracekit.analyzers.totals), in one plain sentence."""
    from tracekit.analyzers import totals as V

    if verdict == V.CPU_ONLY:
        return "How this is decided: the trace holds no kernel, copy or memset, so only CPU work was recorded."
    return (
        "How this is decided, over the steady steps: GPU-bound when the GPU computes (or waits only "
        f"on itself) at least {V.GPU_BOUND_SHARE:.0%} of the step; otherwise the largest reason it "
        f"waits names the verdict if it holds at least {V.DOMINANT_SHARE:.0%} of the rest — kernel "
        "launches (launch-bound), the DataLoader, host syncs, pageable copies or other CPU work "
        "(host-bound), collectives with no compute beside them (communication-bound) — and the "
        "verdict is mixed when no reason dominates."
    )


def verdict_label(verdict: str, cause: str | None, base: str) -> str:
    """'Host-bound · data loading', 'Mixed · CPU work + host syncs', 'GPU-bound'."""
    from tracekit.report.palette import CAUSE_LABELS

    if not cause:
        return base
    words = " + ".join(CAUSE_LABELS.get(c, c.replace("_", " ")) for c in cause.split("+"))
    return base if verdict == "launch-bound" or verdict == "communication-bound" else f"{base} · {words}"


def sentence(verdict: str, s: Mapping[str, Any], classes: Sequence[Bar]) -> str:
    """The analysis's evidence sentence, plus the largest kernel class when the kernels set the pace."""
    evidence = str(s.get("evidence") or "")
    top = f" The largest class is {classes[0].label} ({classes[0].pct} of kernel time)." if classes else ""
    if verdict == "cpu-only":
        return "No GPU activity in this trace: only CPU work was recorded."
    return evidence + (top if verdict == "gpu-bound" else "")


def steps_summary(a: Mapping[str, Any]) -> tuple[str, tuple[str, ...]]:
    """Which steps the headline covers, and one line per step left out (with what it holds)."""
    ranks = a.get("ranks") or []
    scopes = {r.get("scope") for r in ranks}
    steady = len(a.get("steady_steps") or [])
    total = (a.get("summary") or {}).get("steps_total") or 0
    if scopes == {"trace"}:
        return ("No step marks: the numbers cover the first GPU launch to the end of the last GPU "
                "activity (the CPU work before and after is left out)."), ()
    mode = (a.get("summary") or {}).get("steps_mode") or "steady"
    how = " (steps inferred from the repeating op sequence)" if "inferred" in scopes else ""
    if mode == "steady":
        head = f"Numbers per step over the {steady} steady steps of {total}{how}."
    elif mode == "all":
        head = f"Numbers per step over all {total} steps{how}."
    else:
        head = f"Numbers per step over steps {mode} ({steady} of {total}){how}."
    multi = len(ranks) > 1
    lines = tuple(
        (f"rank {x['rank']} " if multi else "") + f"step {x['step']} ({x['phase']}, {fmt_time(x['span_us'])}): {x['reason']}"
        for x in (a.get("excluded_steps") or [])[:12]
    )
    return head, lines


HEADLINE_DTYPES = ("bf16", "fp16", "tf32", "fp32")  # the roof quoted in the device tile, first found


def _device_tile(device: Mapping[str, Any], meta: Any, has_gpu: bool) -> Tile:
    name = device.get("name") or getattr(meta, "device_name", None)
    if name is None:
        sub = "no deviceProperties in the trace" if has_gpu else ""
        return Tile("Device", "unknown GPU" if has_gpu else "no GPU", sub, text=True)
    roofs, bandwidth = charts.peaks(device)
    parts = []
    dtype = next((d for d in HEADLINE_DTYPES if d in roofs), next(iter(roofs), None))
    if dtype is not None:
        parts.append(f"{fmt_tflops(roofs[dtype])} {dtype}")
    if bandwidth:
        parts.append(fmt_gbps(bandwidth))
    if not parts and device.get("name") is None and getattr(meta, "device_name", None):
        parts.append("not in the device table")
    return Tile("Device", str(name), " · ".join(parts), text=True)


def _idle_tile(a: Mapping[str, Any]) -> Tile:
    s = a.get("summary") or {}
    span, busy = num(s.get("span_us")), num(s.get("gpu_busy_us"))
    idle = num(s.get("gpu_idle_us"))
    if idle is None and span is not None and busy is not None:
        idle = max(0.0, span - busy)
    host = next((p for p in idle_parts(s) if p[0] == "host wait"), None)
    if host is not None:
        sub = f"{fmt_pct(host[1] / 100)} of gaps wait for the host"
    else:
        sub = f"{fmt_pct(idle / span)} of span" if idle is not None and span else ""
    return Tile("GPU idle", fmt_time(idle), sub)


def tiles(a: Mapping[str, Any], rank: Any, has_gpu: bool) -> tuple[Tile, ...]:
    s = a.get("summary") or {}
    span, busy = num(s.get("span_us")), num(s.get("gpu_busy_us"))
    steps = a.get("steps") or []
    n_steps = sum(1 for st in steps if isinstance(pick(st, "step"), int) and pick(st, "step") >= 0)
    kernels = num(s.get("kernels"))
    launches, launch_us = num(s.get("launches")), num(s.get("cpu_launch_us"))
    steps_tile = Tile(
        "Steps",
        fmt_int(n_steps) if n_steps else "none",
        f"{fmt_time(span / n_steps)} per step" if n_steps and span else "no ProfilerStep marks",
    )
    device_tile = _device_tile(a.get("device") or {}, getattr(rank, "meta", None), has_gpu)
    if not has_gpu:
        return (*_cpu_tiles(rank, span), steps_tile, device_tile)
    tiles = [
        Tile("GPU busy", fmt_time(busy), f"{fmt_pct(busy / span) if span and busy is not None else DASH} of {fmt_time(span)} span"),
        Tile(
            "CPU launch time",
            fmt_time(launch_us),
            f"{fmt_int(launches)} launches · {fmt_time(launch_us / launches) if launches and launch_us is not None else DASH} each",
        ),
        _idle_tile(a),
        Tile("Kernels", fmt_int(kernels), f"{fmt_int(kernels / n_steps)} per step" if n_steps and kernels else ""),
        steps_tile,
        device_tile,
    ]
    return tuple(tiles)


def _cpu_tiles(rank: Any, span: float | None) -> tuple[Tile, ...]:
    """Tiles of a trace without GPU activity: span, CPU ops and threads."""
    ops = getattr(rank, "ops", None)
    n_ops = len(ops) if ops is not None else 0
    threads = ops[T.OP_TID].nunique() if n_ops and T.OP_TID in ops else 0
    top = ops[ops[T.OP_DEPTH] == 0] if n_ops and T.OP_DEPTH in ops else None
    busy = float(top[T.OP_DUR].sum()) if top is not None and len(top) else None
    return (
        Tile("Span", fmt_time(span), "whole trace"),
        Tile("CPU ops", fmt_int(n_ops), f"on {fmt_int(threads)} thread{'s' if threads != 1 else ''}"),
        Tile("Top-level op time", fmt_time(busy), "summed over threads"),
        Tile("Kernels", "0", "no GPU activity"),
    )
