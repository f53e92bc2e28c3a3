"""Rule reuse_dataloader (a multi-process DataLoader iterator created every step) on synthetic traces with hand-derived numbers."""

from __future__ import annotations

import pytest
from shared_analysis import analysed_file
from tracebuilder import TraceBuilder

import tracekit
from tracekit.analyzers import analyze
from tracekit.pipeline.local import analyse_file
from tracekit.suggestions.rules import RULES_BY_ID

KERNEL = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >"
NEXT = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
STARTUP_US, WAIT_US, SHUTDOWN_US = 10_000.0, 5_000.0, 3_000.0


def loader_trace(tmp_path, *, fresh: bool = True, host_us: float = 0.0, steps: int = 4, name: str = "loader.json"):
    """`steps` steps, each (t0 = its start): with `fresh`, the new iterator's seed op aten::random_ at
    t0+10 (5 µs), STARTUP_US of nothing recorded (its workers forking), its __next__ (WAIT_US), then
    SHUTDOWN_US of nothing recorded (the workers joined); without it a persistent iterator's __next__ of
    30 µs at t0+10. Then an op of `host_us` (recorded host work), then 10 launches of 10 µs every 20 µs,
    kernels of 100 µs queued behind each other, and an 85 µs tail."""
    b = TraceBuilder()
    pre = (5 + STARTUP_US + WAIT_US + SHUTDOWN_US) if fresh else 40.0
    period = 10 + pre + host_us + 10 * 20 + 85
    for step in range(1, steps + 1):
        t0 = (step - 1) * period
        b.annotation(f"ProfilerStep#{step}", t0, period)
        t = t0 + 10
        if fresh:
            b.op("aten::random_", t, 5)
            b.annotation(NEXT, t + 5 + STARTUP_US, WAIT_US)
        else:
            b.annotation(NEXT, t, 30)
        t = t0 + 10 + pre
        if host_us:
            b.op("aten::copy_", t, host_us)
            t += host_us
        gpu = t + 5
        for _ in range(10):
            b.launch(t, 10, KERNEL, gpu, 100)
            gpu += 100
            t += 20
    return b.write(tmp_path / name)


def test_fires_first_with_the_start_up_wait_and_shutdown(tmp_path):
    result = analysed_file(loader_trace(tmp_path))
    assert result.suggestions[0].id == "reuse_dataloader"
    s = result.suggestions[0]
    # traced estimate: per steady step start-up 10,000 + wait 5,000 + shutdown 3,000 = 18,000 µs (the
    # unrecorded time from the seed op's end to __next__, __next__, and from its end to the first launch)
    assert s.traced_saving_us == pytest.approx(len(s.evidence) * 18_000.0)
    rows = [(e["next_calls"], e["startup_us"], e["wait_us"], e["shutdown_us"]) for e in s.evidence]
    assert rows == [(1, STARTUP_US, WAIT_US, SHUTDOWN_US)] * len(s.evidence)
    # what-if: the step's longest host gap (the loader's, 18,015 µs traced before the first launch) loses
    # 18,000 µs × (projected / traced gap); what is left is the launches and the 1,000 µs of kernels
    # queued behind them, so the projected step falls below 1.5 ms from over 18 ms
    assert s.per_step_us > 16_500.0
    assert "persistent_workers=True" in s.snippet and "batch_sampler=" in s.snippet
    assert "dataloader_workers" not in {x.id for x in result.suggestions}  # waits for this one


def test_silent_on_a_persistent_iterator(tmp_path):
    a = analyze(tracekit.load_trace(loader_trace(tmp_path, fresh=False)))
    assert RULES_BY_ID["reuse_dataloader"].run(a) is None
    assert not len(a.ranks[0].patterns.loader_respawn)


def test_silent_below_the_bar(tmp_path):
    # 18,000 µs of a step with 1 s of recorded host work besides: 1.8 % of the step, under 2 %
    result = analysed_file(loader_trace(tmp_path, host_us=1_000_000.0))
    assert len(result.analysis.ranks[0].patterns.loader_respawn)  # found, but too small to say
    assert "reuse_dataloader" not in {x.id for x in result.suggestions}


def test_one_new_iterator_is_an_epoch_not_a_step(tmp_path):
    # the fresh iterator in the first of 8 steps only (a new epoch), a persistent one after: silent
    b_path = loader_trace(tmp_path, steps=8, fresh=False)
    a = analyze(tracekit.load_trace(b_path))
    assert RULES_BY_ID["reuse_dataloader"].run(a) is None


def test_diff_credits_the_loader_built_once(tmp_path):
    """`tracekit diff` reads the change from the traces: a fresh iterator in each of the 4 steps
    (one row per step in patterns.loader_respawn) → none with the persistent one: made."""
    from tracekit.compare.applied import applied

    before = analyse_file(loader_trace(tmp_path), with_suggestions=False).analysis
    after = analyse_file(loader_trace(tmp_path, fresh=False, name="after.json"), with_suggestions=False).analysis
    made = applied("reuse_dataloader", before, after)
    assert made.applied is True
    assert "DataLoader iterators created per step" in made.evidence and "1.0 → 0.0" in made.evidence
    assert applied("reuse_dataloader", before, before).applied is False
