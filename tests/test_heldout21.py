"""The twenty-first held-out set (H100, sample_traces/heldout21/): all ten pairs recorded; the first run's
answers, the fixes made since (gradients zeroed instead of freed, Triton passes over one tensor, int8
weights quantized per call, loops over a counter's values, rounds of repeated forwards), against the
recordings' own unprofiled steps and the raw events."""

from __future__ import annotations

import pytest
from recorded import (
    analysed,
    bare_ms,
    check_first_and_within,
    check_projection,
    pairs_of,
    profiler_steps,
    raw_events,
    recording,
)

SET = "heldout21"
PAIRS = pairs_of(SET)
# first and within ±35 % of the bare saving: the two lower_precision pairs at the first run
# (docs/validation.md), the other three labelled pairs since the fixes below
FIRST_AND_WITHIN = ["ho21_dna_encoder_fp32_attention", "ho21_nerf_mlp_fp32_highest",
                    "ho21_int8_ranker_requantize_weights", "ho21_segmentation_per_class_iou_loop"]
# pairs labelled `none` at the first run (no rule named the change then) that a rule added since names
NEW_RULES = {"ho21_scrna_autoencoder_zero_grad": "grads_to_none",
             "ho21_triton_retrieval_softmax_passes": "fuse_triton_passes"}
# codec_lm_cpu_position's baseline projects 35.4 ms against 30.1 ms bare (+18 %): its 95 pageable copies
# and stream syncs a step under CUDA-graph replays (docs/validation.md); every other recording is within
PROJECTION_MISSES = {"ho21_codec_lm_cpu_position"}


@pytest.mark.parametrize("before", FIRST_AND_WITHIN)
def test_first_suggestion_is_the_fix_and_its_saving_is_measured(before):
    """The labelled rule first on the baseline, within ±35 % of the bare saving, silent after."""
    check_first_and_within(SET, before, *PAIRS[before])


@pytest.mark.parametrize("before", sorted(NEW_RULES))
def test_rules_added_since_name_the_unlabelled_fixes(before):
    """The rule added since the first run is first on the baseline, within ±35 % of the bare saving and
    silent on the fixed variant (the label stays `none`: no rule named it at the first run)."""
    check_first_and_within(SET, before, PAIRS[before][0], NEW_RULES[before])


@pytest.mark.parametrize("name", [n for before, (after, _) in PAIRS.items() for n in (before, after)
                                  if n not in PROJECTION_MISSES])
def test_projection_within_15_percent_of_the_bare_step(name):
    """Every recording's projected unprofiled step against the median of its own bare steps."""
    check_projection(SET, name)


def _per_step(events: list[dict], picked: list[dict]) -> list[int]:
    return [sum(lo <= e["ts"] < hi for e in picked) for lo, hi in profiler_steps(events)]


def test_zero_grad_zeroes_twelve_gradients_that_backward_then_adds_into():
    """scrna_autoencoder_zero_grad: per ProfilerStep the raw events hold one aten::_foreach_zero_ over 12
    tensors (6 Linears' weights and biases) and 12 AccumulateGrad calls, each with an aten::add_ inside:
    tracekit's table says 12 zeroed and 12 in-place accumulations in every step, and grads_to_none's
    what-if (1.64 ms) is within 2 % of the 1.67 ms set_to_none=True saved (bare)."""
    path = recording(SET, "ho21_scrna_autoencoder_zero_grad")
    events = raw_events(path)
    zeroes = [e for e in events if e.get("ph") == "X" and e.get("name") == "aten::_foreach_zero_"]
    assert _per_step(events, zeroes) == [1] * 4 and {len(e["args"]["Input Dims"][0]) for e in zeroes} == {12}
    cpu = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    acc = [e for e in cpu if e["name"] == "torch::autograd::AccumulateGrad"]
    adds = [e for e in cpu if e["name"] == "aten::add_" and any(
        a["tid"] == e["tid"] and a["ts"] <= e["ts"] and e["ts"] + e["dur"] <= a["ts"] + a["dur"] for a in acc)]
    assert _per_step(events, acc) == [12] * 4 and _per_step(events, adds) == [12] * 4
    table = analysed(path).analysis.ranks[0].patterns.zeroed_grads
    assert table["zeroed"].tolist() == [12] * 4 and table["adds"].tolist() == [12] * 4
    saving = bare_ms(path) - bare_ms(recording(SET, "ho21_scrna_autoencoder_zero_grad_grads_to_none"))
    assert analysed(path).suggestions[0].per_step_us / 1000 == pytest.approx(saving, rel=0.05)


def test_three_triton_passes_over_the_score_matrix():
    """triton_retrieval_softmax_passes: per ProfilerStep the raw events hold 32 launches each of row_max,
    row_sumexp and row_normalise, all reading the [4096, 8192] scores first. The detector finds 32 runs
    of the three a step; the fused kernel is taken at row_normalise's time (85 µs of the 180 µs a run)."""
    path = recording(SET, "ho21_triton_retrieval_softmax_passes")
    events = raw_events(path)
    for name in ("row_max", "row_sumexp", "row_normalise"):
        launches = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op" and e["name"] == name]
        assert _per_step(events, launches) == [32] * 4
        assert {str(e["args"]["Input Dims"][0]) for e in launches} == {"[4096, 8192]"}
    table = analysed(path).analysis.ranks[0].patterns.triton_passes
    steady = table[table["step"] >= 3]
    assert steady["runs"].tolist() == [32] * 3 and steady["kernels"].tolist() == [96] * 3
    assert steady["chain"].unique().tolist() == ["row_max → row_sumexp → row_normalise"]


def test_the_class_loop_counts_through_150_values():
    """segmentation_per_class_iou_loop: 300 aten::eq per ProfilerStep (pred == c and gt == c), their
    scalar Concrete Input running 0..149; the samples detector finds one loop of 150 repetitions a step,
    marked as a counter loop (one pass does every value's work once)."""
    path = recording(SET, "ho21_segmentation_per_class_iou_loop")
    events = raw_events(path)
    eq = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op" and e["name"] == "aten::eq"]
    assert _per_step(events, eq) == [300] * 4
    assert sorted({int(e["args"]["Concrete Inputs"][1]) for e in eq}) == list(range(150))
    table = analysed(path).analysis.ranks[0].patterns.sample_loops
    assert table["samples"].tolist() == [150] * 4 and table["counter"].all()


def test_weights_quantized_to_int8_before_every_int_mm():
    """int8_ranker_requantize_weights: 72 aten::_int_mm per ProfilerStep (24 Linears × 3 calls), each after
    a cast of its 2-D weight to int8 (an aten::copy_ to `signed char`); convert_weights_once counts the
    72 GEMM calls a step."""
    path = recording(SET, "ho21_int8_ranker_requantize_weights")
    events = raw_events(path)
    mm = [e for e in events if e.get("ph") == "X" and e.get("name") == "aten::_int_mm"]
    casts = [e for e in events if e.get("ph") == "X" and e.get("name") == "aten::copy_"
             and (e["args"].get("Input type") or [None])[0] == "signed char"
             and sorted((e["args"].get("Input Dims") or [[]])[0]) == [2048, 8192]]
    assert _per_step(events, mm) == [72] * 4 and _per_step(events, casts) == [72] * 4
    e = analysed(path).suggestions[0].evidence
    assert sum(row["calls_per_step"] for row in e) == 72 and {row["to"] for row in e} == {"signed char"}


def test_classifier_free_guidance_rounds_are_found():
    """dit_cfg_two_passes: 12 denoising rounds a step, each the same forward twice (conditional and null
    class) on [8, 4, 32, 32] latents, then the guidance update: the requests detector finds 2 forwards in
    each of 12 rounds, and batch_requests prices one forward on both (37.96 ms) within ±35 % of the 39.27 ms
    the batched call saved (bare)."""
    before = recording(SET, "ho21_dit_cfg_two_passes")
    table = analysed(before).analysis.ranks[0].patterns.requests
    assert table["requests"].tolist() == [2] * 4 and table["rounds"].tolist() == [12] * 4
    saving = bare_ms(before) - bare_ms(recording(SET, "ho21_dit_cfg_two_passes_batched_cfg"))
    found = {s.id: s for s in analysed(before).suggestions}
    assert found["batch_requests"].per_step_us / 1000 == pytest.approx(saving, rel=0.35)
