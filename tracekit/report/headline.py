"""The headline of a rank: the verdict sentence and rule, and the key-number tiles."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tracekit.analyzers.analysis import Analysis
from tracekit.analyzers.launch import LaunchTotals
from tracekit.analyzers.tracefacts import TraceFacts, device_label
from tracekit.report.meta import threads_text
from tracekit.report.tables import Bar, idle_parts
from tracekit.units import DASH, fmt_gbps, fmt_int, fmt_pct, fmt_tflops, fmt_time, num, plural


@dataclass(frozen=True)
class Tile:
    label: str
    value: str
    sub: str = ""
    text: bool = False  # a name rather than a number: smaller, may wrap


def verdict_rule(verdict: str) -> str:
    """The documented thresholds behind the verdicts (tracekit.analyzers.launch), in one line."""
    from tracekit.analyzers import launch as L

    if verdict == L.CPU_ONLY:
        return "Verdict rule: cpu-only when the trace has no kernel, memcpy or memset."
    return (
        f"Verdict rule: gpu-bound when the GPU is busy ≥ {L.GPU_BOUND_UTIL:.0%} of the span; launch-bound "
        f"under {L.LAUNCH_BOUND_UTIL:.0%} busy when CPU launch time ≥ {L.LAUNCH_BOUND_CPU_RATIO:.0%} of GPU "
        f"busy time or ≥ {L.LAUNCH_BOUND_SHORT_SHARE:.0%} of kernels are shorter than their launch call; "
        "mixed otherwise."
    )


def sentence(verdict: str, s: Mapping[str, Any], classes: Sequence[Bar]) -> str:
    span, busy = num(s.get("span_us")), num(s.get("gpu_busy_us"))
    busy_pct = fmt_pct(busy / span) if span and busy is not None else DASH
    launch, launches = fmt_time(s.get("cpu_launch_us")), fmt_int(s.get("launches"))
    top = f" The largest class is {classes[0].label} ({classes[0].pct} of kernel time)." if classes else ""
    if verdict == "launch-bound":
        return (
            f"The GPU is busy only {busy_pct} of the {fmt_time(span)} span while the CPU spends {launch} "
            f"issuing {launches} launches: kernels wait for the host, not the other way round."
        )
    if verdict == "gpu-bound":
        return f"The GPU is busy {busy_pct} of the {fmt_time(span)} span: the kernels set the pace.{top}"
    if verdict == "mixed":
        return (
            f"The GPU is busy {busy_pct} of the {fmt_time(span)} span and the CPU spends {launch} "
            f"in {launches} launches: both launch overhead and kernel time matter.{top}"
        )
    if verdict == "cpu-only":
        return "No GPU activity in this trace: only CPU work was recorded."
    return f"The GPU is busy {busy_pct} of the {fmt_time(span)} span.{top}"


HEADLINE_DTYPES = ("bf16", "fp16", "tf32", "fp32")  # the roof quoted in the device tile, first found


def _device_tile(a: Analysis, facts: TraceFacts) -> Tile:
    name = device_label(a.device, facts)
    if name is None:
        sub = "the trace does not name it" if facts.has_gpu else ""
        return Tile("Device", "unknown GPU" if facts.has_gpu else "no GPU", sub, text=True)
    if a.device is None:
        return Tile("Device", name, "not in tracekit's device table: no peaks", text=True)
    roofs = a.device.peak_tflops
    dtype = next((d for d in HEADLINE_DTYPES if d in roofs), next(iter(roofs), None))
    parts = [f"{fmt_tflops(roofs[dtype])} {dtype}"] if dtype is not None else []
    parts.append(fmt_gbps(a.device.memory_gbps))
    return Tile("Device", name, " · ".join(parts), text=True)


def _idle_tile(t: LaunchTotals) -> Tile:
    idle, span = t.gpu_idle_us, t.span_us
    host = next((p for p in idle_parts(t) if p[0] == "host wait"), None)
    if host is not None:
        sub = f"{fmt_pct(host[1] / 100)} of gaps wait for the host"
    else:
        sub = f"{fmt_pct(idle / span)} of span" if span else ""
    return Tile("GPU idle", fmt_time(idle), sub)


def tiles(a: Analysis, facts: TraceFacts) -> tuple[Tile, ...]:
    t = a.totals
    span, busy = t.span_us, t.gpu_busy_us
    n_steps = sum(1 for r in a.ranks for s in r.launch.steps["step"] if int(s) >= 0)
    steps_tile = Tile(
        "Steps",
        fmt_int(n_steps) if n_steps else "none",
        f"{fmt_time(span / n_steps)} per step" if n_steps and span else "no ProfilerStep marks",
    )
    device_tile = _device_tile(a, facts)
    if not facts.has_gpu:
        cpu = facts.cpu
        return (
            Tile("Span", fmt_time(span), "whole trace"),
            Tile("CPU ops", fmt_int(cpu.ops), threads_text(cpu)),
            Tile("Top-level op time", fmt_time(cpu.top_level_us), "summed over threads"),
            Tile("Kernels", "0", "no GPU activity"),
            steps_tile,
            device_tile,
        )
    each = fmt_time(t.cpu_launch_us / t.launches) if t.launches else DASH
    return (
        Tile("GPU busy", fmt_time(busy), f"{fmt_pct(busy / span) if span else DASH} of {fmt_time(span)} span"),
        Tile("CPU launch time", fmt_time(t.cpu_launch_us), f"{plural(t.launches, 'launch', 'launches')} · {each} each"),
        _idle_tile(t),
        Tile("Kernels", fmt_int(t.kernels), f"{fmt_int(t.kernels / n_steps)} per step" if n_steps and t.kernels else ""),
        steps_tile,
        device_tile,
    )
