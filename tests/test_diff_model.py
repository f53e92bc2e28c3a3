"""tracekit diff judged on the unprofiled step: synthetic pairs whose projection is derived by hand, and
suggestions credited only where AFTER shows their change (compare/applied.py)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from shared_analysis import analysed_file
from test_diff import tk
from test_suggestions_host import loader_trace
from tracebuilder import TraceBuilder

from tracekit.analyzers.analysis import Analysis
from tracekit.analyzers.unprofiled import Unprofiled
from tracekit.compare.applied import APPLIED, applied
from tracekit.compare.diff import MEASURED, PROJECTED, TRACED, diff
from tracekit.pipeline.compare import compare_files, compare_results
from tracekit.pipeline.local import LocalResult, analyse_file
from tracekit.report.diff_text import render_text, slower_message
from tracekit.report.diff_view import render_diff
from tracekit.report.meta import noisy_words
from tracekit.suggestions.rules import RULES
from tracekit.units import fmt_us

MUL = "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, MulFunctor<float>>>"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>"
STEPS = 6  # identical steps: per-step numbers do not depend on which are steady
# Every kernel launch call takes 7.85 µs, so the fast (10th percentile) and the median launch are 7.85
# µs and DEFAULT_OVERHEAD removes, by hand: 3.75 × (7.85 − 3.85) = 15 µs per recorded CPU event (ops,
# the step mark) from the gap it starts in (never below 0); 7.85 − 3 = 4.85 µs from every launch call
# (to the 3 µs floor) and the same from its kernel's latency (counted from the call's start); a sync
# keeps its wait, and its part after the awaited kernel (5 µs here) shrinks to the 3 µs floor. Tails to
# the step mark's end without events are kept.
LAUNCH = 7.85


def sync_trace(path: Path, sync: bool = True, k_us: float = 300.0) -> Path:
    """Each step: aten::mul launches a k_us kernel K1 at +40; with `sync`, aten::item (+40) holds a
    cudaStreamSynchronize from +45 until 5 µs after K1 ends, then aten::add (+60 + k_us) launches a
    300 µs K2 at +80 + k_us; the step mark ends 20 µs after K2. Without: aten::add at +40 launches K2,
    queued behind K1, and the mark ends 20 µs after it."""
    b = TraceBuilder()
    span = 400 + k_us if sync else 360 + k_us
    for s in range(STEPS):
        t0 = s * span
        b.annotation(f"ProfilerStep#{s}", t0, span)
        b.launch(t0 + 22, LAUNCH, MUL, t0 + 40, k_us, ext=b.op("aten::mul", t0 + 20, 10))
        if sync:
            b.op("aten::item", t0 + 40, k_us + 10)
            b.raw({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": b.pid, "tid": b.tid,
                   "ts": t0 + 45, "dur": k_us, "args": {"correlation": 90000 + s}})
            b.launch(t0 + 62 + k_us, LAUNCH, ADD, t0 + 80 + k_us, 300, ext=b.op("aten::add", t0 + 60 + k_us, 10))
        else:
            b.launch(t0 + 42, LAUNCH, ADD, t0 + 40 + k_us, 300, ext=b.op("aten::add", t0 + 40, 10))
    return b.write(path)


def pair(before: Path, after: Path) -> tuple[LocalResult, LocalResult]:
    """Both analysed as tracekit diff analyses them (the model on; BEFORE's rules priced by it)."""
    return analysed_file(before), analyse_file(after, with_suggestions=False)


def test_avoid_sync_applied_and_realised_on_the_projected_steps(tmp_path: Path) -> None:
    b, a = pair(sync_trace(tmp_path / "sync.json"), sync_trace(tmp_path / "fixed.json", sync=False))
    d = compare_results(b, a)
    # BEFORE by hand (times from the step's start): the mul launch's 22 µs gap holds the mark and
    # aten::mul: 2 × 15 > 22, so 0; the call 7.85 → 3 (0–3); K1 at 3 + (18 − 4.85) = 13.15, ends
    # 313.15. The sync's gap (29.85 → 45: 15.15 µs) holds aten::item: 0.15; it starts at 3.15 and
    # returns at max(3.15 + 3, 313.15 + 5) = 318.15. The add launch's gap (345 → 362: 17 µs, aten::add)
    # is 2: 320.15–323.15; K2 at 320.15 + 13.15 = 333.3, ends 633.3. The 330.15 µs tail is kept: the
    # CPU ends at 653.3, the step spans 653.3 µs (700 traced).
    # AFTER: mul launch 0–3, K1 13.15–313.15; the add launch's gap (29.85 → 42: 12.15 µs, aten::add) is
    # 0: 3–6; K2 was queued behind K1 (stream-bound), 313.15–613.15; the 610.15 µs tail: CPU end 616.15,
    # the step spans 616.15 µs (660 traced).
    assert (d.step.before, d.step.after) == pytest.approx((700, 660))
    assert d.headline_kind == PROJECTED and d.headline is d.projected and d.measured is None
    assert (d.projected.before, d.projected.after) == pytest.approx((653.3, 616.15))
    (check,) = d.suggestions
    assert check.id == "avoid_sync" and check.applied is True
    assert check.applied_evidence == "host syncs per steady step 1.0 → 0.0"
    # predicted: BEFORE replayed without the sync: the add launch follows at 3.15 + 2 (its gap),
    # 5.15–8.15; K2 waits for K1 (313.15) and ends 613.15; the CPU ends at 8.15 + 330.15 = 338.3. No call
    # waits for the GPU any more, so the loop runs free (model/outlook.py _after_span): the step takes
    # the longer of the CPU's 338.3 µs and the GPU's own 13.15 → 613.15 = 600 µs: 653.3 − 600
    assert check.predicted_us_per_step == pytest.approx(653.3 - 600)
    assert check.realised_us_per_step == pytest.approx(653.3 - 616.15) and check.realised_basis == PROJECTED
    assert check.outcome == "came true"  # |37.15 − 53.3| = 16.15 ≤ 0.35 × 53.3 = 18.66
    # the part the rule targets, as traced: the GPU idles 40 µs (K1 ends 340, K2 starts 380) after the sync
    assert (check.before_part_us, check.after_part_us) == pytest.approx((40, 0))
    doc = d.to_dict()
    assert doc["schema"] == "tracekit.diff/2"
    assert doc["headline"]["kind"] == PROJECTED and doc["headline"]["direction"] == "faster"
    assert doc["projected"]["before"] == pytest.approx(653.3) and doc["measured"] is None
    (s,) = doc["suggestions"]
    assert (s["applied"], s["realised_basis"], s["outcome"]) == (True, PROJECTED, "came true")
    assert s["applied_evidence"] == "host syncs per steady step 1.0 → 0.0"
    assert s["realised_us_per_step"] == pytest.approx(37.15) and s["part_saving_us_per_step"] == pytest.approx(40)


def test_unseen_change_is_unconfirmed(tmp_path: Path) -> None:
    """AFTER keeps the sync but runs a 100 µs shorter K1: the step got faster, the suggestion gets no credit."""
    b, a = pair(sync_trace(tmp_path / "sync.json"), sync_trace(tmp_path / "short.json", k_us=200))
    d = compare_results(b, a)
    # the same chain as in the test above with every time after K1's start 100 µs earlier: 553.3 µs
    assert (d.projected.before, d.projected.after) == pytest.approx((653.3, 553.3))
    (check,) = d.suggestions
    assert check.applied is False and check.outcome == "unconfirmed"
    assert check.realised_us_per_step is None and check.realised_basis is None and check.came_true is None
    assert check.applied_evidence == "host syncs per steady step 1.0 → 1.0 (expected a fall of ≥ 25 %)"
    text = render_text(d)
    assert re.search(r"avoid_sync +predicted saving +53\.3 µs +saved +- +unconfirmed", text)  # as above
    assert "not seen: host syncs per steady step 1.0 → 1.0" in text


def cpu_heavy(path: Path) -> Path:
    """Each step: 20 × (op at +20 + 60i, its launch at +22 + 60i, a 10 µs kernel at +40 + 60i); the
    step mark ends at +1200 (the last kernel ends at +1190)."""
    b = TraceBuilder()
    for s in range(STEPS):
        t0 = s * 1200
        b.annotation(f"ProfilerStep#{s}", t0, 1200)
        for i in range(20):
            t = t0 + 60 * i
            b.launch(t + 22, LAUNCH, ADD, t + 40, 10, ext=b.op("aten::add", t + 20, 10))
    return b.write(path)


def gpu_heavy(path: Path) -> Path:
    """Each step: one op at +20 launches (at +22) a 1000 µs kernel at +40; the mark ends at +1050."""
    b = TraceBuilder()
    for s in range(STEPS):
        t0 = s * 1050
        b.annotation(f"ProfilerStep#{s}", t0, 1050)
        b.launch(t0 + 22, LAUNCH, MUL, t0 + 40, 1000, ext=b.op("aten::mul", t0 + 20, 10))
    return b.write(path)


def test_headline_is_unprofiled_where_the_trace_disagrees(tmp_path: Path) -> None:
    """AFTER records 20 launches a step where BEFORE recorded one: traced it is 150 µs longer, without
    the profiler 227 µs shorter; the diff says faster, and says why the trace disagrees."""
    before, after = gpu_heavy(tmp_path / "gpu.json"), cpu_heavy(tmp_path / "cpu.json")
    d = compare_files(before, after)
    # BEFORE: the launch's 22 µs gap (mark, op) goes to 0, the call 7.85 → 3, the kernel at 13.15 and
    # the 1020.15 µs tail kept: 3 + 1020.15 = 1023.15 µs (1050 traced).
    # AFTER: the first launch 0–3 (its gap holds the mark and an op); each later one's 52.15 µs gap
    # holds one op: 37.15, so a launch every 40.15 µs, the last (i = 19) at 762.85–765.85, its kernel
    # 776–786; the 30.15 µs tail: 796 µs (1200 traced).
    assert (d.step.before, d.step.after) == pytest.approx((1050, 1200))
    assert (d.headline.before, d.headline.after) == pytest.approx((1023.15, 796))
    assert d.disagreement == "as traced it looks slower: the profiler's overhead changed"
    text = render_text(d)
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("step "))
    # -22.2 % = 796 / 1023.15 − 1; the traced change (+14.3 %) is beside it, without a direction word
    assert lines[first] == ("step 1.02 ms -> 796 µs projected unprofiled (-22.2%, faster); as traced 1.05 ms -> "
                            "1.20 ms; measured unprofiled -: not in both traces")
    assert [line for line in lines if "slower" in line] == [d.disagreement]  # the only "slower" said
    page = render_diff(d)
    h2 = re.search(r'<h2 class="faster">([^<]*)</h2>', page)
    assert h2 is not None and h2.group(1).startswith("Step 1.02 ms → 796 µs projected unprofiled (-22.2%, faster)")
    assert f"<li>{d.disagreement}</li>" in page.replace("&#39;", "'")
    assert slower_message(d, 5) is None  # the CI gate reads the headline: the traced +14.3 % passes
    gate = tk("diff", "-q", before, after, "--fail-if-slower", "5")
    assert gate.returncode == 0, gate.stderr
    back = tk("diff", "-q", after, before, "--fail-if-slower", "5")
    assert back.returncode == 1 and "(projected unprofiled) got 28.5% slower" in back.stderr  # 1023.15 / 796
    doc = json.loads(tk("diff", "--json", before, after).stdout)
    assert doc["headline"]["disagreement"] == d.disagreement and doc["step"]["pct"] == pytest.approx(100 * 150 / 1050)


def with_unprofiled(a: Analysis, change: dict[str, object]) -> Analysis:
    u = a.ranks[0].unprofiled
    assert u is not None
    return a.with_model({0: dataclasses.replace(u, **change)})


def test_measured_step_leads_when_both_traces_carry_one(tmp_path: Path) -> None:
    b, a = pair(sync_trace(tmp_path / "sync.json"), sync_trace(tmp_path / "fixed.json", sync=False))
    before = with_unprofiled(b.analysis, {"measured_step_us": 640.0, "measured_ranks": 1})
    after = with_unprofiled(a.analysis, {"measured_step_us": 598.0, "measured_ranks": 1})
    d = diff(before, after, b.suggestions)
    assert d.headline_kind == MEASURED and (d.headline.before, d.headline.after) == (640.0, 598.0)
    assert (d.projected.before, d.projected.after) == pytest.approx((653.3, 616.15))  # still shown
    (check,) = d.suggestions
    assert check.realised_us_per_step == pytest.approx(42) and check.realised_basis == MEASURED
    assert check.outcome == "came true"  # |42 − 53.3| = 11.3 ≤ 0.35 × 53.3 = 18.66
    assert render_text(d).splitlines()[3] == ("step 640 µs -> 598 µs measured unprofiled (-6.6%, faster); "
                                              "as traced 700 µs -> 660 µs; projected unprofiled 653 µs -> 616 µs")
    doc = d.to_dict()
    assert doc["headline"]["kind"] == MEASURED and doc["measured"]["delta"] == pytest.approx(-42)
    # only one side measured: the projection leads
    assert diff(before, a.analysis, b.suggestions).headline_kind == PROJECTED


def test_a_noisy_measurement_is_said_with_its_spread(tmp_path: Path) -> None:
    """BEFORE's measured steps range 500–800 µs (800 > 1.25 × 500: NOISY_MEASUREMENT), AFTER's 590–610
    (610 < 1.25 × 590): only BEFORE's spread is named, in the diff's warnings and the text line."""
    b, a = pair(sync_trace(tmp_path / "sync.json"), sync_trace(tmp_path / "fixed.json", sync=False))
    before = with_unprofiled(b.analysis, {"measured_step_us": 640.0, "measured_ranks": 1,
                                          "measured_low_us": 500.0, "measured_high_us": 800.0})
    after = with_unprofiled(a.analysis, {"measured_step_us": 598.0, "measured_ranks": 1,
                                         "measured_low_us": 590.0, "measured_high_us": 610.0})
    assert before.unprofiled is not None and after.unprofiled is not None
    assert before.unprofiled.measured_noisy and not after.unprofiled.measured_noisy
    assert before.unprofiled.measured_range_us == (500.0, 800.0)
    d = diff(before, after, b.suggestions)
    noisy = [w for w in d.warnings if "measured unprofiled steps range" in w]
    assert noisy == ["BEFORE's measured unprofiled steps range 500 µs–800 µs: the machine's speed changed during "
                     "that run, so the measured change is only as certain as that spread"]
    doc = before.unprofiled.to_dict()
    assert (doc["measured_low_us"], doc["measured_high_us"], doc["measured_noisy"]) == (500.0, 800.0, True)
    # two ranks add up: the range is the mean over the ranks, like measured_us
    two = before.unprofiled + before.unprofiled
    assert two.measured_range_us == (500.0, 800.0) and two.measured_us == 640.0
    # the words the text line and the report's tile add after the measured step
    assert noisy_words(before.unprofiled, fmt_us) == " (steps 500 µs – 800 µs: the unprofiled run's speed varied)"
    assert noisy_words(after.unprofiled, fmt_us) == ""


def test_abstaining_side_falls_back_to_the_traced_step(tmp_path: Path) -> None:
    b, a = pair(sync_trace(tmp_path / "sync.json"), sync_trace(tmp_path / "fixed.json", sync=False))
    t = a.analysis.totals
    gave_up = Unprofiled(traced=t, projected=t, low=t, high=t, trusted_ranks=0, abstained=((0, "replay 10 % off"),))
    d = diff(b.analysis, a.analysis.with_model({0: gave_up}), b.suggestions)
    assert d.projected is None and d.headline_kind == TRACED and d.headline is d.step
    assert "the execution model abstains on AFTER (replay 10 % off): no projected unprofiled step" in d.warnings
    (check,) = d.suggestions
    assert check.realised_us_per_step == pytest.approx(700 - 660) and check.realised_basis == TRACED
    assert d.disagreement is None


def test_workers_shown_but_step_unmoved_is_untouched(tmp_path: Path) -> None:
    """num_workers=0 → a multi-process iterator that still waits 4 ms a step: the change shows (the
    single-process loads vanish) though the DataLoader wait does not halve, and the step does not move."""
    (tmp_path / "s").mkdir()
    (tmp_path / "m").mkdir()
    b, a = pair(loader_trace(tmp_path / "s", 4000), loader_trace(tmp_path / "m", 4000, single=False))
    d = compare_results(b, a)
    (check,) = d.suggestions
    assert check.id == "dataloader_workers" and check.applied is True
    assert check.applied_evidence == "single-process DataLoader loads per step 1.0 → 0.0"
    # both project to 9989.375 µs (tests/test_suggestions_model.py: the same layout, the same events)
    assert (d.projected.before, d.projected.after) == pytest.approx((9989.375, 9989.375))
    assert check.realised_us_per_step == 0.0 and check.outcome == "untouched"


def test_every_rule_with_a_row_has_a_check() -> None:
    """Each rule whose change the trace can show has its row; the rest (batch size from the memory view,
    layout, the cross-rank balance) are not credited (larger_batch's row reads gradient accumulation only)."""
    with_row = {r.id for r in RULES} & set(APPLIED)
    assert with_row == {"cuda_graphs", "avoid_sync", "dataloader_workers", "pinned_memory", "fused_optimizer",
                        "lower_precision", "batch_bmm", "fuse_elementwise", "use_sdpa", "overlap_comm", "causal_mask",
                        "preprocess_off_thread", "channels_last", "quantize_weights", "fused_llm_kernels",
                        "graph_breaks", "triton_config", "align_dims", "cudnn_rnn", "concat_embeddings",
                        "foreach_loops", "batch_requests", "batch_samples", "preallocate_kv_cache", "convert_weights_once", "drop_checkpointing", "use_kv_cache", "optimizer_on_gpu",
                        "anomaly_mode", "launch_blocking", "empty_cache", "gc_collect", "recompiles",
                        "larger_batch", "reuse_dataloader", "merge_launches", "enable_gqa", "last_logits", "freeze_params",
                        "int4_large_batch", "weight_decay", "single_backward", "use_conv2d", "autotune_once", "distance_gemm", "filled_cache", "read_once", "drop_checks",
                        "calibration_off", "remove_weight_norm", "ring_buffer_cache", "split_pair_linear",
                        "define_kernel_once", "attention_plans", "inference_mode", "grads_to_none", "fuse_triton_passes",
                        "soa_layout", "sparse_grads", "sparse_format", "flatten_bmm", "static_graph_inputs", "reduce_on_gpu"}
    assert set(APPLIED) <= {r.id for r in RULES}
    assert applied("batch_decode", None, None).applied is None  # type: ignore[arg-type]
