"""The memory view: [memory] events loaded, per-step peaks, churn, what holds the peak, headroom, the batch estimate."""

from __future__ import annotations

import json

import pytest
from tracebuilder import H200, TraceBuilder

import tracekit
from tracekit.analyzers.memory import ALLOCATOR, BYTES, memory_view
from tracekit.analyzers.step_plan import plan_steps
from tracekit.analyzers.step_selection import StepSelection
from tracekit.cli import main
from tracekit.report.memory_view import batch_hint, memory_card, memory_lines

RESERVED = 20_000


def mem(b: TraceBuilder, ts: float, nbytes: int, total: int | None, addr: int, *, device_type: int = 1,
        reserved: int | None = RESERVED) -> None:
    args = {"Bytes": nbytes, "Addr": addr, "Device Type": device_type, "Device Id": 0 if device_type else -1}
    if total is not None:
        args["Total Allocated"] = total
    if reserved is not None and total is not None:
        args["Total Reserved"] = reserved
    b.raw({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": b.pid, "tid": b.tid,
           "ts": ts, "args": args})


def memory_trace(tmp_path, *, totals: bool = True):
    """Two 100 µs steps. Step 0: A (1000 B, inside aten::mm) allocated -> 5000 B in use (so 4000 B were
    in use before the recording), B (3000 B, aten::empty inside aten::bmm) -> 8000, B freed -> 5000.
    Step 1: C (2000 B, aten::add) -> 7000, C freed -> 5000. A CPU allocation (device type 0) of 10^6 B
    in step 1 must not count. Each step launches one kernel, so the trace is a GPU trace."""
    b = TraceBuilder()
    for s in range(2):
        b.annotation(f"ProfilerStep#{s}", 100.0 * s, 100.0)
        ext = b.op("aten::relu", 100.0 * s + 80, 5)
        b.launch(100.0 * s + 81, 3, "relu_kernel", 100.0 * s + 85, 2.0, ext=ext)
    b.op("aten::mm", 5, 10)
    mem(b, 6, 1000, 5000 if totals else None, 0xA0)
    b.op("aten::bmm", 20, 20)
    b.op("aten::empty", 21, 2)
    mem(b, 22, 3000, 8000 if totals else None, 0xB0)
    mem(b, 50, -3000, 5000 if totals else None, 0xB0)
    b.op("aten::add", 110, 10)
    mem(b, 111, 2000, 7000 if totals else None, 0xC0)
    mem(b, 115, 10**6, 10**6, 0xD0, device_type=0)
    mem(b, 150, -2000, 5000 if totals else None, 0xC0)
    return b.write(tmp_path / "mem.json")


def _view(path):
    rank = tracekit.load_trace(path).rank()
    return rank, memory_view(rank, plan_steps(rank, StepSelection.of("all")))


def test_loader_keeps_memory_events(tmp_path):
    rank, _ = _view(memory_trace(tmp_path))
    m = rank.memory
    assert len(m) == 6 and sorted(m["device_type"].tolist()) == [0, 1, 1, 1, 1, 1]
    assert m["bytes"].tolist()[:2] == [1000.0, 3000.0] and m["allocated"].tolist()[:2] == [5000.0, 8000.0]
    assert m["step"].tolist() == [0, 0, 0, 1, 1, 1]  # by time in the ProfilerStep ranges
    names = rank.ops["name"].to_numpy()
    assert [names[o] for o in m["op"].tolist()[:2]] == ["aten::mm", "aten::empty"]  # the innermost op around it


def test_per_step_peaks_churn_and_peak_holders(tmp_path):
    _, v = _view(memory_trace(tmp_path))
    assert v.source == ALLOCATOR and v.events == 5 and v.device_id == 0
    s0, s1 = v.steps
    # step 0: starts at 5000 - 1000 = 4000, peaks at 8000; 2 allocations of 1000 + 3000, 3000 freed
    assert (s0.start_allocated, s0.peak_allocated, s0.allocations, s0.allocated_bytes, s0.freed_bytes) == \
        (4000.0, 8000.0, 2, 4000.0, 3000.0)
    # step 1: starts at 5000, peaks at 7000 (the CPU allocation does not count)
    assert (s1.start_allocated, s1.peak_allocated, s1.allocations, s1.allocated_bytes) == (5000.0, 7000.0, 1, 2000.0)
    assert (v.peak_allocated, v.peak_step, v.peak_reserved) == (8000.0, 0, float(RESERVED))
    # alive at the peak: A (aten::mm) and B, whose aten::empty is credited to the aten::bmm around it;
    # 4000 B were in use before the first event
    assert [(o.op, o.bytes, o.blocks) for o in v.peak_ops] == [("aten::bmm", 3000.0, 1), ("aten::mm", 1000.0, 1)]
    assert v.unattributed_at_peak == 4000.0
    assert v.churn() == (1.5, 3000.0)  # (2 + 1) allocations and (4000 + 2000) B over 2 steps
    device = float(H200["totalGlobalMem"])
    assert v.device_memory == device and v.headroom == device - RESERVED
    # the estimate: transient 8000 - 4000 grows with the batch, 4000 stays; reserved/allocated 2.5 kept
    assert v.batch_factor == pytest.approx((device / 2.5 - 4000) / 4000)


def test_estimate_from_the_floor_when_a_step_starts_with_memory_held(tmp_path):
    """Step 0 [0, 100): 4000 B in use at first; +3000 at 10 (7000), -3000 at 50 (4000), +2000 at 90
    (6000: the next step's activation, allocated before the boundary). Step 1 [100, 200): +2000 at
    120 (8000, the peak), -4000 at 150 (4000). Reserved 20 kB throughout."""
    b = TraceBuilder()
    for s in range(2):
        b.annotation(f"ProfilerStep#{s}", 100.0 * s, 100.0)
        b.launch(100.0 * s + 81, 3, "relu_kernel", 100.0 * s + 85, 2.0, ext=b.op("aten::relu", 100.0 * s + 80, 5))
    for ts, nbytes, total, addr in ((10, 3000, 7000, 0xA0), (50, -3000, 4000, 0xA0), (90, 2000, 6000, 0xB0),
                                    (120, 2000, 8000, 0xC0), (150, -4000, 4000, 0xB0)):
        mem(b, ts, nbytes, total, addr)
    _, v = _view(b.write(tmp_path / "held.json"))
    assert [s.start_allocated for s in v.steps] == [4000.0, 6000.0] and v.peak_step == 1
    # the floor is the least in use over the steps (4000, in both), not step 1's start (6000): the
    # peak holds 8000 - 4000 above it; reserved/allocated at the peak 20000 / 8000 = 2.5
    assert [s.low_allocated for s in v.steps] == [4000.0, 4000.0] and v.floor_allocated == 4000.0
    device = float(H200["totalGlobalMem"])
    assert v.batch_factor == pytest.approx((device / 2.5 - 4000) / 4000)


def test_without_allocator_totals_levels_come_from_bytes(tmp_path):
    _, v = _view(memory_trace(tmp_path, totals=False))
    assert v.source == BYTES and v.batch_factor is None and v.peak_reserved is None
    # levels relative to before the first event: +1000, +3000 -> 4000 peak in step 0; step 1 1000 + 2000
    assert [s.peak_allocated for s in v.steps] == [4000.0, 3000.0]
    assert v.unattributed_at_peak == 0.0


def test_no_memory_events_no_view(tmp_path):
    b = TraceBuilder()
    b.annotation("ProfilerStep#0", 0, 100)
    b.launch(1, 3, "k", 5, 2.0, ext=b.op("aten::relu", 0, 5))
    rank = tracekit.load_trace(b.write(tmp_path / "t.json")).rank()
    assert len(rank.memory) == 0 and memory_view(rank, plan_steps(rank)) is None


def test_text_json_and_card(tmp_path, capsys):
    path = str(memory_trace(tmp_path))
    assert main(["analyze", path, "--json", "--steps", "all"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (m,) = doc["memory"]
    assert (m["peak_allocated"], m["peak_step"], m["allocations_per_step"]) == (8000.0, 0, 1.5)
    assert [s["peak_allocated"] for s in m["steps"]] == [8000.0, 7000.0]
    assert main(["analyze", path, "--steps", "all"]) == 0
    text = capsys.readouterr().out
    assert "memory    GPU 0: peak 8.00 kB allocated, 20.0 kB reserved (largest of 2 steps shown, in step 0)" in text
    assert "held at the peak by: aten::bmm 3.00 kB, aten::mm 1.00 kB; 4.00 kB allocated before the recording" in text
    _, v = _view(path)
    card = memory_card(v)
    assert card is not None and card.tiles[0] == ("Peak allocated", "8.00 kB", "largest step peak (step 0)")
    assert [row[1] for row in card.steps] == ["8.00 kB", "7.00 kB"] and "estimate" in card.estimate
    assert memory_lines([]) == []
    # launch-bound with room for a much larger batch: the batch is named as the lever
    factor = v.batch_factor
    assert factor is not None and factor > 2
    assert memory_card(v, "launch-bound").hint.startswith(f"the step is launch-bound with room for a batch about {factor:.1f}×")
    assert memory_card(v, "gpu-bound").hint == "" and batch_hint(v, None) == ""
