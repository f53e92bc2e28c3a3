"""The twentieth held-out set (H100, sample_traces/heldout20/): all ten pairs recorded; the first run's
answers against the recordings' own unprofiled steps, and the raw events behind the misses it showed."""

from __future__ import annotations

import bisect

import pytest
from recorded import analysed, bare_ms, profiler_steps, raw_events, recording, set_tests

SET = "heldout20"
# first, within ±35 % of the bare saving and silent after (docs/validation.md; the pairs and their
# labels: sample_traces/heldout20/pairs.txt): four at the first run, int8_bert since the value reads'
# what-if (its host work, not only the waits); retinanet's fuse_elementwise is first and within (8.09
# against 8.67 ms) but fires again on the compiled variant
FIRST_AND_WITHIN = ["ho20_weather_pageable_batches", "ho20_chat_decode_cat_kv_cache",
                    "ho20_vqvae_broadcast_distances", "ho20_code_lm_fp32_weights_autocast",
                    "ho20_int8_bert_scale_item"]
test_first_suggestion_is_the_fix_and_its_saving_is_measured, test_projection_within_15_percent_of_the_bare_step = \
    set_tests(SET, FIRST_AND_WITHIN)


def test_scale_reads_are_host_syncs_the_model_counts():
    """int8 serving that reads each Linear's activation scale with `.tolist()`: the raw events hold 144
    cudaStreamSynchronize calls per ProfilerStep (48 Linears × 3 calls), and tracekit's sync table the
    same per steady step. Each waits 2-4 µs (the launch-bound GPU is barely behind): the first run's
    what-if removed only the waits and left avoid_sync out, where keeping the scales on the device saved
    6.7 ms a step (34.2 → 27.5 ms bare): the reads' own host work (docs/validation.md)."""
    path = recording(SET, "ho20_int8_bert_scale_item")
    events = raw_events(path)
    syncs = [e for e in events if e.get("ph") == "X" and e.get("name") == "cudaStreamSynchronize"]
    assert [sum(lo <= e["ts"] < hi for e in syncs) for lo, hi in profiler_steps(events)] == [144] * 4
    table = analysed(path).analysis.ranks[0].patterns.syncs
    steady = table[table["step"].isin([2, 3, 4, 5])]
    assert steady.groupby("step").size().tolist() == [144] * 4
    assert steady["wait_us"].max() < 25.0


def test_each_scale_read_is_a_round_trip_whose_host_work_the_what_if_removes():
    """The same trace: each `.tolist()` is an aten::stack (one cat kernel launch) right before an aten::to
    whose calls are cudaStreamIsCapturing, cudaMemcpyAsync and cudaStreamSynchronize, and the next op
    takes the scale back as a Python float (an aten::mul with a `double` input). From the raw events: 144
    stacks, 144 memcpys and 144 such muls per ProfilerStep. tracekit marks 4 calls per read and every
    read as a round trip, so cuda_graphs and fuse_elementwise wait for avoid_sync."""
    path = recording(SET, "ho20_int8_bert_scale_item")
    events = raw_events(path)
    steps = profiler_steps(events)
    cpu = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"), key=lambda e: e["ts"])
    stacks = [e for e in cpu if e["name"] == "aten::stack"]
    copies = [e for e in events if e.get("ph") == "X" and e.get("name") == "cudaMemcpyAsync"]
    starts = [e["ts"] for e in cpu]
    waits = [e for e in events if e.get("ph") == "X" and e.get("name") == "cudaStreamSynchronize"]
    trips = []  # the first op after each sync that is not a no-op: a mul taking a Python float
    for w in waits:
        i = bisect.bisect_left(starts, w["ts"] + w["dur"])
        while cpu[i]["name"] in ("aten::resolve_conj", "aten::resolve_neg"):
            i += 1
        if cpu[i]["name"] == "aten::mul" and "double" in (cpu[i]["args"].get("Input type") or []):
            trips.append(cpu[i])
    for group in (stacks, copies, trips):
        assert [sum(lo <= e["ts"] < hi for e in group) for lo, hi in steps] == [144] * 4
    rank = analysed(path).analysis.ranks[0]
    group = rank.patterns.sync_read_group
    assert len(set(group[group >= 0].tolist())) == 576 and int((group >= 0).sum()) == 4 * 576
    assert int(rank.patterns.sync_round_trip.sum()) == 576
    ids = [s.id for s in analysed(path).suggestions]
    assert ids[0] == "avoid_sync" and "cuda_graphs" not in ids and "fuse_elementwise" not in ids


def test_a_per_image_loop_into_one_batch_is_a_sample_loop():
    """cifar_per_sample_augment: each image's crop (a flip for about half) is copied into its slot of the
    batch: from the raw events, 1,024 aten::copy_ of two (3, 32, 32) inputs per ProfilerStep and 491 of
    the 1,024 crops flipped in the step analysed here. The samples detector finds the loop though its body
    varies (flip or not); batch_samples prices it at 13.6 ms, within ±35 % of the 16.3 ms the batched
    gather saved (bare), second behind cuda_graphs (13.8 ms), which nothing measured."""
    path = recording(SET, "ho20_cifar_per_sample_augment")
    events = raw_events(path)
    slots = [e for e in events if e.get("ph") == "X" and e.get("name") == "aten::copy_"
             and (e.get("args") or {}).get("Input Dims") == [[3, 32, 32], [3, 32, 32], []]]
    assert [sum(lo <= e["ts"] < hi for e in slots) for lo, hi in profiler_steps(events)] == [1024] * 4
    loops = analysed(path).analysis.ranks[0].patterns.sample_loops
    assert loops["samples"].tolist() == [1024] * 4
    found = {s.id: s for s in analysed(path).suggestions}
    saving = bare_ms(path) - bare_ms(recording(SET, "ho20_cifar_per_sample_augment_batched_gather"))
    assert found["batch_samples"].per_step_us / 1000 == pytest.approx(saving, rel=0.35)
