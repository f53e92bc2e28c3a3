"""The twenty-third held-out set (H100, sample_traces/heldout23/): its first run's answers and the
changes made since, against the recordings' own unprofiled steps and the raw events (docs/validation.md)."""

from __future__ import annotations

import itertools

from recorded import analysed, profiler_steps, raw_events, recording, set_tests

SET = "heldout23"
# first and within ±35 % of the bare saving at the first run (the tag's code): one backward over the
# summed task losses (32.2 against 33.9 ms), F.conv2d for unfold + matmul (55.4 against 57.9 ms),
# vmap(grad) for the per-example loop (158.6 against 162.0 ms). The W8A8 passes compiled are first and
# within too (21.7 against 23.9 ms), but fuse_elementwise still fires on the fixed variant (0.60 ms:
# the eager encoder's own norm and activation chains, outside the compiled qlinear)
FIRST_AND_WITHIN = ["ho23_protein_multitask_three_backwards", "ho23_microscopy_denoiser_unfold_conv",
                    "ho23_ehr_dpsgd_per_sample_loop"]
test_first_suggestion_is_the_fix_and_its_saving_is_measured, test_projection_within_15_percent_of_the_bare_step = \
    set_tests(SET, FIRST_AND_WITHIN)


def test_repeat_kv_copies_feed_every_decode_attention():
    """rag_decoder_repeat_kv: per step the raw events hold 256 aten::copy_ of 5-D [8, 4, 4, S, 128]
    inputs (keys and values of 8 layers at 16 tokens) and 128 SDPA calls with keys [8, 16, S, 128] and
    enable_gqa False; the detector's row per step says the same. Its what-if (13.4 ms of the 689 ms
    projected step, 1.9 %) is under the 2 % floor: the step waits on cuDNN's per-length plan builds
    (attention_plans, first), the copies run under them."""
    path = recording(SET, "ho23_rag_decoder_repeat_kv")
    events = raw_events(path)
    for lo, hi in profiler_steps(events):
        ops = [e for e in events if e.get("cat") == "cpu_op" and lo <= e["ts"] < hi]
        copies = [e for e in ops if e["name"] == "aten::copy_" and len(e["args"]["Input Dims"][0]) == 5]
        assert len(copies) == 256 and {tuple(e["args"]["Input Dims"][0][:3]) for e in copies} == {(8, 4, 4)}
        calls = [e for e in ops if e["name"] == "aten::scaled_dot_product_attention"]
        assert len(calls) == 128 and {e["args"]["Concrete Inputs"][7] for e in calls} == {"False"}
    found = analysed(path)
    table = found.analysis.ranks[0].patterns.gqa_expand
    assert set(table["calls"]) == {128} and set(table["copies"]) == {256} and set(table["queries"]) == {1}
    assert [s.id for s in found.suggestions] == ["attention_plans"]


def test_compiled_helpers_named_in_the_cuda_graph_advice():
    """trajectory_compiled_helpers: per step the raw events hold 496 Torch-Compiled Region ranges, none
    inside another (rms_norm and swiglu compiled one by one, called from the eager model): no graph
    break, and the CUDA-graph advice names compiling the model instead of its helpers."""
    path = recording(SET, "ho23_trajectory_compiled_helpers")
    events = raw_events(path)
    for lo, hi in profiler_steps(events):
        regions = sorted((e for e in events if e.get("ph") == "X" and lo <= e["ts"] < hi
                          and str(e.get("name", "")).startswith("Torch-Compiled Region")), key=lambda e: e["ts"])
        assert len(regions) == 496
        assert not any(b["ts"] < a["ts"] + a["dur"] for a, b in itertools.pairwise(regions))
    found = analysed(path)
    assert not len(found.analysis.ranks[0].patterns.graph_breaks)
    top = found.suggestions[0]
    assert top.id == "cuda_graphs" and top.title.startswith("Compile the model, not 496 helper calls per step")
    fixed = analysed(recording(SET, "ho23_trajectory_compiled_helpers_compile_whole_model")).suggestions[0]
    assert fixed.id == "cuda_graphs" and "helper" not in fixed.title  # one compiled call per forward now


def test_robot_recordings_hold_pieces_of_the_first_step():
    """robot_dqn_replay_per_transition was recorded before a6ee466: its ProfilerStep#2 and #3 each hold one
    of the first step's 4 updates (Optimizer.step ranges in the raw events: a quarter of #4's and #5's)
    and last under 3 ms against #4 and #5's 121–133 ms, which is why its pair is left out of pairs.txt.
    tests/test_profile_command.py checks the fixed marks."""
    events = raw_events(recording(SET, "ho23_robot_dqn_replay_per_transition"))
    counts, spans = [], []
    for lo, hi in profiler_steps(events):
        counts.append(sum(1 for e in events if e.get("ph") == "X" and lo <= e["ts"] < hi
                          and str(e.get("name", "")).startswith("Optimizer.step#")))
        spans.append(hi - lo)
    assert counts[2] == counts[3] == 4 * counts[0] == 4 * counts[1] > 0
    assert max(spans[:2]) < 3000 < 100_000 < min(spans[2:])
