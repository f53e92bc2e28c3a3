"""Finished results read back one item at a time (detectors/item_reads.py, rule read_once): runs of device-to-host reads worked by hand on synthetic traces, and the ninth held-out set's ctc_tolist recording (H100) against its raw events and its measured bare steps (sample_traces/heldout9/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from recorded import profiler_steps, raw_events, recording
from shared_analysis import analysed_file
from tracebuilder import TraceBuilder

from tracekit.analyzers.detectors import item_reads as ir
from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.trace.load import load_trace

D2H = "Memcpy DtoH (Device -> Pageable)"


def _reads_trace(path: Path, reads: int, kernel_after: int | None = None) -> Path:
    """One ProfilerStep: a kernel, then `reads` items 100 µs apart, each an `aten::to` launching a
    2 µs copy of 1,000 bytes (call 10 µs) and a 3 µs cudaStreamSynchronize after it; item
    `kernel_after` is followed by a kernel launch."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#0", 0, 10_000)
    b.launch(5, 5, "void gemm_kernel", 20, 50)
    for i in range(reads):
        t = 200 + 100 * i
        ext = b.op("aten::to", t, 20)
        b.launch(t + 2, 10, D2H, 100 + t, 2, ext=ext, api="cudaMemcpyAsync", kind="memcpy", bytes=1000)
        b.launch(t + 13, 3, None, 0, 0, api="cudaStreamSynchronize")
        if i == kernel_after:
            b.launch(t + 50, 5, "void add_kernel", t + 60, 3)
    return b.write(path)


def _found(path: Path) -> ir.ItemReads:
    rank = load_trace(path).ranks[0]
    return ir.find_item_reads(rank, StepsOf.of(rank))


def test_a_run_of_reads_by_hand(tmp_path):
    """16 reads: one run; after the first item (its copy and sync kept) go 15 × (copy + sync) = 30
    calls, from the first item's sync end (216) to the last one's (200 + 1500 + 16 = 1716): 1,500 µs."""
    found = _found(_reads_trace(tmp_path / "t.json", 16))
    assert found.table.to_dict("records") == [{ir.IR_STEP: 0, ir.IR_READS: 16, ir.IR_BYTES: 16_000.0,
                                               ir.IR_GONE_CALLS: 30, ir.IR_HOST_US: pytest.approx(1500.0)}]
    assert int(found.calls.sum()) == 30


def test_short_or_broken_runs_are_not_loops(tmp_path):
    """15 reads are below MIN_READS; 20 reads with a kernel launched after the 9th are runs of 10 and 10."""
    assert not len(_found(_reads_trace(tmp_path / "a.json", 15)).table)
    assert not len(_found(_reads_trace(tmp_path / "b.json", 20, kernel_after=9)).table)


def test_ctc_tolist_recording():
    """Raw events of ho9_ctc_tolist: per step 64 cudaMemcpyAsync of a 'Memcpy DtoH (Device -> Pageable)'
    of 1,920–3,200 bytes, each followed by a cudaStreamSynchronize, with no kernel launched between the
    first and the last. read_once first; its what-if 2.27 ms a step against 6.174 − 4.330 = 1.844 ms
    measured (+24 %); avoid_sync does not also count those syncs; silent on the batched variant."""
    path = recording("heldout9", "ho9_ctc_tolist")
    events = raw_events(path)
    copies = {e["args"]["correlation"]: e for e in events if e.get("cat") == "gpu_memcpy"}
    for lo, hi in profiler_steps(events):
        calls = sorted((e for e in events if e.get("cat") == "cuda_runtime" and lo <= e["ts"] < hi), key=lambda e: e["ts"])
        reads = [i for i, e in enumerate(calls) if e["name"] == "cudaMemcpyAsync"]
        assert len(reads) == 64
        assert all(copies[calls[i]["args"]["correlation"]]["name"] == D2H
                   and 1920 <= copies[calls[i]["args"]["correlation"]]["args"]["bytes"] <= 3200
                   and calls[i + 1]["name"] == "cudaStreamSynchronize" for i in reads)
        between = calls[reads[0]:reads[-1]]
        assert not any("LaunchKernel" in e["name"] for e in between)
    found = analysed_file(path).suggestions
    first = found[0]
    assert first.id == "read_once" and first.evidence[0]["reads_per_step"] == 64
    assert first.per_step_us == pytest.approx(6174.0 - 4330.0, rel=0.35)
    assert "avoid_sync" not in {s.id for s in found}
    assert "read_once" not in {s.id for s in analysed_file(recording("heldout9", "ho9_ctc_tolist_gpu_collapse")).suggestions}
