"""tracekit vs HolisticTraceAnalysis on the shared traces: idle breakdown, launch counts, temporal
breakdown, under HTA's conventions (tracekit.hta_compat.hta_view). Needs the `hta` extra."""

from __future__ import annotations

import logging
import warnings
from functools import cache

import numpy as np
import pytest
from conftest import SHARED_TRACES

import tracekit
from tracekit import hta_compat
from tracekit.analyzers.gputime import temporal_breakdown
from tracekit.analyzers.launch import launch_overhead
from tracekit.analyzers.step_plan import plan_steps
from tracekit.analyzers.step_selection import ALL_STEPS

pytest.importorskip("hta.trace_analysis", reason="the hta extra (HTA needs psutil too) is not installed")
pytestmark = pytest.mark.filterwarnings("ignore")

# Every shared trace with GPU activity that HTA 0.5.0 can load under pandas 3.
# tracelens/torch_compile_triton_trace.json.gz is left out: HTA fails on it ("Invalid value ... for
# dtype 'int8'") before computing anything.
TRACES = [
    "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "hta/call_stack/backward_thread.json",
    "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
    "hta/critical_path/cuda_event_sync/event_sync_trace.json.gz",
    "hta/nccl_parser_config/nccl_data.json.gz",
    "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "hta/trace_diff/control/control.json.gz",
    "hta/trace_diff/test/test.json.gz",
    "hta/trace_filter/sampled_rank-0.json.gz",
    "hta/trace_filter/sampled_rank-1.json.gz",
    "hta/triton_example/triton_example.json.gz",
    "kineto_tb_plugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    "kineto_tb_plugin/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz",
    "tracelens/mi300_gaunernst_bert-small-uncased__1016001.json.gz",
    "tracelens/perf_model_normalization_normalization_layer_test.json.gz",
]
# Where HTA's temporal breakdown counts more GPU time than tracekit, and why: HTA takes every event
# with a stream (cuda_sync "Event Sync" markers, gpu_user_annotation ranges) as GPU work.
HTA_COUNTS_NON_ACTIVITIES = {
    "benchmark_result_2869224_1695835535_trace.json.gz": "cuda_sync events",
    "event_sync_trace.json.gz": "cuda_sync events",
    "triton_example.json.gz": "a gpu_user_annotation longer than the kernel",
}
# GPU activities tracekit links to a launch that HTA's launch statistics do not count
# (HTA counts only cudaLaunchKernel(ExC), cudaMemcpyAsync, cudaMemsetAsync).
TRACEKIT_COUNTS_MORE = {
    "mi250_minitoy_train_ROCm6_2_kineto.json.gz": 16,  # hipLaunchKernel, hipExtModuleLaunchKernel, hipMemcpy*
    "triton_example.json.gz": 1,  # cuLaunchKernel (Triton)
    "test.json.gz": 5046,  # kernels, memsets and memcpys replayed by cudaGraphLaunch
    "mi300_gaunernst_bert-small-uncased__1016001.json.gz": 61,  # hip*
    "perf_model_normalization_normalization_layer_test.json.gz": 173,  # hip*
}
REL = 0.01  # agreement within 1 %


def close(a: float, b: float) -> bool:
    return abs(a - b) <= REL * max(abs(a), abs(b)) + 1e-6


@cache
def _run(rel: str, include_last: bool):
    """(path, tracekit's rank, HTA's numbers, the rank as HTA reads it), once per trace and setting
    for the module (the launch-delay test reads nccl_data's again; read only)."""
    path = SHARED_TRACES / rel
    if not path.exists():
        pytest.skip(f"{rel} is absent (../shared/traces)")
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rank = tracekit.load_trace(path).rank()
            numbers = hta_compat.hta_numbers(path, rank.rank, include_last_profiler_step=include_last)
    finally:
        logging.disable(logging.NOTSET)
    return path, rank, numbers, hta_compat.hta_view(rank, include_last_profiler_step=include_last)


@pytest.fixture(autouse=True, scope="module")
def _forget_runs():
    yield
    _run.cache_clear()


def _check_idle(view, numbers) -> None:
    lo = launch_overhead(view, kernel_wait_us=hta_compat.HTA_KERNEL_WAIT_US)
    hta = hta_compat.idle_by_category(numbers.idle)
    cols = {"host_wait": "host_wait_us", "kernel_wait": "kernel_wait_us", "other": "other_us"}
    ours = {(int(s["stream"]), cat): float(s[col]) for s in lo.streams.to_dict("records")
            for cat, col in cols.items()}
    assert {k for k, v in hta.items() if v > 0} <= set(ours)
    for key in set(hta) | set(ours):
        assert abs(hta.get(key, 0.0) - ours.get(key, 0.0)) <= max(REL * hta.get(key, 0.0), 0.01), key


@pytest.mark.parametrize("rel", TRACES, ids=lambda r: r.split("/")[-1])
def test_agrees_with_hta_including_last_step(rel):
    path, _, numbers, view = _run(rel, include_last=True)
    _check_idle(view, numbers)

    # launch counts: equal under HTA's API list; tracekit also counts driver (Triton) and HIP launches
    assert hta_compat.hta_launch_count(view) == numbers.launches
    linked = int((view.gpu["launch"] >= 0).sum())
    assert linked - numbers.launches == TRACEKIT_COUNTS_MORE.get(path.name, 0)
    launches = launch_overhead(view, plan_steps(view, ALL_STEPS)).totals.launches
    assert launches >= numbers.launches

    tb = temporal_breakdown(view)
    hta = numbers.temporal
    if path.name in HTA_COUNTS_NON_ACTIVITIES:
        assert tb.kernel_time_us - tb.idle_us < hta["kernel_time"] - hta["idle_time"]  # less busy
        assert tb.kernel_time_us <= hta["kernel_time"]
    else:
        assert close(tb.kernel_time_us, hta["kernel_time"])
        assert close(tb.idle_us, hta["idle_time"])
        assert close(tb.compute_us, hta["compute_time"])
        assert close(tb.non_compute_us, hta["non_compute_time"])


@pytest.mark.parametrize("rel", [
    "hta/trace_diff/test/test.json.gz",
    "hta/nccl_parser_config/nccl_data.json.gz",
    "kineto_tb_plugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
], ids=lambda r: r.split("/")[-1])
def test_agrees_with_hta_default_dropping_last_step(rel):
    _, rank, numbers, view = _run(rel, include_last=False)
    assert len(view.gpu) < len(rank.gpu)  # HTA dropped the work launched in the last step
    _check_idle(view, numbers)
    assert hta_compat.hta_launch_count(view) == numbers.launches
    tb, hta = temporal_breakdown(view), numbers.temporal
    assert close(tb.kernel_time_us, hta["kernel_time"]) and close(tb.idle_us, hta["idle_time"])
    assert close(tb.compute_us, hta["compute_time"])


def test_queue_delay_matches_hta_launch_delay():
    _, _, numbers, view = _run("hta/nccl_parser_config/nccl_data.json.gz", include_last=True)
    lo = launch_overhead(view)
    ours = np.sort(lo.activities["queue_us"].dropna().to_numpy())
    theirs = np.sort(numbers.launch_stats["launch_delay"].to_numpy(dtype=float))
    assert len(ours) == len(theirs)
    assert np.allclose(ours, theirs, atol=1e-3)
