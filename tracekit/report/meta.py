"""The trace section of a rank (what the file says, device peaks, extra numbers), its warnings, and CPU ops."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tracekit.analyzers.analysis import Analysis
from tracekit.analyzers.devices import Device
from tracekit.analyzers.kernels import COMMUNICATION, MEMCPY, MEMSET, SLEEP
from tracekit.analyzers.tracefacts import CpuOps, GpuInfo, TraceFacts
from tracekit.analyzers.unprofiled import Unprofiled
from tracekit.report.tables import Bar, bars
from tracekit.units import (
    DASH,
    fmt_bytes,
    fmt_gbps,
    fmt_int,
    fmt_pct,
    fmt_ratio,
    fmt_tflops,
    fmt_time,
    plural,
)

SHAPES_WARNING = "No input shapes in this trace: record with record_shapes=True to get FLOPs, bytes and the roofline."
NO_COST_KINDS = (MEMCPY, MEMSET, COMMUNICATION, SLEEP)  # kernel classes that never get FLOPs


# trace version fields -> label; CUDA/CUPTI numbers are 1000 * major + 10 * minor (13000 -> 13.0)
VERSION_LABELS = {
    "cuda_runtime_version": ("CUDA runtime", True),
    "cuda_driver_version": ("CUDA driver", True),
    "cupti_version": ("CUPTI API version", False),
    "hip_runtime_version": ("HIP runtime", False),
    "hip_driver_version": ("HIP driver", False),
    "roctracer_version": ("roctracer", False),
}


def version_row(key: str, value: str) -> tuple[str, str]:
    """('CUDA runtime', '13.0') for ('cuda_runtime_version', '13000'); unknown keys in words."""
    label, cuda_style = VERSION_LABELS.get(key, (key.replace("_", " ").capitalize(), False))
    if cuda_style and value.isdigit() and len(value) >= 4:
        n = int(value)
        value = f"{n // 1000}.{(n % 1000) // 10}"
    return label, value


def gpu_text(g: GpuInfo) -> str:
    """'NVIDIA H200 · 132 SMs · 150 GB · sm_90'."""
    parts = [g.name]
    if g.sms:
        parts.append(f"{g.sms} SMs")
    if g.memory_bytes:
        parts.append(fmt_bytes(g.memory_bytes))
    if g.compute:
        parts.append(g.compute)
    return " · ".join(parts)


def device_peaks(device: Device) -> str:
    """'bf16 989 TFLOP/s · fp32 67 TFLOP/s · memory 4.80 TB/s'."""
    text = [f"{d} {fmt_tflops(v)}" for d, v in sorted(device.peak_tflops.items(), key=lambda kv: -kv[1])]
    text.append(f"memory {fmt_gbps(device.memory_gbps)}")
    return " · ".join(text)


def _extra_numbers(a: Analysis) -> list[tuple[str, str]]:
    """Numbers the headline does not show, listed under 'Trace' when known."""
    t = a.totals
    rows = [
        ("Kernels per step (median)", fmt_ratio(a.kernels_per_step_median)),
        ("Tokens per step", fmt_ratio(a.tokens_per_step)),
        ("Kernels per token", fmt_ratio(a.kernels_per_token)),
        ("GPU activities", fmt_int(t.gpu_ops)),
        ("Kernels shorter than their launch call", fmt_int(t.short_kernels)),
        ("Host syncs", f"{fmt_int(t.syncs)} ({fmt_time(t.sync_us)})"),
        ("Queue delay (kernel start − launch end)",
         f"median {fmt_time(a.queue.p50_us)} · p90 {fmt_time(a.queue.p90_us)} · max {fmt_time(a.queue.max_us)}"),
        ("GPU time classified 'other'", fmt_pct(a.other_share)),
    ]
    return [(k, v) for k, v in rows if v != DASH and not v.startswith(DASH)]


def meta_rows(a: Analysis, facts: TraceFacts) -> tuple[tuple[str, str], ...]:
    rows: list[tuple[str, str]] = [("File", facts.path), ("Rank", str(facts.rank)), ("Platform", facts.platform)]
    version = f" (version {facts.schema_version})" if facts.schema_version else ""
    rows.append(("Trace format", f"{facts.schema}{version}"))
    for g in facts.gpus:
        rows.append(("GPUs in the machine", f"{g.count} × {gpu_text(g)}") if g.count > 1 else ("GPU", gpu_text(g)))
    rows.extend(version_row(k, v) for k, v in facts.versions)
    if facts.distributed:
        rows.append(("Distributed", ", ".join(f"{k}={v}" for k, v in facts.distributed)))
    if a.device is not None:
        rows.append(("Device peaks", device_peaks(a.device)))
        rows.append(("Peaks source", a.device.source))
    if facts.has_gpu:
        rows.extend(_extra_numbers(a))
    if facts.counts:
        rows.append(("Events", ", ".join(f"{k} {v:,}" for k, v in facts.counts[:10])))
    if facts.skipped:
        rows.append(("Malformed events skipped", f"{facts.skipped:,}"))
    return tuple(rows)


def warnings(a: Analysis, facts: TraceFacts, shown: Sequence[str]) -> tuple[str, ...]:
    """The rank's warnings not already at the top of the report, plus the missing-shapes one."""
    out = [str(w) for w in a.warnings if str(w) not in shown]
    k = a.kernels
    costed = k[~k["class"].isin(NO_COST_KINDS)]
    if len(costed) and costed["flops"].isna().all() and not facts.has_shapes:
        out.append(SHAPES_WARNING)
    audit = a.integrity
    if audit is not None and audit.serious:  # one line: what the trace cannot fully support
        out.insert(0, "Trace integrity — " + " | ".join(f"{f.severity}: {f.message}" for f in audit.serious))
    return tuple(dict.fromkeys(out))


def cpu_bars(cpu: CpuOps) -> tuple[Bar, ...]:
    """Top-level CPU ops by total time: the useful view of a trace with no GPU activity."""
    return tuple(bars({name: (t, c) for name, t, c in cpu.top}, colors=False))


def threads_text(cpu: CpuOps) -> str:
    return f"on {plural(cpu.threads, 'thread')}"


def d2h_words(u: Unprofiled) -> str:
    """"; bulk pageable device-to-host copies at ≥ N GB/s (fitted to the unprofiled steps)" when the
    projection ran them faster than traced, else ""."""
    if u.d2h_gbps <= 0:
        return ""
    return f"; bulk pageable device-to-host copies at ≥ {u.d2h_gbps:.1f} GB/s (fitted to the unprofiled steps)"


def noisy_words(u: Unprofiled, fmt: Callable[[float], str]) -> str:
    """' (steps 33.2 ms – 64.1 ms: the unprofiled run's speed varied)' when the measured steps spread
    past NOISY_MEASUREMENT, else ''."""
    r = u.measured_range_us
    if not u.measured_noisy or r is None:
        return ""
    return f" (steps {fmt(r[0])} – {fmt(r[1])}: the unprofiled run's speed varied)"
