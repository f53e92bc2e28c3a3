"""The twenty-fifth held-out set (H100, sample_traces/heldout25/): its first run's answers against the
recordings' own unprofiled steps (docs/validation.md)."""

from __future__ import annotations

import pytest
from recorded import (
    analysed,
    bare_ms,
    check_first_and_within,
    profiler_steps,
    raw_events,
    recording,
    set_tests,
)

from tracekit.suggestions.rules_launch import MUTATION_KERNEL

SET = "heldout25"
# first and within ±35 % of the bare saving at the first run (the tag's code, the same analysis code as
# this commit's): int4 tinygemm kernels on 16,384-row GEMMs (int4_large_batch 81.72 against 84.02 ms) and a
# Python loop over rolling-window positions (batch_samples 22.03 against 23.75 ms)
FIRST_AND_WITHIN = ["ho25_catalog_embedding_int4_tinygemm", "ho25_turbine_scada_rolling_window_loop"]
test_first_suggestion_is_the_fix_and_its_saving_is_measured, test_projection_within_15_percent_of_the_bare_step = \
    set_tests(SET, FIRST_AND_WITHIN)


def test_each_triton_launch_configuration_has_its_own_roof() -> None:
    """triton_cell_atlas_single_stage: one `linear_kernel` launched with 1.1 TFLOP GEMMs (16,384 × 16,384 ×
    2,048 in both directions: 2·M·N·K, the script's shapes) and small ones (2.1–34 GFLOP). Each launch
    configuration is priced against its own kernels' roof, so the 1-stage GEMMs (35 % of the H100's bf16 roof,
    1.1 TFLOP in 3.2 ms) fire below 40 % and the 3-stage ones (57 %) do not: triton_config first within
    ±35 % of the bare saving (7.31 → 4.77 ms) and silent on the pipelined variant. Before, one mean roof per
    kernel name made the 3-stage GEMMs look at 20 % and the rule fired on the fixed variant."""
    check_first_and_within(SET, "ho25_triton_cell_atlas_single_stage", "ho25_triton_cell_atlas_single_stage_pipelined_stages",
                           "triton_config")


def test_inference_mode_priced_at_the_unprofiled_cost_of_a_node() -> None:
    """card_fraud_scoring_grad_recording: 876 autograd nodes a step (the rise of the ops' recorded sequence
    numbers in each step's raw events) in a served
    forward with gradient mode on; both variants launch the same 1,328 kernels (raw events). The what-if
    takes 6.3 µs a node off the projected host gaps (grad_recording.NODE_BARE_US): within ±35 % of the bare
    saving under inference_mode (15.40 → 9.85 ms; 1.34 ms predicted at the profiled 3.8 µs a node)."""
    before = recording(SET, "ho25_card_fraud_scoring_grad_recording")
    after = recording(SET, "ho25_card_fraud_scoring_grad_recording_inference_mode")
    events = raw_events(before)
    rises = []
    for lo, hi in profiler_steps(events):  # the rise of the recorded sequence numbers in each step
        seq = [e["args"]["Sequence number"] for e in events if e.get("cat") == "cpu_op" and lo <= e["ts"] < hi
               and "Sequence number" in e.get("args", {})]
        rises.append(max(seq) - min(seq))
    assert rises == [876] * 4
    found = analysed(before)
    assert found.analysis.ranks[0].patterns.grad_recording["nodes"].tolist() == rises
    (mine,) = [s for s in found.suggestions if s.id == "inference_mode"]
    assert mine.per_step_us / 1000 == pytest.approx(bare_ms(before) - bare_ms(after), rel=0.35)
    assert "inference_mode" not in {s.id for s in analysed(after).suggestions}


@pytest.mark.parametrize(("name", "writes_back"), [
    ("triton_poi_fused_copy__div_sub_0", True),  # x.sub_(mean).div_(std) on the compiled graph's input
    ("triton_poi_fused_copy__20", True),
    ("triton_per_fused__to_copy__unsafe_view_add_mean_mul_pow_rsqrt_5", False),  # a cast, not a write back
    ("triton_poi_fused_add_mul_view_11", False),
    ("copy__kernel", False),
])
def test_mutation_kernel_names(name: str, writes_back: bool) -> None:
    """Inductor names a kernel after the ops it fuses: `copy_` among them is a write back to a graph input,
    `_to_copy` a cast (names from the sample traces: heldout25, heldout21, heldout8)."""
    assert bool(MUTATION_KERNEL.match(name)) is writes_back


def test_cuda_graphs_says_why_reduce_overhead_graphs_were_skipped() -> None:
    """traffic_rollout_compiled_inplace_norm: compiled with mode="reduce-overhead", yet no cudaGraphLaunch in
    the raw events (the out-of-place variant has 32) and the compiled regions launch inductor's kernels one by
    one, the first `triton_poi_fused_copy__div_sub_0`. `cuda_graphs` comes first and its title names that
    kernel as the in-place write that makes CUDA graph trees skip graphs."""
    before = recording(SET, "ho25_traffic_rollout_compiled_inplace_norm")
    after = recording(SET, "ho25_traffic_rollout_compiled_inplace_norm_out_of_place_norm")
    graphs = [sum(e.get("name") == "cudaGraphLaunch" for e in raw_events(p)) for p in (before, after)]
    assert graphs == [0, 32]
    first = analysed(before).suggestions[0]
    assert first.id == "cuda_graphs" and "triton_poi_fused_copy__div_sub_0 writes a graph input in place" in first.title
