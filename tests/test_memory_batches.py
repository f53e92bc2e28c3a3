"""benchmarks/gpu/memory_batches.py on the CPU: the out-of-memory search and one profiled batch."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu" / "memory_batches.py"


@pytest.fixture(scope="module")
def script():
    pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location("memory_batches", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_search_doubles_then_bisects_to_the_largest_fitting(script):
    # fits up to 1184: doubling 128, 256, 512, 1024 fit, 2048 does not; bisection of (1024, 2048)
    # by hand: 1536 no, 1280 no, 1152 yes, 1216 no, 1184 yes, 1200 no -> 1200 - 1184 = 16 <= 1184 // 50 = 23
    result = script.search(lambda b: b <= 1184, 128, 1 << 14, 120.0, log=lambda m: None)
    assert [b for b, _ in result["tried"]] == [128, 256, 512, 1024, 2048, 1536, 1280, 1152, 1216, 1184, 1200]
    assert (result["largest_fitting"], result["smallest_oom"], result["stopped_by_budget"]) == (1184, 1200, False)


def test_search_stops_at_the_budget(script):
    ticks = iter(range(100))  # each clock read advances one second; budget 2.5 s: three tries
    result = script.search(lambda b: True, 1, 1 << 14, 2.5, clock=lambda: float(next(ticks)), log=lambda m: None)
    # reads: t0=0, then 1 (try 1), 2 (try 2), 3 > 2.5 stops: batches 1 and 2 were tried
    assert [b for b, _ in result["tried"]] == [1, 2]
    assert result["stopped_by_budget"] and result["largest_fitting"] == 2 and result["smallest_oom"] is None


def test_cpu_run_writes_a_trace_with_marked_steps(script, tmp_path):
    import tracekit

    args = argparse.Namespace(device="cpu", seq=8, dim=16, heads=2, layers=1, steps=2, cpu_limit=4)
    run = script.Run(args)
    r = script.profiled(run, 2, tmp_path)
    assert r["batch"] == 2 and len(r["profiled_step_ms"]) == 2
    trace = tracekit.load_trace(tmp_path / r["trace"]).rank()
    assert len(trace.memory) > 0  # profile_memory=True: [memory] events recorded
    # one ProfilerStep#N mark per profiled step (torch.profiler without a schedule writes none itself)
    from tracekit.analyzers.step_plan import plan_steps
    from tracekit.analyzers.windows import SCOPE_STEPS

    plan = plan_steps(trace)
    assert plan.windows.numbers.tolist() == [0, 1] and plan.windows.scope == SCOPE_STEPS
    assert script.plain(run, 8) is None and script.fits(run, 4) and not script.fits(run, 5)  # above --cpu-limit
