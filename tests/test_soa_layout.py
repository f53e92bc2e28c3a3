"""soa_layout: element-wise kernels reading the fields of an array of structures column by column
(analyzers/detectors/strided_reads.py), on hand-made argument lists and on the twenty-third held-out
set's particle pair (H100), against the raw events and the recordings' own unprofiled steps."""

from __future__ import annotations

import math

import pytest
from recorded import bare_ms, profiler_steps, raw_events, recording
from shared_analysis import analysed_file

from tracekit.analyzers.detectors.strided_reads import column_read
from tracekit.compare.applied import applied

SET = "heldout23"
BEFORE, AFTER = "ho23_ocean_particles_aos_columns", "ho23_ocean_particles_aos_columns_soa_layout"


@pytest.mark.parametrize(("dims", "strides", "expected"), [
    ([[8388608], []], [[8], []], (8, 8388608)),  # state[:, 0] of an (N, 8) float array
    ([[8388608], [8388608]], [[1], [1]], None),  # contiguous
    ([[1024, 64], [1024, 64]], [[64, 1], [1, 1024]], None),  # a transpose: 1,024 elements apart, not a field
    ([[65536, 1]], [[4, 1]], (4, 65536)),  # the trailing 1 is not the innermost dimension read
    ([[4096], [4096]], [[8], [8]], None),  # under 65,536 elements: stays in the cache lines read anyway
    ([[8388608]], [[0]], None),  # stride 0: a broadcast
    ([[256, 512], [256, 512]], [[1024, 2], [512, 1]], (2, 131072)),  # t[..., ::2]
    ([[1, 64, 512, 512], [1, 64, 512, 512]], [[16777216, 262144, 512, 1], [64, 1, 32768, 64]], None),  # NCHW + NHWC
    ([[64, 1024], [64, 1024]], [[1, 64], [1024, 1]], None),  # state.T: its field dim is contiguous, a layout
    ([[8388608]], "[[8]]", None),  # untrusted text, not a list
    ([[8388608, True]], [[8, 1]], None),
])
def test_column_read(dims, strides, expected):
    """(stride, elements) of the largest input whose innermost dimension of more than one element
    steps 2–64 elements, worked out by hand for each case."""
    assert column_read(dims, strides) == expected


def _column_kernels(events: list[dict], lo: float, hi: float) -> list[tuple[str, float]]:
    """(op name, kernel µs) of the kernels whose launching op starts in [lo, hi) and reads a column:
    an input of ≥ 65,536 elements whose innermost dimension > 1 has a stride of 2..64 (the raw events'
    Input Dims / Input Strides, kernels joined to their op by External id)."""
    ops = {e["args"]["External id"]: e for e in events if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})}
    out = []
    for k in (e for e in events if e.get("cat") == "kernel"):
        op = ops.get(k["args"].get("External id"))
        if op is None or not lo <= op["ts"] < hi:
            continue
        for d, s in zip(op["args"].get("Input Dims", []), op["args"].get("Input Strides", []), strict=False):
            inner = [i for i, x in enumerate(d) if x > 1] if isinstance(d, list) and isinstance(s, list) else []
            if inner and len(s) == len(d) and math.prod(d) >= 65536 and 2 <= s[inner[-1]] <= 64:
                out.append((op["name"], k["dur"]))
                break
    return out


def test_particle_columns_priced_against_the_measured_layout_change():
    """ocean_particles_aos_columns: per step the raw events hold 80 kernels of ops reading a column
    8 elements apart of an 8,388,608-row float array; 2 of them are aten::mean reductions, the other
    78 (element-wise and copies) take 11.42–11.43 ms, which the detector's rows hold. Stored as an
    (8, N) structure of arrays, the recordings' bare steps fell by 9.09 ms; the rule prices 9.31 ms
    (those kernels' bytes at the 3.02 TB/s the trace's contiguous element-wise kernels move) and is
    silent on the fixed recording. fuse_elementwise (13.0 ms, not measured) stays first."""
    before = recording(SET, BEFORE)
    events = raw_events(before)
    found = analysed_file(before)
    table = found.analysis.ranks[0].patterns.strided_reads
    by_step = {int(s): (int(k), float(t)) for s, k, t in zip(table["step"], table["kernels"], table["time_us"], strict=True)}
    windows = profiler_steps(events)
    assert len(windows) == 4 and len(by_step) >= 3
    for lo, hi in windows:
        hits = _column_kernels(events, lo, hi)
        assert len(hits) == 80 and sum(name == "aten::mean" for name, _ in hits) == 2
        element_us = sum(us for name, us in hits if name != "aten::mean")
        assert element_us == pytest.approx(11425, abs=70)
    for kernels, us in by_step.values():
        assert kernels == 78 and us == pytest.approx(11425, abs=70)
    measured = bare_ms(before) - bare_ms(recording(SET, AFTER))
    assert measured == pytest.approx(9.09, abs=0.01)
    s = next(s for s in found.suggestions if s.id == "soa_layout")
    assert s.per_step_us / 1000 == pytest.approx(measured, rel=0.35)
    assert s.title.startswith("Store the fields as separate contiguous tensors (a structure of arrays): 78 element-wise "
                              "kernels per step read columns 8 elements apart")
    assert [x.id for x in found.suggestions][:2] == ["fuse_elementwise", "soa_layout"]
    assert "soa_layout" not in {x.id for x in analysed_file(recording(SET, AFTER)).suggestions}


def test_diff_credits_the_layout_change_only_when_no_column_is_read():
    """`tracekit diff`'s check for soa_layout: made when the element-wise kernels reading strided columns
    per step fall (78 → 0 between the pair's recordings, the rows counted above), not made against the
    baseline itself."""
    before = analysed_file(recording(SET, BEFORE)).analysis
    after = analysed_file(recording(SET, AFTER)).analysis
    assert applied("soa_layout", before, after).applied is True
    assert applied("soa_layout", before, before).applied is False
