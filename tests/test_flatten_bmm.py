"""flatten_bmm: a weight shared by a batch, expanded to it and multiplied with bmm (analyzers/detectors/
expanded_bmm.py, suggestions/rules_expand.py), on hand-made argument lists and on the twenty-fifth held-out
set's jet-tagging pair (H100), against the raw events and the recordings' own unprofiled steps."""

from __future__ import annotations

import pytest
from recorded import bare_ms, profiler_steps, raw_events, recording
from shared_analysis import analysed_file

from tracekit.analyzers.detectors import expanded_bmm as eb
from tracekit.analyzers.detectors.expanded_bmm import _expanded, _touched
from tracekit.compare.applied import applied

SET = "heldout25"
BEFORE, AFTER = "ho25_jet_tagging_expanded_weight_bmm", "ho25_jet_tagging_expanded_weight_bmm_flat_matmul"
EXPANDED = {(1024, 768, 768), (1024, 8, 768), (1024, 768, 256)}  # the script's Phi layers, 1,024 jets


@pytest.mark.parametrize(("name", "dims", "strides", "expected"), [
    ("aten::bmm", [[1024, 64, 768], [1024, 768, 768]], [[49152, 768, 1], [0, 768, 1]], (1024, 768, 768)),
    ("aten::bmm", [[1024, 64, 768], [1024, 768, 768]], [[49152, 768, 1], [589824, 768, 1]], None),  # materialised
    ("aten::bmm", [[4, 64, 768], [4, 768, 768]], [[49152, 768, 1], [0, 768, 1]], None),  # a batch of 4: below MIN_BATCH
    ("aten::baddbmm", [[1024, 64, 768], [1024, 64, 768], [1024, 768, 768]], [[0, 0, 1], [49152, 768, 1], [0, 768, 1]],
     (1024, 768, 768)),  # the bias (argument 0) broadcast does not count, the weight (2) does
    ("aten::bmm", "[[1024, 64, 768]]", [[0, 768, 1]], None),  # untrusted text, not a list
])
def test_expanded(name, dims, strides, expected):
    """The expanded operand is a 3-D GEMM operand with stride 0 in its batch dimension: by hand."""
    assert _expanded(name, dims, strides) == expected


def test_touched():
    """Elements of expanded-shape tensors an op reads (or its transpose), and a bmm's expanded output."""
    shapes = {(1024, 768, 256)}
    assert _touched("aten::sum", [[1024, 768, 256], [], [], []], shapes) == 1024 * 768 * 256
    assert _touched("aten::bmm", [[1024, 64, 256], [1024, 256, 768]], shapes) == 1024 * 256 * 768  # the transpose
    assert _touched("aten::bmm", [[1024, 768, 64], [1024, 64, 256]], shapes) == 1024 * 768 * 256  # its output
    assert _touched("aten::add", [[1024, 64, 256], [256]], shapes) == 0


def _expanded_kernels(events: list[dict], lo: float, hi: float) -> tuple[int, float]:
    """(outermost bmm calls on an operand with batch stride 0, GPU µs of the kernels of every op in the
    step that reads a tensor of an expanded shape or its transpose or, a bmm, writes one, or that runs
    inside such a call) of one step, from the raw events."""
    ops = [e for e in events if e.get("cat") == "cpu_op" and lo <= e["ts"] < hi]
    calls = [e for e in ops if e["name"] == "aten::bmm" and any(s[:1] == [0] for s in e["args"]["Input Strides"])]
    outer = [c for c in calls if not any(o is not c and o["tid"] == c["tid"] and o["ts"] <= c["ts"] < o["ts"] + o["dur"]
                                         for o in calls)]

    def touches(op: dict) -> bool:
        dims = [tuple(d) for d in op["args"].get("Input Dims", []) if isinstance(d, list) and len(d) == 3
                and all(isinstance(x, int) for x in d)]
        if any(d in EXPANDED or (d[0], d[2], d[1]) in EXPANDED for d in dims):
            return True
        inside = any(c["tid"] == op["tid"] and c["ts"] <= op["ts"] < c["ts"] + c["dur"] for c in outer)
        return inside or (op["name"] == "aten::bmm" and len(dims) == 2 and (dims[0][0], dims[0][1], dims[1][2]) in EXPANDED)

    by_id = {e["args"]["External id"]: e for e in ops if "External id" in e["args"]}
    spent = sum(k["dur"] for k in events if k.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                and (op := by_id.get(k["args"].get("External id"))) is not None and touches(op))
    return len(outer), spent


def test_expanded_weight_bmm_priced_as_one_flattened_gemm():
    """jet_tagging_expanded_weight_bmm: four Phi layers a step as `bmm(h, w.expand(1024, -1, -1))` (the raw
    events' outermost bmm calls with a batch stride 0), whose casts, GEMMs, per-jet weight gradients and sums
    over the jets take what the raw events sum per step (~12.4 ms). Priced as one GEMM per layer over the
    65,536 particles at the roof: first, within ±35 % of the bare saving with `x @ w` (15.7 → 4.8 ms), silent
    on the flattened recording, where `diff` sees no expanded call any more."""
    before, after = recording(SET, BEFORE), recording(SET, AFTER)
    events = raw_events(before)
    found = analysed_file(before)
    table = found.analysis.ranks[0].patterns.expanded_bmm
    windows = profiler_steps(events)
    steady = found.analysis.ranks[0].launch.steady_steps
    assert len(table) == len(steady) == len(windows) - 1 == 3  # the first recorded step is not steady
    for (lo, hi), (_, row) in zip(windows[1:], table.iterrows(), strict=True):
        calls, spent = _expanded_kernels(events, lo, hi)
        assert row[eb.EB_CALLS] == calls == 4
        assert row[eb.EB_US] == pytest.approx(spent, rel=1e-6)
    first = found.suggestions[0]
    assert first.id == "flatten_bmm"
    assert first.per_step_us < float(table[eb.EB_US].mean())  # the flattened GEMMs keep some of it
    assert first.per_step_us / 1000 == pytest.approx(bare_ms(before) - bare_ms(after), rel=0.35)
    fixed = analysed_file(after)
    assert "flatten_bmm" not in {s.id for s in fixed.suggestions}
    assert applied("flatten_bmm", found.analysis, fixed.analysis).applied is True


def test_matmuls_own_broadcast_is_not_an_expanded_weight():
    """frozen_backbone_freeze (heldout6): `x @ w` on an input matmul cannot fold expands the 2-D weight itself
    and calls bmm with a batch stride 0 (the raw events: such bmm calls whose enclosing op is aten::matmul),
    with no copy; the user already wrote the matmul, so nothing is found and the rule is silent."""
    path = recording("heldout6", "ho6_frozen_backbone_freeze")
    ops = sorted((e for e in raw_events(path) if e.get("cat") == "cpu_op"), key=lambda e: (e["tid"], e["ts"], -e["dur"]))
    under_matmul = 0
    for i, e in enumerate(ops):
        if e["name"] == "aten::bmm" and any(s[:1] == [0] for s in e["args"]["Input Strides"]):
            up = [o for o in ops[max(i - 40, 0):i] if o["tid"] == e["tid"] and o["ts"] <= e["ts"] < o["ts"] + o["dur"]]
            under_matmul += bool(up) and up[-1]["name"] == "aten::matmul"
    assert under_matmul > 0
    found = analysed_file(path)
    assert not len(found.analysis.ranks[0].patterns.expanded_bmm)
    assert "flatten_bmm" not in {s.id for s in found.suggestions}
