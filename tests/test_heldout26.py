"""The twenty-sixth held-out set (H100, sample_traces/heldout26/): its first run's answers against the
recordings' own unprofiled steps (docs/validation.md)."""

from __future__ import annotations

from recorded import bare_ms, recording, set_tests

SET = "heldout26"
# first and within ±35 % of the bare saving at the first run (the tag's code, the same analysis code as
# this commit's): torch.cuda.empty_cache() at the end of every step (empty_cache 9.76 against 11.08 ms)
FIRST_AND_WITHIN = ["ho26_rooftop_solar_unet_empty_cache"]
# projected 388.3 ms against bare steps of 476.7–483.9 ms (−20 %): the one recording of the set outside ±15 %
PROJECTION_MISSED = ("ho26_code_completion_dequantized_int4_decode_int4_tinygemm",)
test_first_suggestion_is_the_fix_and_its_saving_is_measured, test_projection_within_15_percent_of_the_bare_step = \
    set_tests(SET, FIRST_AND_WITHIN, PROJECTION_MISSED)


def test_two_labelled_fixes_measured_slower() -> None:
    """The labelled variants of math_tutor_full_cache_attention (the filled prefix sliced: a new K/V length at
    every token) and code_completion_dequantized_int4_decode (tinygemm int4 kernels) were slower than their
    baselines in the recordings' own bare steps, so neither pair can credit its rule (docs/validation.md)."""
    for before, after in (("ho26_math_tutor_full_cache_attention", "ho26_math_tutor_full_cache_attention_filled_prefix_only"),
                          ("ho26_code_completion_dequantized_int4_decode",
                           "ho26_code_completion_dequantized_int4_decode_int4_tinygemm")):
        assert bare_ms(recording(SET, after)) > 1.3 * bare_ms(recording(SET, before))


def test_eager_loss_after_a_compiled_model_is_compiled_with_it() -> None:
    """short_video_sasrec_uncompiled_loss: the model is compiled (Torch-Compiled Region events in the raw
    events), its cross-entropy over 8,192 × 65,536 logits is not: per recorded step the raw events hold one
    `cunn_SoftMaxForward` and one `cunn_SoftMaxBackward` (log_softmax and its backward, 5.6 ms of kernels) among
    the loss's eager kernels. No LLM block (RMSNorm, SwiGLU, RoPE) is there for fused_llm_kernels, so
    fuse_elementwise counts the loss chain (rules_llm.loss_chains) and says to compile the loss too: first,
    within ±35 % of the bare saving with the loss inside the compiled function (11.35 → 5.83 ms), silent there."""
    from recorded import analysed, check_first_and_within, profiler_steps, raw_events

    before = recording(SET, "ho26_short_video_sasrec_uncompiled_loss")
    events = raw_events(before)
    assert any(str(e.get("name", "")).startswith("Torch-Compiled Region") for e in events)
    steps = len(profiler_steps(events))
    softmax = [k["name"] for k in events if k.get("cat") == "kernel" and "SoftMax" in k["name"]]
    assert steps == 4 and len(softmax) == 2 * steps
    assert sum("cunn_SoftMaxForward" in n for n in softmax) == sum("cunn_SoftMaxBackward" in n for n in softmax) == steps
    first = analysed(before).suggestions[0]
    assert first.id == "fuse_elementwise" and first.title.startswith("Compile the loss too")
    assert any(e.get("chain") == "cross_entropy" for e in first.evidence)
    check_first_and_within(SET, "ho26_short_video_sasrec_uncompiled_loss", "ho26_short_video_sasrec_uncompiled_loss_loss_in_graph",
                           "fuse_elementwise")
