"""Value checks read on the host in the loop (detectors/value_checks.py, rule drop_checks): checks worked by hand on a synthetic trace, and the eleventh held-out set's dist_validate recording (H100) against its raw events and its measured plain steps (sample_traces/heldout11/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from recorded import profiler_steps, raw_events, recording
from shared_analysis import analysed_file
from tracebuilder import TraceBuilder

from tracekit.analyzers.detectors import toplevel
from tracekit.analyzers.detectors import value_checks as vc
from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.trace.load import load_trace

D2H = "Memcpy DtoH (Device -> Pageable)"


def _checks_trace(path: Path, checks: int, reduce_dims: list | None = None) -> Path:
    """One ProfilerStep: a GEMM, then `checks` checks 200 µs apart, each `aten::gt` (20 µs, a 3 µs
    kernel), `aten::all` (20 µs, a 3 µs kernel; `reduce_dims` its Input Dims, one input by default)
    and `aten::is_nonzero` (40 µs: a 2 µs copy of 1 byte, then a 15 µs cudaStreamSynchronize); then a
    `.item()` of a sum (a reduction that is no test)."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#0", 0, 10_000)
    b.launch(5, 5, "void gemm_kernel", 20, 50)
    for i in range(checks):
        t = 1000 + 200 * i
        ext = b.op("aten::gt", t, 20, **{"Input Dims": [[1024, 6], []]})
        b.launch(t + 5, 5, "void compare_kernel", t + 12, 3, ext=ext)
        ext = b.op("aten::all", t + 30, 20, **{"Input Dims": reduce_dims or [[1024, 6]]})
        b.launch(t + 35, 5, "void reduce_kernel", t + 42, 3, ext=ext)
        ext = b.op("aten::is_nonzero", t + 60, 40, **{"Input Dims": [[]]})
        b.launch(t + 65, 10, D2H, t + 76, 2, ext=ext, api="cudaMemcpyAsync", kind="memcpy", bytes=1)
        b.launch(t + 80, 15, None, 0, 0, api="cudaStreamSynchronize")
    t = 1000 + 200 * checks
    ext = b.op("aten::sum", t, 20, **{"Input Dims": [[1024, 6]]})
    b.launch(t + 5, 5, "void reduce_kernel", t + 12, 3, ext=ext)
    ext = b.op("aten::item", t + 30, 40, **{"Input Dims": [[]]})
    b.launch(t + 35, 10, D2H, t + 46, 2, ext=ext, api="cudaMemcpyAsync", kind="memcpy", bytes=4)
    b.launch(t + 50, 15, None, 0, 0, api="cudaStreamSynchronize")
    return b.write(path)


def _found(path: Path) -> vc.ValueChecks:
    rank = load_trace(path).ranks[0]
    steps = StepsOf.of(rank)
    top = toplevel.TopLevel.of(rank)
    return vc.find_value_checks(rank, toplevel.step_sequences(rank, steps, top), top)


def test_checks_by_hand(tmp_path):
    """6 checks: each from gt's start (t) to is_nonzero's end (t + 100): 100 µs, 600 in all; 4 calls
    each (two launches, the copy, the sync); 3 + 3 + 2 µs on the GPU each. The sum's .item() is no check."""
    found = _found(_checks_trace(tmp_path / "t.json", 6))
    assert found.table.to_dict("records") == [{
        vc.VC_STEP: 0, vc.VC_CHECKS: 6, vc.VC_OPS: "aten::gt → aten::all → aten::is_nonzero", vc.VC_CALLS: 24,
        vc.VC_HOST_US: pytest.approx(600.0), vc.VC_GPU_US: pytest.approx(48.0)}]
    assert int(found.calls.sum()) == 24


def test_few_checks_or_a_reduction_over_a_dim_are_not_checks(tmp_path):
    """3 checks are below MIN_CHECKS; `all(dim)` (two recorded inputs) leaves a tensor, not one boolean."""
    assert not len(_found(_checks_trace(tmp_path / "a.json", 3)).table)
    assert not len(_found(_checks_trace(tmp_path / "b.json", 8, reduce_dims=[[1024, 6], []])).table)


def test_dist_validate_recording():
    """Raw events of ho11_dist_validate: per step 160 `aten::is_nonzero` and 160 `aten::_is_all_true`
    (torch.distributions' validation: 2 checks per Normal, 1 per log_prob, 32
    imagined steps). drop_checks first, its what-if within ±35 % of 24.565 − 17.441 = 7.124 ms measured
    (plain runs, README); avoid_sync leaves those syncs to it; cuda_graphs and fuse_elementwise wait."""
    path = recording("heldout11", "ho11_dist_validate")
    events = raw_events(path)
    for lo, hi in profiler_steps(events):
        names = [e["name"] for e in events if e.get("cat") == "cpu_op" and lo <= e["ts"] < hi]
        assert names.count("aten::is_nonzero") == names.count("aten::_is_all_true") == 160
    found = analysed_file(path).suggestions
    first = found[0]
    assert first.id == "drop_checks" and first.evidence[0]["checks_per_step"] == 160
    assert first.per_step_us == pytest.approx(24565.0 - 17441.0, rel=0.35)
    assert not {"avoid_sync", "cuda_graphs", "fuse_elementwise"} & {s.id for s in found}
