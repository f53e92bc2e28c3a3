"""The one adapter to HolisticTraceAnalysis (HTA): its numbers, and tracekit views that follow its rules."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from tracekit.trace import tables
from tracekit.trace.model import RankTrace

HTA_LAUNCH_APIS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaMemsetAsync")
HTA_KERNEL_WAIT_US = 30  # HTA's default consecutive_kernel_delay, in the trace's time unit (µs)
_NS_ROUNDING = "HTA_DISABLE_NS_ROUNDING"


def available() -> bool:
    """True when HTA's TraceAnalysis can be imported (HTA 0.5.0 also needs psutil)."""
    try:
        import hta.trace_analysis  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass(frozen=True)
class HtaNumbers:
    """What HTA computes for one rank of one trace."""

    idle: pd.DataFrame  # stream, idle_category (host_wait/kernel_wait/other), idle_time (µs)
    temporal: dict[str, float]  # idle_time, compute_time, non_compute_time, kernel_time (µs)
    launches: int  # GPU events matched to an HTA launch API (get_cuda_kernel_launch_stats rows)
    launch_stats: pd.DataFrame  # correlation, cpu_duration, gpu_duration, launch_delay


def hta_numbers(path: str | Path, rank: int = 0, *, include_last_profiler_step: bool = True) -> HtaNumbers:
    """Run HTA's idle breakdown, temporal breakdown and launch statistics on one trace file."""
    from hta.trace_analysis import TraceAnalysis

    path = Path(path)
    before = os.environ.get(_NS_ROUNDING)
    os.environ[_NS_ROUNDING] = "1"  # read by HTA while it parses
    try:
        analysis = TraceAnalysis(trace_files={rank: str(path)}, trace_dir=str(path.parent),
                                 include_last_profiler_step=include_last_profiler_step)
    finally:
        if before is None:
            del os.environ[_NS_ROUNDING]
        else:
            os.environ[_NS_ROUNDING] = before
    idle, _ = analysis.get_idle_time_breakdown(ranks=[rank], visualize=False,
                                               consecutive_kernel_delay=HTA_KERNEL_WAIT_US)
    temporal = analysis.get_temporal_breakdown(visualize=False)
    row = temporal[temporal["rank"] == rank].iloc[0]
    stats = analysis.get_cuda_kernel_launch_stats(ranks=[rank], visualize=False)[rank]
    return HtaNumbers(
        idle=idle[["stream", "idle_category", "idle_time"]].reset_index(drop=True),
        temporal={k: float(row[f"{k}(us)"]) for k in
                  ("idle_time", "compute_time", "non_compute_time", "kernel_time")},
        launches=len(stats),
        launch_stats=stats.reset_index(drop=True),
    )


def _read_like_hta(table: pd.DataFrame, origin: int) -> pd.DataFrame:
    """`table` with the times HTA reads: absolute float64 µs (0.25 µs steps near 1.7e15), shifted."""
    if len(table) == 0:
        return table
    out = table.copy()
    ts = (np.float64(origin) + out["ts"].to_numpy(dtype=float)) - np.float64(origin)
    out["ts"] = ts
    out["end"] = ts + out["dur"].to_numpy(dtype=float)
    return out


def hta_view(rank: RankTrace, *, include_last_profiler_step: bool = True) -> RankTrace:
    """`rank` as HTA sees it: its times rounded as HTA reads them, and only the GPU activities HTA
    analyses.


    Used by tests and benchmarks to compare tracekit with HTA; never by the analyzers. HTA is imported
    lazily (``pip install tracekit[hta]``).

    HTA conventions mimicked by :func:`hta_view`:
    - it keeps only GPU activities whose correlation id matches a CPU-side event (a launch call) that
      starts before the last ``ProfilerStep`` starts, or, with ``include_last_profiler_step=True``,
      that starts before the last step ends; it filters only when the trace has two or more steps;
    - its launch statistics count only cudaLaunchKernel, cudaLaunchKernelExC, cudaMemcpyAsync and
      cudaMemsetAsync (HTA_LAUNCH_APIS).
    - it reads timestamps as absolute float64 µs, which near 1.7e15 µs hold 0.25 µs steps (tracekit's
      loader reads them exactly), and it rounds them further (start up, end down) unless
      ``HTA_DISABLE_NS_ROUNDING=1``: :func:`hta_numbers` sets that variable while HTA parses, and
      :func:`hta_view` rounds tracekit's times to float64 the same way, so both tools read equal times.
    """
    origin = int(getattr(rank.meta, "origin_us", 0) or 0)
    steps = _read_like_hta(rank.steps, origin)
    gpu, rt = _read_like_hta(rank.gpu, origin), _read_like_hta(rank.runtime, origin)
    launch = gpu[tables.GPU_LAUNCH].to_numpy()
    keep = np.ones(len(gpu), dtype=bool)
    if len(steps) >= 2:
        limit = steps[tables.STEP_END].max() if include_last_profiler_step else steps[tables.STEP_TS].max()
        rt_ts = rt[tables.RT_TS].to_numpy(dtype=float) if len(rt) else np.zeros(0)
        start = np.where(launch >= 0, rt_ts[np.maximum(launch, 0)] if len(rt) else np.inf, np.inf)
        keep = (start <= limit) if include_last_profiler_step else (start < limit)
    return dataclasses.replace(rank, gpu=gpu[keep].reset_index(drop=True), runtime=rt, steps=steps)


def hta_launch_count(rank: RankTrace) -> int:
    """GPU activities launched by an API that HTA's launch statistics count."""
    gpu, rt = rank.gpu, rank.runtime
    launch = gpu[tables.GPU_LAUNCH].to_numpy()
    if len(rt) == 0:
        return 0
    names = rt[tables.RT_NAME].to_numpy(dtype=object)[np.maximum(launch, 0)]
    return int(((launch >= 0) & np.isin(names, HTA_LAUNCH_APIS)).sum())


def idle_by_category(idle: pd.DataFrame) -> dict[tuple[int, str], float]:
    """HTA's idle table as {(stream, category): µs}."""
    return {(int(r["stream"]), str(r["idle_category"])): float(r["idle_time"])
            for r in idle.to_dict("records")}
