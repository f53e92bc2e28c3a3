"""The twentieth held-out set (H100, sample_traces/heldout20/): all ten pairs recorded; the first run's
answers against the recordings' own unprofiled steps, and the raw events behind the misses it showed."""

from __future__ import annotations

from recorded import analysed, profiler_steps, raw_events, recording, set_tests

SET = "heldout20"
# first, within ±35 % of the bare saving and silent after, at the first run (docs/validation.md; the
# pairs and their labels: sample_traces/heldout20/pairs.txt); retinanet's fuse_elementwise is first and
# within (8.09 against 8.67 ms) but fires again on the compiled variant
FIRST_AND_WITHIN = ["ho20_weather_pageable_batches", "ho20_chat_decode_cat_kv_cache",
                    "ho20_vqvae_broadcast_distances", "ho20_code_lm_fp32_weights_autocast"]
test_first_suggestion_is_the_fix_and_its_saving_is_measured, test_projection_within_15_percent_of_the_bare_step = \
    set_tests(SET, FIRST_AND_WITHIN)


def test_scale_reads_are_host_syncs_the_model_counts():
    """int8 serving that reads each Linear's activation scale with `.tolist()`: the raw events hold 144
    cudaStreamSynchronize calls per ProfilerStep (48 Linears × 3 calls), and tracekit's sync table the
    same per steady step. The first run left avoid_sync out: each sync waits 2-4 µs (the launch-bound
    GPU is barely behind), and the what-if only removes the waits, where keeping the scales on the
    device saved 6.7 ms a step (34.2 → 27.5 ms bare): the reads' own host time (docs/validation.md)."""
    path = recording(SET, "ho20_int8_bert_scale_item")
    events = raw_events(path)
    syncs = [e for e in events if e.get("ph") == "X" and e.get("name") == "cudaStreamSynchronize"]
    assert [sum(lo <= e["ts"] < hi for e in syncs) for lo, hi in profiler_steps(events)] == [144] * 4
    table = analysed(path).analysis.ranks[0].patterns.syncs
    steady = table[table["step"].isin([2, 3, 4, 5])]
    assert steady.groupby("step").size().tolist() == [144] * 4
    assert steady["wait_us"].max() < 25.0
