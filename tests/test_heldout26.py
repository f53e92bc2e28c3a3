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


def test_scores_ranked_on_the_host_are_ranked_on_the_gpu() -> None:
    """patent_search_host_topk: per recorded step the raw events hold one device-to-host copy of 134,217,728
    bytes (16 × 2,097,152 float32 scores) and, after it on the same thread, an `aten::topk` on [16, 2097152]
    that no runtime call runs under (a CPU op). reduce_on_gpu prices the copy and the host top-k less one
    read of the scores on the GPU: first, within ±35 % of the bare saving with the top-k on the GPU
    (208.5 → 3.5 ms), ahead of pinned_memory (which prices the copy only), silent on that variant."""
    from recorded import analysed, check_first_and_within, raw_events

    before = recording(SET, "ho26_patent_search_host_topk")
    events = raw_events(before)
    copies = [e for e in events if e.get("cat") == "gpu_memcpy" and "DtoH" in e["name"] and e["args"].get("bytes", 0) > 1 << 24]
    topk = [e for e in events if e.get("name") == "aten::topk" and e["args"]["Input Dims"][0] == [16, 2097152]]
    runtime = [e for e in events if e.get("cat") == "cuda_runtime"]
    assert len(copies) == len(topk) == 4 and {e["args"]["bytes"] for e in copies} == {134_217_728}
    assert not any(t["ts"] <= c["ts"] < t["ts"] + t["dur"] and c["tid"] == t["tid"] for t in topk for c in runtime)
    ids = [s.id for s in analysed(before).suggestions]
    assert ids.index("reduce_on_gpu") < ids.index("pinned_memory")
    check_first_and_within(SET, "ho26_patent_search_host_topk", "ho26_patent_search_host_topk_device_topk", "reduce_on_gpu")
