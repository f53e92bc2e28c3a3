"""The fifteenth held-out set (H100, sample_traces/heldout15/) and the pair recorded for cuDNN plans
(sample_traces/bare/decode_cudnn_plans*): the changes this set showed, against the raw events and the
measured unprofiled steps: a user Triton kernel made anew at each call, cuDNN attention building a
plan for each new sequence length, batch-1 requests whose inputs were staged together, and a
compiled model that Dynamo gave up on and runs eagerly."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from recorded import profiler_steps, raw_events, recording
from shared_analysis import analysed_file
from tracebuilder import TraceBuilder

from tracekit.analyzers.detectors import attention_plans, call_gaps, grad_recording, triton_rebuild
from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.trace.load import load_trace


def _in_steps(path: Path, keep) -> list[list[dict]]:
    """Raw events: per ProfilerStep, the events `keep` accepts that start inside it."""
    events = raw_events(path)
    return [[e for e in events if keep(e) and lo <= e.get("ts", -1) < hi] for lo, hi in profiler_steps(events)]


def test_triton_kernel_made_per_call():
    """Raw events: rope_kernel's 4 launch ops a step each name their own entry of the trace's Triton
    table, entries that all record the same file and line (a @triton.jit inside the launching
    function). define_kernel_once is first, its what-if within ±35 % of the saving the traces' bare
    steps measured (median 21.116 → 5.652 ms with the kernel at module level, validate_pairs.py on
    pairs.txt); on that variant one entry serves every launch and the rule is silent."""
    path = recording("heldout15", "ho15_triton_rope_inner_jit")
    launches = _in_steps(path, lambda e: e.get("cat") == "cpu_op" and e.get("name") == "rope_kernel")
    entries = [[e["args"]["tracekit_user_kernel"] for e in step] for step in launches]
    assert [len(set(x)) for x in entries] == [4] * 4
    with gzip.open(path) as f:
        table = json.load(f)["tracekit"]["triton_kernels"]
    assert {(t["file"], t["line"]) for t in table if t["name"] == "rope_kernel"} == {(table[0]["file"], 57)}
    found = analysed_file(path)
    t = found.analysis.ranks[0].patterns.triton_rebuild
    assert t[triton_rebuild.TR_LAUNCHES].tolist() == [4] * 4 and t[triton_rebuild.TR_OBJECTS].tolist() == [4] * 4
    assert t[triton_rebuild.TR_SITE].iat[0] == "triton_rope_inner_jit.py:57"
    assert found.suggestions[0].id == "define_kernel_once"
    assert found.suggestions[0].per_step_us / 1000 == pytest.approx(21.116 - 5.652, rel=0.35)
    assert "preprocess_off_thread" not in {s.id for s in found.suggestions}  # those gaps are the rebuilds'
    after = analysed_file(recording("heldout15", "ho15_triton_rope_inner_jit_module_kernel"))
    assert not len(after.analysis.ranks[0].patterns.triton_rebuild)
    assert "define_kernel_once" not in {s.id for s in after.suggestions}


def test_cudnn_plan_per_new_length():
    """Raw events of the pair recorded for it: in each of the 6 steps, 4 of the 48 cuDNN attention
    calls (12 layers × 4 tokens) are the first at their K/V length and take over 1 ms, the others
    well under. attention_plans is first, its what-if within ±35 % of the bare saving of the flash /
    memory-efficient backends (median 147.057 → 9.012 ms); the fixed trace runs no cuDNN attention."""
    path = recording("bare", "decode_cudnn_plans")
    calls = _in_steps(path, lambda e: e.get("name") == "aten::_cudnn_attention_forward")
    assert [len(c) for c in calls] == [48] * 6
    assert [sum(e["dur"] >= 1000 for e in c) for c in calls] == [4] * 6
    seen: set[str] = set()
    for step in calls:
        for e in sorted(step, key=lambda e: e["ts"]):
            shape = str(e["args"]["Input Dims"])
            assert (e["dur"] >= 1000) == (shape not in seen)
            seen.add(shape)
    found = analysed_file(path)
    t = found.analysis.ranks[0].patterns.attention_plans
    assert t[attention_plans.AP_BUILDS].tolist() == [4] * 6
    assert found.suggestions[0].id == "attention_plans"
    assert found.suggestions[0].per_step_us / 1000 == pytest.approx(147.057 - 9.012, rel=0.35)
    after_path = recording("bare", "decode_cudnn_plans_fixed")
    assert not any(_in_steps(after_path, lambda e: e.get("name") == "aten::_cudnn_attention_forward"))
    assert "attention_plans" not in {s.id for s in analysed_file(after_path).suggestions}


def test_plan_builds_are_not_preprocessing():
    """heldout15 gpt2_ngram_host: the plan builds (4 a step, 35–53 ms each in the raw events) were
    the host gaps preprocess_off_thread priced at 160 ms of a 186 ms bare step; they are
    attention_plans' now, and read_once (the n-gram ban's per-hypothesis reads) follows it."""
    path = recording("heldout15", "ho15_gpt2_ngram_host")
    slow = _in_steps(path, lambda e: e.get("name") == "aten::_cudnn_attention_forward" and e["dur"] >= 1000)
    assert [len(s) for s in slow] == [4] * 4
    assert min(e["dur"] for s in slow for e in s) > 30_000
    ids = [s.id for s in analysed_file(path).suggestions]
    assert ids[:2] == ["attention_plans", "read_once"] and "preprocess_off_thread" not in ids


def _plans_trace(path: Path) -> Path:
    """A copy launched at 0–10 µs, then two ProfilerSteps of 4 cuDNN attention calls at K/V lengths
    10, 11, 11, 11 then 12, 12, 11, 10: each call after a 20 µs op and 100 µs of host, launching 10 µs
    before its end, 50 µs before the next op; the first call at a length lasts 3000 µs, the others 40."""
    b = TraceBuilder()
    b.launch(0, 10, "copy", 20, 5)
    t = 50.0
    seen: set[int] = set()
    for step, lengths in enumerate(((10, 11, 11, 11), (12, 12, 11, 10))):
        start = t
        for n in lengths:
            b.op("aten::layer_norm", t, 20)
            dur = 40.0 if n in seen else 3000.0
            seen.add(n)
            ext = b.op("aten::_cudnn_attention_forward", t + 100, dur, **{"Input Dims": [[1, 4, 1, 64], [1, 4, n, 64]]})
            b.launch(t + 100 + dur - 10, 10, "cudnn_generated_fort_native_sdpa", t + 100 + dur, 5, ext=ext)
            t += 100 + dur + 50
        b.annotation(f"ProfilerStep#{step}", start, t - start)
    return b.write(path)


def test_plan_builds_by_hand(tmp_path):
    """By hand on _plans_trace: the median call is 40 µs (eight calls, three of 3000 µs); the builds are
    the first calls at 10, 11 (step 0) and 12 (step 1); each one's gap before its launch is 3130 µs or
    more (from the previous launch's end: 50 + 100 + 3000 − 10, less the copy's 10 for the first), so
    its cut is 3000 − 40 = 2960 µs."""
    rank = load_trace(_plans_trace(tmp_path / "plans.json")).ranks[0]
    found = attention_plans.find_attention_plans(rank, StepsOf.of(rank))
    t = found.table
    assert t[attention_plans.AP_BUILDS].tolist() == [2, 1]
    assert t[attention_plans.AP_CALLS].tolist() == [4, 4]
    assert t[attention_plans.AP_MEDIAN_US].tolist() == [40.0, 40.0]
    assert t[attention_plans.AP_HOST_US].tolist() == pytest.approx([2 * 2960.0, 2960.0])
    assert sorted(found.cut_us[found.cut_us > 0].tolist()) == pytest.approx([2960.0] * 3)
    assert found.spans[:, 1] - found.spans[:, 0] == pytest.approx([2960.0] * 3)


def test_requests_staged_together():
    """heldout15 lora_tenant_loop: raw events: before each step's first forward (its first aten::arange,
    the positions) run only two aten::copy_ of [16, 128] (the 16 requests' ids and masks at once) and
    the views they copy from, then 16 batch-1 forwards; batch_requests is first, its what-if
    within ±35 % of the bare saving of one forward of 16 (median 76.854 → 4.983 ms). heldout8
    dit_sampler stages one [1, 4, 32, 32] latent before 10 sampler passes, which depend on each other:
    still no request loop there."""
    path = recording("heldout15", "ho15_lora_tenant_loop")
    for step in _in_steps(path, lambda e: e.get("cat") == "cpu_op"):
        ops = sorted(step, key=lambda e: e["ts"])
        before = ops[:[e["name"] for e in ops].index("aten::arange")]
        assert {e["name"] for e in before} <= {"aten::select", "aten::slice", "aten::as_strided", "aten::copy_"}
        assert [e["args"]["Input Dims"][0] for e in before if e["name"] == "aten::copy_"] == [[16, 128]] * 2
    found = analysed_file(path)
    assert found.analysis.ranks[0].patterns.requests["requests"].tolist() == [16] * 4
    assert found.suggestions[0].id == "batch_requests"
    assert found.suggestions[0].per_step_us / 1000 == pytest.approx(76.854 - 4.983, rel=0.35)
    sampler = analysed_file(recording("heldout8", "ho8_dit_sampler"))
    assert not len(sampler.analysis.ranks[0].patterns.requests)


def test_compiled_model_run_eagerly():
    """heldout15 dino_counter_recompile: raw events: 8 TorchDynamo Cache Lookup a step and no
    Torch-Compiled Region (the frame reached recompile_limit in the warm-up and runs eagerly).
    recompiles is first and priced as the steps compiled, within ±35 % of the bare saving of keeping
    the counter out of forward (median 20.210 → 15.939 ms); fuse_elementwise waits for it. With the
    counter outside, one compiled region runs per call and neither fires."""
    path = recording("heldout15", "ho15_dino_counter_recompile")
    lookups = _in_steps(path, lambda e: e.get("name") == "TorchDynamo Cache Lookup")
    regions = _in_steps(path, lambda e: str(e.get("name", "")).startswith("Torch-Compiled Region"))
    assert [len(x) for x in lookups] == [8] * 4 and not any(regions)
    found = analysed_file(path)
    ids = [s.id for s in found.suggestions]
    assert ids[0] == "recompiles" and "fuse_elementwise" not in ids
    assert found.suggestions[0].per_step_us / 1000 == pytest.approx(20.210 - 15.939, rel=0.35)
    after_path = recording("heldout15", "ho15_dino_counter_recompile_counter_outside")
    assert [len(x) for x in _in_steps(after_path, lambda e: str(e.get("name", "")).startswith("Torch-Compiled Region"))] \
        == [8] * 4
    assert not {"recompiles", "fuse_elementwise"} & {s.id for s in analysed_file(after_path).suggestions}


def test_call_gaps_by_hand(tmp_path):
    """call_gaps.call_gaps by hand: two threads; on thread 1 calls at 0–10, 30–35 and 20–50 (by
    start: 0, 20, 30) give gaps 0, 10 and 0 (30 starts inside 20–50); thread 2's one call, 0."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#0", 0, 100)
    for ts, dur, tid in ((0, 10, 1), (30, 5, 1), (20, 30, 1), (40, 5, 2)):
        b.launch(ts, dur, "k", ts + 60, 1, tid=tid)
    rank = load_trace(b.write(tmp_path / "gaps.json")).ranks[0]
    gaps = call_gaps.call_gaps(rank)
    order = np.argsort(rank.runtime["ts"].to_numpy(), kind="stable")  # the loader shifts the clock
    assert gaps[order].tolist() == [0.0, 10.0, 0.0, 0.0]
    assert np.all(gaps >= 0)


def _seq_rise(path: Path) -> list[int]:
    """Raw events: per ProfilerStep, how far the cpu_ops' recorded autograd sequence numbers rise."""
    out = []
    for step in _in_steps(path, lambda e: e.get("cat") == "cpu_op" and "Sequence number" in e.get("args", {})):
        seqs = [e["args"]["Sequence number"] for e in step]
        out.append(max(seqs) - min(seqs) if seqs else 0)
    return out


def test_autograd_recorded_at_inference():
    """Raw events: the evaluation loop of the pair recorded for it creates 944 autograd nodes a step (its
    ops' sequence numbers rise by 944; no backward runs), heldout15 dt_rollout_grad_mode 1,272; their
    inference-mode variants record no sequence number at all, and an inference script on tensors that
    need no grad records them without a rise (small_matmul_loop: 0). inference_mode fires on both
    baselines and on neither variant. Its saving is 944 × 3.8 µs traced, which the what-if projects
    to 1.76 ms: below the recording's bare saving (19.10 → 10.79 ms) and near the 2.1–2.2 ms of the fast
    plain runs (sample_traces/bare/README.md): the rule is a lower bound on a slow host."""
    before, after = recording("bare", "eval_grad_mode"), recording("bare", "eval_grad_mode_fixed")
    assert _seq_rise(before) == [944] * 6 and _seq_rise(after) == [0] * 6
    assert not any(_in_steps(after, lambda e: "Sequence number" in e.get("args", {})))
    assert set(_seq_rise(recording("", "small_matmul_loop"))) == {0}
    found = analysed_file(before)
    assert found.analysis.ranks[0].patterns.grad_recording["nodes"].tolist() == [944] * 6
    mine = [s for s in found.suggestions if s.id == "inference_mode"]
    assert mine and 1.0 < mine[0].per_step_us / 1000 < 19.097 - 10.793
    assert "inference_mode" not in {s.id for s in analysed_file(after).suggestions}
    dt = recording("heldout15", "ho15_dt_rollout_grad_mode")
    assert _seq_rise(dt) == [1272] * 4
    assert "inference_mode" in {s.id for s in analysed_file(dt).suggestions}
    fixed = analysed_file(recording("heldout15", "ho15_dt_rollout_grad_mode_inference_mode"))
    assert "inference_mode" not in {s.id for s in fixed.suggestions}


def test_grad_recording_by_hand(tmp_path):
    """By hand: one step, 40 ops on one thread 100 µs apart, each launching a kernel 50 µs in (call 10
    µs); op i records sequence number 10 + i (one node each: a rise of 39), so each call after the
    first has one node made since the previous call (inside the op before it) and a 90 µs gap: cut
    min(90, 3.8) = 3.8 µs, 39 × 3.8 = 148.2 µs in the step. With a backward op in the step: nothing."""
    for backward in (False, True):
        b = TraceBuilder()
        b.annotation("ProfilerStep#0", 0, 5000)
        for i in range(40):
            ext = b.op("aten::linear", 100 * i, 80, **{"Sequence number": 10 + i})
            b.launch(100 * i + 50, 10, "gemm", 100 * i + 60, 5, ext=ext)
        if backward:
            b.op("autograd::engine::evaluate_function: AddmmBackward0", 4500, 50)
        rank = load_trace(b.write(tmp_path / f"grad{backward}.json")).ranks[0]
        found = grad_recording.find_grad_recording(rank, StepsOf.of(rank))
        if backward:
            assert not len(found.table)
            continue
        assert found.table[grad_recording.GR_NODES].tolist() == [39]
        assert found.table[grad_recording.GR_HOST_US].tolist() == pytest.approx([39 * grad_recording.NODE_US])
