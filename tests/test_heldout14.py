"""The fourteenth held-out set (H100, sample_traces/heldout14/): the changes this set showed, against
the raw events and the measured unprofiled steps: quantizers still calibrating at inference, weight
normalisation recomputed at inference, a sliding-window cache rewritten whole at every token (and the
RoPE chain no longer counting it), a Linear over the concatenation of every pair, and a per-tensor EMA loop that a following statement's op had
hidden from the loop detector."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from recorded import profiler_steps, raw_events, recording
from shared_analysis import analysed_file
from tracebuilder import TraceBuilder

from tracekit.analyzers.detectors import (
    calibration,
    foreach,
    pair_concat,
    weight_norm,
    window_shift,
)
from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.analyzers.detectors.toplevel import TopLevel, step_sequences
from tracekit.trace import tables
from tracekit.trace.load import load_trace


def _per_step(path, name: str) -> list[int]:
    """Raw events: calls of op `name` inside each ProfilerStep."""
    events = raw_events(path)
    return [sum(1 for e in events if e.get("name") == name and lo <= e["ts"] < hi) for lo, hi in profiler_steps(events)]


def test_calibrators_left_on():
    """Raw events: 32 aten::histc in each of the 4 steps (8 layers × 4 quantized linears, each input
    quantizer's HistogramCalibrator) beside 32 aten::_scaled_mm: calibration_off is first, its what-if
    within ±35 % of the saving the traces' bare steps measured (median 15.931 → 6.217 ms with
    disable_calib(), validate_pairs.py on pairs.txt), and it is silent once calibration is off. The
    calibrators' range reads are its own, not avoid_sync's."""
    path = recording("heldout14", "ho14_fp8_calibrator_on")
    assert _per_step(path, "aten::histc") == [32] * 4
    assert _per_step(path, "aten::_scaled_mm") == [32] * 4
    found = analysed_file(path)
    table = found.analysis.ranks[0].patterns.calibration
    assert table[calibration.CB_CALIBRATORS].tolist() == [32] * 4
    assert found.suggestions[0].id == "calibration_off"
    assert found.suggestions[0].per_step_us / 1000 == pytest.approx(15.931 - 6.217, rel=0.35)
    assert "avoid_sync" not in {s.id for s in found.suggestions}
    after = analysed_file(recording("heldout14", "ho14_fp8_calibrator_on_calib_off"))
    assert not len(after.analysis.ranks[0].patterns.calibration)
    assert "calibration_off" not in {s.id for s in after.suggestions}


def test_weight_norm_recomputed_at_inference():
    """Raw events: 312 aten::_weight_norm in each of the 4 steps (78 weight-normed convolutions × 4
    chunks) and no backward: remove_weight_norm fires, its what-if within ±35 % of the traces' bare
    saving (median 22.977 → 16.447 ms with the parametrizations removed), silent on that variant."""
    path = recording("heldout14", "ho14_hifigan_weight_norm")
    assert _per_step(path, "aten::_weight_norm") == [312] * 4
    found = analysed_file(path)
    assert found.analysis.ranks[0].patterns.weight_norm[weight_norm.WN_NORMS].tolist() == [312] * 4
    mine = [s for s in found.suggestions if s.id == "remove_weight_norm"]
    assert mine and mine[0].per_step_us / 1000 == pytest.approx(22.977 - 16.447, rel=0.35)
    after = analysed_file(recording("heldout14", "ho14_hifigan_weight_norm_remove_weight_norm"))
    assert "remove_weight_norm" not in {s.id for s in after.suggestions}


def _norms_trace(path: Path, backward: bool) -> Path:
    """One ProfilerStep: 6 top-level aten::_weight_norm calls 100 µs apart, each launching a 4 µs kernel
    (call 10 µs, op 30 µs); with `backward`, an autograd engine call launching a kernel after them."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#0", 0, 10_000)
    for i in range(6):
        t = 100 + 100 * i
        ext = b.op("aten::_weight_norm", t, 30)
        b.launch(t + 5, 10, "void weight_norm_fwd_first_dim_kernel", t + 20, 4, ext=ext)
    if backward:
        ext = b.op("autograd::engine::evaluate_function: ConvolutionBackward0", 1000, 50)
        b.launch(1005, 10, "void conv_bwd_kernel", 1020, 20, ext=ext)
    return b.write(path)


def _norms(path: Path) -> weight_norm.WeightNorms:
    rank = load_trace(path).ranks[0]
    steps = StepsOf.of(rank)
    top = TopLevel.of(rank)
    return weight_norm.find_weight_norms(rank, step_sequences(rank, steps, top), top)


def test_weight_norm_by_hand(tmp_path):
    """Synthetic: 6 recomputations in an inference step: one row, 6 norms, their 6 launch calls, 6 × 30 µs
    of op time, 6 × 4 µs of kernel time. The same step with a backward is training: no row."""
    found = _norms(_norms_trace(tmp_path / "a.json", backward=False))
    assert found.table.to_dict("records") == [{weight_norm.WN_STEP: 0, weight_norm.WN_NORMS: 6, weight_norm.WN_CALLS: 6,
                                               weight_norm.WN_HOST_US: pytest.approx(180.0),
                                               weight_norm.WN_GPU_US: pytest.approx(24.0)}]
    assert int(found.calls.sum()) == 6
    assert not len(_norms(_norms_trace(tmp_path / "b.json", backward=True)).table)


def _calibration_trace(path: Path, quantized: bool) -> Path:
    """One ProfilerStep, 3 times: a calibrator on a [4, 256] input (aten::amax on it 20 µs, aten::histc on
    it 30 µs, aten::add_ of two [2048] histograms 10 µs, each launching a 3 µs kernel; 10 µs apart), then
    the layer's GEMM (aten::_scaled_mm with `quantized`, else aten::mm) and an aten::relu on [4, 256]."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#0", 0, 10_000)
    x = [4, 256]
    for i in range(3):
        t = 100 + 1000 * i
        for j, (name, dims) in enumerate((("aten::amax", [x]), ("aten::histc", [x, [], [], []]),
                                          ("aten::add_", [[2048], [2048], []]),
                                          ("aten::_scaled_mm" if quantized else "aten::mm", [x, [256, 256]]),
                                          ("aten::relu", [x]))):
            at = t + 100 * j
            ext = b.op(name, at, 20 if j == 0 else 30 if j == 1 else 10, **{"Input Dims": dims})
            b.launch(at + 2, 5, f"void kernel_{j}", at + 10, 3, ext=ext)
    return b.write(path)


def _calibration(path: Path) -> calibration.Calibration:
    rank = load_trace(path).ranks[0]
    top = TopLevel.of(rank)
    return calibration.find_calibration(rank, step_sequences(rank, StepsOf.of(rank), top), top)


def test_calibration_by_hand(tmp_path):
    """Synthetic: 3 calibrators in a step that runs _scaled_mm: one row, 3 calibrators of amax → histc → add_
    (the GEMM reads a weight, the relu follows it: neither joins), 9 launch calls, a host span of 210 µs
    each (amax's start to add_'s end, 200 + 10 µs): 630 µs, and 9 × 3 µs of kernels. With aten::mm
    instead (calibrating with quantization off: a calibration run) nothing is found."""
    found = _calibration(_calibration_trace(tmp_path / "a.json", quantized=True))
    assert found.table.to_dict("records") == [{calibration.CB_STEP: 0, calibration.CB_CALIBRATORS: 3,
                                               calibration.CB_OPS: "amax → histc → add_", calibration.CB_CALLS: 9,
                                               calibration.CB_SYNCS: 0, calibration.CB_HOST_US: pytest.approx(630.0),
                                               calibration.CB_GPU_US: pytest.approx(27.0)}]
    assert int(found.calls.sum()) == 9
    assert not len(_calibration(_calibration_trace(tmp_path / "b.json", quantized=False)).table)


def test_window_rewritten_at_every_token():
    """Raw events: in each of the 4 steps (4 tokens × 4 layers) 16 decoding SDPA calls over keys of
    16×16×4096×128, and for K and V per call an aten::index gather, an aten::zero_ and an aten::add_ of
    that whole shape: 96 rewrites. ring_buffer_cache is first and silent on the ring-buffer variant; its
    what-if is within ±35 % of the plain runs' saving (42.798 → 12.925 ms, the first call's
    heldout14_runs.md) and +37 % of the traces' bare one (38.652 → 15.525 ms): the variant as written
    builds a slot index per layer on the host, which the rewrites' removal does not add."""
    path = recording("heldout14", "ho14_swa_roll_cache")
    cache = [16, 16, 4096, 128]
    events = raw_events(path)
    for name, dims, count in (("aten::scaled_dot_product_attention", None, 16), ("aten::index", [cache, []], 32),
                              ("aten::zero_", [cache], 32), ("aten::add_", [cache, cache, []], 32)):
        assert [sum(1 for e in events if e.get("name") == name and lo <= e["ts"] < hi
                    and (dims is None or e["args"].get("Input Dims") == dims))
                for lo, hi in profiler_steps(events)] == [count] * 4
    found = analysed_file(path)
    table = found.analysis.ranks[0].patterns.window_shift
    assert table[window_shift.WS_REWRITES].tolist() == [96] * 4
    assert table[window_shift.WS_ATTENTION].tolist() == [16] * 4
    assert found.suggestions[0].id == "ring_buffer_cache"
    assert found.suggestions[0].per_step_us / 1000 == pytest.approx(42.798 - 12.925, rel=0.35)
    assert found.suggestions[0].per_step_us / 1000 > 1.35 * (38.652 - 15.525)
    # the RoPE chain's segments end at the gather: none of their kernels' ops reads the whole cache
    rank = load_trace(path).ranks[0]
    in_chain = found.analysis.ranks[0].patterns.in_llm_chain
    op = rank.gpu[tables.GPU_OP].to_numpy()
    read = [rank.op_inputs(int(i)).get(tables.OP_INPUT_DIMS) or [] for i in op[in_chain] if i >= 0]
    assert read and not any(cache in dims for dims in read)
    after = analysed_file(recording("heldout14", "ho14_swa_roll_cache_ring_buffer"))
    assert not len(after.analysis.ranks[0].patterns.window_shift)
    assert "ring_buffer_cache" not in {s.id for s in after.suggestions}


def _cache_trace(path: Path, write: bool) -> Path:
    """One ProfilerStep, 4 times: two aten::index_select gathers of the whole 2×4×128×64 cache (beam
    search's reorder) and, with `write`, an aten::zero_ of it, then a decoding SDPA call (1 query over its
    128 keys); each op 20 µs launching a 5 µs kernel, 100 µs apart."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#0", 0, 10_000)
    cache = [2, 4, 128, 64]
    t = 100
    for _ in range(4):
        ops = [("aten::index_select", [cache, [], [2]])] * 2 + ([("aten::zero_", [cache])] if write else [])
        ops.append(("aten::scaled_dot_product_attention", [[2, 4, 1, 64], cache, cache]))
        for name, dims in ops:
            ext = b.op(name, t, 20, **{"Input Dims": dims})
            b.launch(t + 2, 5, "void some_kernel", t + 10, 5, ext=ext)
            t += 100
    return b.write(path)


def test_cache_rewrite_needs_an_in_place_write(tmp_path):
    """Synthetic: gathers of the whole cache alone (a reorder) are no window shift; with a zero_ of it in
    each of the 4 decoding calls' stretch: one row of 4 attention calls and 12 rewrites, 12 × 5 µs of kernels."""
    def found(path: Path) -> window_shift.WindowShifts:
        rank = load_trace(path).ranks[0]
        top = TopLevel.of(rank)
        return window_shift.find_window_shifts(rank, step_sequences(rank, StepsOf.of(rank), top), top)

    assert not len(found(_cache_trace(tmp_path / "a.json", write=False)).table)
    table = found(_cache_trace(tmp_path / "b.json", write=True)).table
    assert table[[window_shift.WS_ATTENTION, window_shift.WS_REWRITES]].to_dict("records") == [
        {window_shift.WS_ATTENTION: 4, window_shift.WS_REWRITES: 12}]
    assert table[window_shift.WS_GPU_US].tolist() == [pytest.approx(60.0)]


def test_linear_over_pair_concatenation():
    """Raw events: in each of the 4 steps one aten::cat of two 8×384×384×512 tensors (the broadcast
    residue views) and one Linear on 8×384×384×1024 with a 256×1024 weight (two aten::linear events:
    autocast's dispatch runs one inside the other): split_pair_linear is
    first, its what-if within ±35 % of the saving of the split weight in the traces' bare steps (median
    19.565 → 8.628 ms) and in the first call's plain runs (22.486 → 11.198 ms), silent on that variant."""
    path = recording("heldout14", "ho14_contact_pair_concat")
    events = raw_events(path)
    for name, dims, count in (("aten::cat", [[[8, 384, 384, 512], [8, 384, 384, 512]], []], 1),
                              ("aten::linear", [[8, 384, 384, 1024], [256, 1024], [256]], 2)):
        assert [sum(1 for e in events if e.get("name") == name and lo <= e["ts"] < hi and e["args"].get("Input Dims") == dims)
                for lo, hi in profiler_steps(events)] == [count] * 4
    found = analysed_file(path)
    table = found.analysis.ranks[0].patterns.pair_concat
    assert table[pair_concat.PC_CALLS].tolist() == [1] * 4
    assert table[pair_concat.PC_FEATURES].tolist() == [1024] * 4 and table[pair_concat.PC_OUT].tolist() == [256] * 4
    assert found.suggestions[0].id == "split_pair_linear"
    saving = found.suggestions[0].per_step_us / 1000
    assert saving == pytest.approx(19.565 - 8.628, rel=0.35)
    assert saving == pytest.approx(22.486 - 11.198, rel=0.35)
    after = analysed_file(recording("heldout14", "ho14_contact_pair_concat_split_weight"))
    assert not len(after.analysis.ranks[0].patterns.pair_concat)
    assert "split_pair_linear" not in {s.id for s in after.suggestions}


def test_ema_loop_without_the_following_statement():
    """The EMA loop over state_dict() (213 parameters + 147 BatchNorm buffers = 360 tensors, the script's
    docstring: two mul, an add and a copy_ per tensor) is followed on its thread by the loss accumulation's
    one aten::add_; that call no longer caps the loop's iterations at 1: 360 tensors, 1,440 calls a step."""
    path = recording("heldout14", "ho14_effnet_ema_loop")
    loops = analysed_file(path).analysis.ranks[0].patterns.foreach_loops
    assert loops[foreach.FL_TENSORS].tolist() == [360] * 4
    assert loops[foreach.FL_CALLS].tolist() == [1440] * 4
    assert "aten::add_" not in set(loops[foreach.FL_OPS])


def test_trimmed_drops_the_ends_called_less_than_a_loop():
    """Synthetic: a run of 20 × (mul_, add_) with one copy_ before it and one div_ after it: the ends go,
    a single op in the middle stays (it is inside the loop's run)."""
    names = np.array(["aten::copy_"] + ["aten::mul_", "aten::add_"] * 10 + ["aten::sqrt_"]
                     + ["aten::mul_", "aten::add_"] * 10 + ["aten::div_"], dtype=object)
    run = list(range(len(names)))
    assert foreach._trimmed(run, names) == run[1:-1]
    assert foreach._trimmed([0], names) == []
