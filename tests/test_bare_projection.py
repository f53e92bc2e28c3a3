"""Traces that carry their own unprofiled step times (sample_traces/bare/, H200): the projection calibrated
by them, the verdict against the measured GPU share, and what-if savings against the measured fixes."""

from __future__ import annotations

import pytest
from conftest import SAMPLE_TRACES
from shared_analysis import analysed_file

import tracekit
from tracekit.analyzers.totals import GPU_BOUND, GPU_BOUND_SHARE

BARE = SAMPLE_TRACES / "bare"
NAMES = sorted(p.name.removesuffix(".trace.json.gz") for p in BARE.glob("*.trace.json.gz"))


def _measured(result: tracekit.pipeline.local.LocalResult, path) -> float:
    """The median bare step over the steady steps, read from the file itself (the measurement)."""
    bare = tracekit.load_trace(path).rank().meta.bare
    assert bare is not None and bare.source == "tracekit profile"
    value = bare.median_us(result.analysis.ranks[0].launch.steady_steps)
    assert value is not None
    return value


# Pairs the projection misses by more than 8 %, with the bound each stays within: the ResNet-18 steps
# in NCHW (train_conv.py fp32: projected 15.9 ms vs 14.2 ms measured, +12 %; --bf16: 15.6 vs 12.5 ms,
# +24 %) keep host time the unprofiled runs did not have (docs/validation.md, "Layer rule pairs").
PROJECTION_MISSES = {"train_conv": 0.15, "train_conv_bf16": 0.30}
# ... and so its verdict: launch-bound (GPU 78 % of the projected step) where the GPU ran 94 % of the measured one
VERDICT_MISSES = {"train_conv_bf16"}


@pytest.mark.parametrize("name", NAMES)
def test_projection_calibrated_by_the_bare_run(name):
    path = BARE / f"{name}.trace.json.gz"
    result = analysed_file(path)
    u = result.analysis.unprofiled
    assert u is not None and u.trusted and u.source == "bare"
    measured = _measured(result, path)
    assert u.measured_us == pytest.approx(measured)
    # fitted so that the median projected step is the median bare step; the headline is the mean
    # over the steps, within 8 % of it on every pair (docs/validation.md, "Unprofiled pairs")
    assert u.step_us == pytest.approx(measured, rel=PROJECTION_MISSES.get(name, 0.08))
    if name in PROJECTION_MISSES:  # a known miss: still a miss (else drop it from the table)
        assert u.step_us != pytest.approx(measured, rel=0.08)
    # the verdict against the measured GPU share: the GPU's own time as traced (busy less pageable
    # copies and exposed collectives: the profiler does not lengthen kernels) / the measured step
    t = result.analysis.totals
    share = max(t.gpu_busy_us - t.pageable_copy_us - t.comm_exposed_us, 0.0) / t.steps / measured
    assert ((result.analysis.verdict == GPU_BOUND) == (share >= GPU_BOUND_SHARE)) != (name in VERDICT_MISSES), \
        (u.label, share)


def test_gap_scale_only_where_per_event_cost_cannot_explain_the_step():
    """train_compile: few recorded events around Inductor's Python; even twice the default per-event
    cost leaves the projected step longer than measured, so the host gaps shrink too."""
    compiled = analysed_file(BARE / "train_compile.trace.json.gz").models[0].overhead
    decode = analysed_file(BARE / "gpt2_decode.trace.json.gz").models[0].overhead
    assert compiled.gap_scale < 1.0 and decode.gap_scale == 1.0


# (before, after, the rule whose change the pair makes): the saving measured = before − after bare
# steps, both read from the files; the what-if predicts it from BEFORE alone
FIXES = (
    ("gpt2_decode", "gpt2_decode_graph", "cuda_graphs"),
    ("train_gpu_bound", "train_gpu_bound_bf16", "lower_precision"),
    ("train_dataloader", "train_dataloader_fixed", "dataloader_workers"),
    ("train_copies", "train_copies_fixed", "pinned_memory"),
    ("train_optimizer_loop", "train_optimizer_fused", "fused_optimizer"),
    ("small_matmul_loop", "small_matmul_bmm", "batch_bmm"),
    ("attention_causal_mask", "attention_causal_mask_fixed", "causal_mask"),
    ("train_tokenize", "train_tokenize_fixed", "preprocess_off_thread"),
    # the sync serialises the CPU's batch preparation after the GPU's step: without it the loop runs
    # free (the autograd thread follows the main thread, model/graph.py spawned_anchors; the step is the
    # longer of CPU and GPU, model/outlook.py _after_span)
    ("train_sync", "train_sync_fixed", "avoid_sync"),
)


@pytest.mark.parametrize("before, after, rule", FIXES)
def test_what_if_against_the_measured_fix(before, after, rule):
    b_path, a_path = BARE / f"{before}.trace.json.gz", BARE / f"{after}.trace.json.gz"
    b, a = analysed_file(b_path), analysed_file(a_path)
    realised = _measured(b, b_path) - _measured(a, a_path)
    assert b.suggestions[0].id == rule  # the first suggestion is the fix that was made
    assert b.suggestions[0].per_step_us == pytest.approx(realised, rel=0.35)
    assert b.suggestions[0].per_step_us <= b.analysis.unprofiled.step_us
    assert rule not in {x.id for x in a.suggestions}  # silent once the change is made


def test_use_bare_false_is_the_untuned_projection():
    """train_compile with the default overhead only: the Python between few recorded events is not
    removed, the projection stays far above the measured step (docs/validation.md, untuned table:
    +55 %), while the bare-calibrated one matches it."""
    trace = tracekit.load_trace(BARE / "train_compile.trace.json.gz")
    untuned = tracekit.analyse_trace(trace, use_bare=False).analysis.unprofiled
    tuned = tracekit.analyse_trace(trace).analysis.unprofiled
    assert untuned.source == "default" and tuned.source == "bare"
    assert untuned.step_us > 1.3 * tuned.measured_us and tuned.step_us == pytest.approx(tuned.measured_us, rel=0.08)


# The H200 pairs of the layout, precision, quantization and fused-kernel rules (sample_traces/scripts/
# train_conv.py, decode_gemv.py, train_llm.py, decode_requests.py; docs/validation.md, "Layer rule pairs"), with what
# each shows today: whether the rule is the first suggestion on BEFORE and whether its what-if saving
# per step is within ±35 % of the measured one. Every rule is silent on AFTER.
RULE_PAIRS = (
    # the fastest fix of the fp32 NCHW ResNet-18 (14.2 → 8.44 ms): first, but the replay keeps 13.7 ms
    # of projected host time (2.26 ms predicted; the traced estimate, 5.15 ms, is within 35 %)
    ("train_conv", "train_conv_channels_last", "channels_last", True, False),
    # bf16 autocast in NCHW: 1.33 ms predicted, 1.67 measured; channels_last ranks above it (the faster fix)
    ("train_conv", "train_conv_bf16", "lower_precision", False, True),
    # weight-only int8 GEMVs in torch 2.11 without torchao (an Inductor-compiled dequantizing GEMV) are
    # slower than bf16 at batch 1 (0.58 → 0.92 ms): the rule's int8 kernel at the bf16 bandwidth is not there
    ("decode_gemv", "decode_gemv_int8", "quantize_weights", True, False),
    # fused RMSNorm / SwiGLU / RoPE / loss: 2.13 ms predicted, 2.58 measured; cuda_graphs ranks above it (5.9 ms,
    # a change not measured here)
    ("train_llm", "train_llm_fused", "fused_llm_kernels", False, True),
    # four generate() calls one by one vs one batched call (76.2 → 23.6 ms): 4 requests counted per step,
    # 56.6 ms predicted, 52.7 measured; first: cuda_graphs (65.2 ms before) is silent, the keys of the
    # one-token attention calls take 5 lengths (33..37: generate()'s dynamic cache, which a graph
    # cannot capture as written; rules_launch.growing_kv_cache)
    ("decode_requests", "decode_requests_batched", "batch_decode", True, True),
)


@pytest.mark.parametrize("before, after, rule, first, within", RULE_PAIRS)
def test_rule_pairs_of_the_layer_rules(before, after, rule, first, within):
    b_path, a_path = BARE / f"{before}.trace.json.gz", BARE / f"{after}.trace.json.gz"
    b, a = analysed_file(b_path), analysed_file(a_path)
    realised = _measured(b, b_path) - _measured(a, a_path)
    found = {s.id: s for s in b.suggestions}
    assert (b.suggestions[0].id == rule) is first
    assert (found[rule].per_step_us == pytest.approx(realised, rel=0.35)) is within
    assert rule not in {x.id for x in a.suggestions}
    if rule == "channels_last":  # the traced estimate: transposes + NCHW BatchNorm at NHWC bandwidth
        assert found[rule].traced_saving_us / b.analysis.totals.steps == pytest.approx(realised, rel=0.35)
