"""static_graph_inputs: inputs CUDA graph trees copy into a graph at every replay (analyzers/detectors/
graph_inputs.py, suggestions/rules_compile.py), on the twenty-fourth held-out set's meeting_asr pair (H100),
against the raw events and the recordings' own unprofiled steps."""

from __future__ import annotations

import pytest
from recorded import bare_ms, profiler_steps, raw_events, recording
from shared_analysis import analysed_file

from tracekit.analyzers.detectors import graph_inputs as gi
from tracekit.compare.applied import applied

SET = "heldout24"
BEFORE, AFTER = "ho24_meeting_asr_graph_input_copies", "ho24_meeting_asr_graph_input_copies_static_cross_kv"


def _input_copies(events: list[dict], lo: float, hi: float) -> tuple[int, int, float]:
    """(`_foreach_copy_` calls inside a `Torch-Compiled Region` span of the same thread, the GPU activities
    of those calls and of the ops inside them (joined by External id), their µs) of one step."""
    ops = [e for e in events if e.get("cat") == "cpu_op" and lo <= e["ts"] < hi]
    regions = [e for e in ops if e["name"].startswith("Torch-Compiled Region")]
    copies = [e for e in ops if e["name"] == "aten::_foreach_copy_"
              and any(r["tid"] == e["tid"] and r["ts"] <= e["ts"] < r["ts"] + r["dur"] for r in regions)]
    inside = {o["args"]["External id"] for o in ops if "External id" in o["args"]
              and any(c["tid"] == o["tid"] and c["ts"] <= o["ts"] < c["ts"] + c["dur"] for c in copies)}
    gpu = [k for k in events if k.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
           and k["args"].get("External id") in inside]
    return len(copies), len(gpu), sum(k["dur"] for k in gpu)


def test_graph_input_copies_priced_as_their_gpu_time():
    """meeting_asr_graph_input_copies: a reduce-overhead decoder step (96 cudaGraphLaunch calls in the raw
    events) fed the encoder's 32 × 16 × 1,500 × 64 cross K/V: per steady step 24 input copies (one per
    compiled call) launch 240 device copies, 12.6 ms, as the raw events count. Priced as their GPU time:
    first, within ±35 % of the bare saving with the K/V kept in module buffers (31.62 → 18.98 ms), silent on
    that recording (24 copies of 34 µs a step left), where `diff` sees the copies' time fall."""
    before, after = recording(SET, BEFORE), recording(SET, AFTER)
    events = raw_events(before)
    assert sum(e.get("name") == "cudaGraphLaunch" for e in events) == 96
    found = analysed_file(before)
    table = found.analysis.ranks[0].patterns.graph_inputs
    windows = profiler_steps(events)
    assert len(table) == 3 and len(windows) == 4  # the first recorded step is not steady
    for (lo, hi), (_, row) in zip(windows[1:], table.iterrows(), strict=True):
        calls, copies, spent = _input_copies(events, lo, hi)
        assert (row[gi.GI_CALLS], row[gi.GI_COPIES]) == (calls, copies) == (24, 240)
        assert row[gi.GI_US] == pytest.approx(spent, rel=1e-6)
    first = found.suggestions[0]
    assert first.id == "static_graph_inputs"
    assert first.per_step_us / 1000 == pytest.approx(bare_ms(before) - bare_ms(after), rel=0.35)
    fixed = analysed_file(after)
    assert "static_graph_inputs" not in {s.id for s in fixed.suggestions}
    assert applied("static_graph_inputs", found.analysis, fixed.analysis).applied is True


def test_small_per_call_inputs_stay_silent():
    """compiled_rollout_reduce_overhead (heldout5): 128 input copies a step too (the raw events' count), but
    they are copy kernels of the rollout state that changes every call, ~8 µs each, with no bytes recorded:
    below MIN_COPY_BYTES a copy (none known), the rule stays silent."""
    path = recording("heldout5", "ho5_compiled_rollout_reduce_overhead")
    events = raw_events(path)
    found = analysed_file(path)
    table = found.analysis.ranks[0].patterns.graph_inputs
    steady = found.analysis.ranks[0].launch.steady_steps
    windows = profiler_steps(events)[-len(steady):]
    assert len(table) == len(steady)
    for (lo, hi), (_, row) in zip(windows, table.iterrows(), strict=True):
        calls, copies, spent = _input_copies(events, lo, hi)
        assert (row[gi.GI_CALLS], row[gi.GI_COPIES]) == (calls, copies) == (128, 128)
        assert spent / copies < 10.0
    assert "static_graph_inputs" not in {s.id for s in found.suggestions}
