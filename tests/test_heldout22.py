"""The twenty-second held-out set (H100, sample_traces/heldout22/): nine of its ten pairs recorded; the first
run's answers, the fixes made since (one-op loops over slices of one tensor, user Triton matmuls whose
weight is read transposed, ensembles at inference), against the recordings' own unprofiled steps and the
raw events (docs/validation.md)."""

from __future__ import annotations

from recorded import analysed, profiler_steps, raw_events, recording, set_tests

SET = "heldout22"
# first and within ±35 % of the bare saving: at the first run (the tag's code) checkpointing dropped
# (6.11 against 6.03 ms), gc.collect() removed (97.4 against 100.9 ms) and int8 tables gathered before
# their dequantisation (12.7 against 11.0 ms); since the fixes below the word pooling (26.0 against
# 27.3 ms), the Triton head (14.4 against 11.3 ms) and the ensemble (22.7 against 21.1 ms)
FIRST_AND_WITHIN = ["ho22_food_vit_grad_checkpointing", "ho22_review_sentiment_gc_collect",
                    "ho22_ctr_int8_tables_full_dequant", "ho22_ner_word_pooling_loop",
                    "ho22_triton_softcap_head_row_order", "ho22_dynamics_ensemble_member_loop"]
test_first_suggestion_is_the_fix_and_its_saving_is_measured, test_projection_within_15_percent_of_the_bare_step = \
    set_tests(SET, FIRST_AND_WITHIN)


def _steps(events: list[dict]) -> list[list[dict]]:
    """The cpu_op events of each ProfilerStep window, in time order."""
    ops = sorted((e for e in events if e.get("cat") == "cpu_op"), key=lambda e: e["ts"])
    return [[e for e in ops if lo <= e["ts"] < hi] for lo, hi in profiler_steps(events)]


def _top(ops: list[dict]) -> list[dict]:
    """The ops of one thread not inside another op (one thread in these recordings' steps)."""
    out: list[dict] = []
    reach = -1.0
    for e in ops:
        if e["ts"] >= reach:
            out.append(e)
            reach = e["ts"] + e["dur"]
    return out


def test_word_pooling_is_one_mean_per_slice_of_one_batch():
    """ner_word_pooling_loop: per step the raw events hold 1,939–2,242 top-level aten::mean calls over
    (n, 768) rows, n from 1 to a few, each right after a top-level aten::select of the one (16, 256, 768)
    batch; the samples detector's row has exactly that many repetitions per step."""
    path = recording(SET, "ho22_ner_word_pooling_loop")
    counts = []
    for ops in _steps(raw_events(path)):
        top = [e for e in _top([e for e in ops if e["tid"] == ops[0]["tid"]])]
        means = [i for i, e in enumerate(top) if e["name"] == "aten::mean"]
        assert all(any(top[j]["name"] == "aten::select" and top[j]["args"]["Input Dims"][0] == [16, 256, 768]
                       for j in range(i - 3, i)) for i in means)
        counts.append(len(means))
    assert all(1900 <= c <= 2300 for c in counts)
    found = analysed(path).analysis.ranks[0].patterns.sample_loops
    steady = found.set_index("step")["samples"].to_dict()
    assert sorted(steady.values()) == sorted(counts[-len(steady):])  # the steady steps: the last ones
    assert set(found["ops"]) == {"mean"}


def test_triton_head_is_a_matmul_against_a_transposed_weight():
    """triton_softcap_head_row_order: the kernel's recorded arguments are x (8192, 2048), W (65536, 2048),
    out (8192, 65536) with M, N, K = 8192, 65536, 2048: 2·M·N·K = 2.199 TFLOP a call, so its roof is
    the bf16 tensor roof (compute-bound), not its arguments' bytes."""
    path = recording(SET, "ho22_triton_softcap_head_row_order")
    call = next(e for e in raw_events(path) if e.get("cat") == "cpu_op" and e["name"] == "softcap_head_kernel")
    assert call["args"]["Input Dims"][:3] == [[8192, 2048], [65536, 2048], [8192, 65536]]
    assert call["args"]["Concrete Inputs"][3:6] == ["8192", "65536", "2048"]
    top = analysed(path).suggestions[0]
    assert top.id == "triton_config"
    evidence = top.evidence[0]
    assert evidence["bound"] == "compute" and evidence["roof"] == "bf16"
    assert "GROUP_SIZE_M" in top.title  # the one-axis grid's program order is named


def test_ensemble_members_stacked_inside_each_rollout_step():
    """dynamics_ensemble_member_loop: per step the raw events hold 25 aten::stack calls (one per rollout
    step), each listing 8 (1024, 50) tensors: 8 members of 5 Linear + 4 SiLU ops. The inference ensemble
    detector's table has 25 forward rows per steady step with 8 members and 9 launching ops each."""
    path = recording(SET, "ho22_dynamics_ensemble_member_loop")
    per_step = []
    for ops in _steps(raw_events(path)):
        stacks = [e for e in ops if e["name"] == "aten::stack"]
        assert all(e["args"]["Input Dims"][0] == [[1024, 50]] * 8 for e in stacks)
        per_step.append(len(stacks))
    assert set(per_step) == {25}
    table = analysed(path).analysis.ranks[0].patterns.ensembles
    assert set(table.groupby("step").size()) == {25}
    assert set(table["members"]) == {8} and set(table["direction"]) == {"forward"}
    assert set(table["launches"]) == {9}
    fixed = analysed(recording(SET, "ho22_dynamics_ensemble_member_loop_stacked_ensemble"))
    assert not len(fixed.analysis.ranks[0].patterns.ensembles)


def test_program_order_named_only_for_a_one_axis_grid():
    """The grouped-order advice needs a one-axis grid (program ids mapped to tiles by the kernel);
    a two-axis grid's ids are already its tile coordinates."""
    from tracekit.suggestions.rules_triton import _one_axis

    assert _one_axis("[65536, 1, 1]") and not _one_axis("[64, 512, 1]") and not _one_axis("[1, 1, 1]")


def test_reduce_overhead_warmups_are_not_host_preprocessing():
    """smiles_cudagraph_every_shape (recorded a session after the rest): per step the raw events' 16
    Torch-Compiled Region ranges cover ≥ 98 % of the ProfilerStep (a new shape per call: each call warms
    up or records a CUDA graph, and cuDNN builds a plan per new length inside it). The host gaps there are
    torch.compile's own work, not preprocessing a DataLoader could take over: preprocess_off_thread stays
    silent (it said 149 ms a step before), and attention_plans, first, leads with padding to a few shapes."""
    path = recording(SET, "ho22_smiles_cudagraph_every_shape")
    events = raw_events(path)
    for lo, hi in profiler_steps(events):
        regions = [e for e in events if e.get("ph") == "X" and lo <= e["ts"] < hi
                   and str(e.get("name", "")).startswith("Torch-Compiled Region")]
        assert len(regions) == 16 and sum(e["dur"] for e in regions) >= 0.98 * (hi - lo)
    found = analysed(path)
    assert [s.id for s in found.suggestions] == ["attention_plans"]
    # the plans are built inside the compiled model (the regions above): padding comes first in the title
    assert found.suggestions[0].title.startswith("Pad the inputs to a few shapes: inside the compiled model")
    eager = analysed(recording(SET, "ho22_asr_decoder_cross_kv_recompute")).suggestions[0]  # an eager decoder's plans
    assert eager.id == "attention_plans" and eager.title.startswith("Use an SDPA backend without per-shape plans")
