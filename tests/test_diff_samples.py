"""tracekit diff on H200 before/after sample pairs; expected numbers recomputed from the raw JSON events.

The steady steps are the analysis's own choice (read from it); every time is recomputed here from the
trace's events: ProfilerStep ranges, GPU activities assigned to the step of their launch call
(correlation), step windows as the README defines them. The pairs are compared as `tracekit diff`
compares them (pipeline.compare: the execution model on both sides, BEFORE's rules priced by it): the
headline step is the projected unprofiled one, read from each side's own `Analysis.unprofiled`.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest

from tracekit.analyzers import step_parts
from tracekit.compare.diff import AFTER, BEFORE, PROJECTED, TraceDiff
from tracekit.pipeline.compare import compare_results
from tracekit.pipeline.local import LocalResult, analyse_file

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
GEMM_NAME = re.compile(r"gemm|nvjet|xmma", re.I)


def events(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)["traceEvents"]


def raw(path: Path) -> tuple[dict[int, tuple[float, float]], list[tuple[str, float, float, int]]]:
    """{step: (start, end)} of the ProfilerStep annotations and (name, ts, dur, step) per GPU activity."""
    events_ = events(path)
    steps = {int(e["name"].split("#")[1]): (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
             for e in events_ if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")}
    launch_ts = {e["args"]["correlation"]: float(e["ts"]) for e in events_
                 if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    kernels = []
    for e in events_:
        if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        t = launch_ts.get(e["args"].get("correlation"), float(e["ts"]))
        step = next((s for s, (a, b) in steps.items() if a <= t < b), -1)
        kernels.append((e["name"], float(e["ts"]), float(e["dur"]), step))
    return steps, kernels


def result(name: str, rules: bool = True) -> LocalResult:
    """The sample analysed as tracekit diff analyses it (the model on, the rules priced by it)."""
    return analyse_file(SAMPLES / f"{name}.trace.json.gz", with_suggestions=rules)


def compared(before: str, after: str) -> tuple[TraceDiff, LocalResult, LocalResult]:
    b, a = result(before), result(after, rules=False)
    return compare_results(b, a), b, a


def assert_projected_headline(d: TraceDiff, b: LocalResult, a: LocalResult) -> float:
    """The headline is the projected unprofiled step of each side; returns its saving per step."""
    pb, pa = b.analysis.unprofiled.step_us, a.analysis.unprofiled.step_us
    assert d.headline_kind == PROJECTED and d.measured is None  # the samples carry no bare timings
    assert (d.headline.before, d.headline.after) == pytest.approx((pb, pa))
    return pb - pa


def selected(a) -> list[int]:
    return sorted(step_parts.steady(a).by_rank[0])


def gemm_per_step(name: str, r: LocalResult) -> float:
    steps = selected(r.analysis)
    _, kernels = raw(SAMPLES / f"{name}.trace.json.gz")
    return sum(dur for n, _, dur, s in kernels if s in steps and GEMM_NAME.search(n)) / len(steps)


def test_fp32_to_tf32_gemm_time_and_prediction() -> None:
    d, before, after = compared("linear_fp32", "linear_tf32")
    per_step = [gemm_per_step("linear_fp32", before), gemm_per_step("linear_tf32", after)]
    gemm = d.classes.set_index("class").loc["gemm"]
    assert gemm[BEFORE] == pytest.approx(per_step[0], rel=1e-6)
    assert gemm[AFTER] == pytest.approx(per_step[1], rel=1e-6)
    check = next(s for s in d.suggestions if s.id == "lower_precision")
    # the change shows: every GEMM kernel of the TF32 run has tf32 in its name, none of the fp32 run's
    _, fp32 = raw(SAMPLES / "linear_fp32.trace.json.gz")
    _, tf32 = raw(SAMPLES / "linear_tf32.trace.json.gz")
    assert not any("tf32" in n for n, *_ in fp32 if GEMM_NAME.search(n))
    assert all("tf32" in n for n, *_ in tf32 if GEMM_NAME.search(n))
    assert check.applied is True and check.applied_evidence == "GEMM precision (by time) fp32 → tf32"
    # realised: the projected unprofiled step's change; the GEMM time saved is the supporting evidence
    assert check.realised_us_per_step == pytest.approx(assert_projected_headline(d, before, after))
    assert check.realised_basis == PROJECTED
    assert check.part_saving_us == pytest.approx(per_step[0] - per_step[1], rel=1e-6)
    assert check.predicted_us_per_step == pytest.approx(before.suggestions[0].per_step_us)
    assert check.came_true  # the what-if replay of TF32 GEMMs is within ±35 % of the step saved
    assert check.realised_us_per_step / check.predicted_us_per_step == pytest.approx(1.0, abs=0.1)


def _busy(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, -np.inf
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def graph_share(name: str) -> float:
    """GPU activities launched by a cudaGraphLaunch call (correlation), of all GPU activities."""
    evs = events(SAMPLES / f"{name}.trace.json.gz")
    graph_calls = {e["args"]["correlation"] for e in evs if e.get("cat") in ("cuda_runtime", "cuda_driver")
                   and e["name"] in ("cudaGraphLaunch", "cuGraphLaunch") and "correlation" in e.get("args", {})}
    gpu = [e for e in evs if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    return sum(e["args"].get("correlation") in graph_calls for e in gpu) / len(gpu)


def test_loop_to_cuda_graph_idle_and_prediction() -> None:
    d, before, after = compared("small_matmul_loop", "small_matmul_graph")
    idle, span = [], []
    for name, r in (("small_matmul_loop", before), ("small_matmul_graph", after)):
        a = r.analysis
        windows, kernels = raw(SAMPLES / f"{name}.trace.json.gz")
        # a step ends when its CPU range and the GPU work it launched have both ended (never before
        # the previous step's end), and the next step starts there: steps tile the recording
        order = sorted(windows)
        ends, prev = {}, -np.inf
        for s in order:
            gpu_end = max([ts + dur for _, ts, dur, k in kernels if k == s], default=-np.inf)
            prev = ends[s] = max(prev, windows[s][1], gpu_end)
        windows = {s: (windows[s][0] if i == 0 else ends[order[i - 1]], ends[s]) for i, s in enumerate(order)}
        steps = selected(a)
        spans = [windows[s][1] - windows[s][0] for s in steps]
        busy = [_busy([(max(ts, windows[s][0]), min(ts + dur, windows[s][1])) for _, ts, dur, _ in kernels
                       if ts < windows[s][1] and ts + dur > windows[s][0]]) for s in steps]
        span.append(float(np.mean(spans)))
        idle.append(float(np.mean(spans) - np.mean(busy)))
    assert d.step.before == pytest.approx(span[0], rel=0.02)
    assert d.step.after == pytest.approx(span[1], rel=0.02)
    gaps = d.idle.set_index("part").loc["gpu_idle"]
    assert gaps[BEFORE] == pytest.approx(idle[0], rel=0.02)
    check = next(s for s in d.suggestions if s.id == "cuda_graphs")
    assert check.part_saving_us == pytest.approx(idle[0] - idle[1], rel=0.03)
    assert (graph_share("small_matmul_loop"), graph_share("small_matmul_graph")) == (0.0, 1.0)
    assert check.applied is True
    assert check.applied_evidence == "GPU activities replayed from CUDA graphs 0 % → 100 %"
    assert check.realised_us_per_step == pytest.approx(assert_projected_headline(d, before, after))
    assert check.came_true
    # the graph also replaces the loop of 256 small GEMMs: batch_bmm's change shows too, and both
    # are compared with the one step change they share
    bmm = next(s for s in d.suggestions if s.id == "batch_bmm")
    assert bmm.applied is True and bmm.realised_us_per_step == check.realised_us_per_step
    assert any("cuda_graphs" in w and "batch_bmm" in w and "share" in w for w in d.warnings)
    assert d.attributed_share > 0.8


def test_gpt2_decode_to_cuda_graph() -> None:
    """Eager decode (21.6 ms a step traced, most of it the profiler's cost on ~360 launches) against the
    same decode replayed from one CUDA graph a step."""
    d, before, after = compared("gpt2_decode", "gpt2_decode_graph")
    pb, pa = before.analysis.unprofiled.step_us, after.analysis.unprofiled.step_us
    saved = assert_projected_headline(d, before, after)
    assert pa < pb and d.headline.delta == pytest.approx(pa - pb) and d.headline.pct < -80
    assert d.to_dict()["headline"]["direction"] == "faster" and d.disagreement is None  # both faster
    share = graph_share("gpt2_decode_graph")
    assert graph_share("gpt2_decode") == 0.0 and share == pytest.approx(6800 / 7181)
    check = next(s for s in d.suggestions if s.id == "cuda_graphs")
    assert check.applied is True
    assert check.applied_evidence == f"GPU activities replayed from CUDA graphs 0 % → {100 * share:.0f} %"
    assert check.realised_us_per_step == pytest.approx(saved) and check.realised_basis == PROJECTED
    assert check.outcome == "came true"
    # one request decoded token by token: nothing to batch it with (rules_decode.batch_decode is silent)
    assert "batch_decode" not in {s.id for s in d.suggestions}


def optimizer_kernels(name: str) -> list[int]:
    """GPU activities launched inside each Optimizer.step range (launch call on the range's thread)."""
    evs = events(SAMPLES / f"{name}.trace.json.gz")
    linked = {e["args"].get("correlation") for e in evs if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")}
    calls = [e for e in evs if e.get("cat") in ("cuda_runtime", "cuda_driver") and e.get("args", {}).get("correlation") in linked]
    ranges = [e for e in evs if e.get("cat") == "user_annotation" and re.match(r"^Optimizer\.step#\w+\.step$", e["name"])]
    return [sum(1 for c in calls if c["tid"] == o["tid"] and o["ts"] <= c["ts"] <= o["ts"] + o["dur"]) for o in ranges]


def test_per_parameter_to_fused_optimizer() -> None:
    d, before, after = compared("train_optimizer_loop", "train_optimizer_fused")
    loop, fused = optimizer_kernels("train_optimizer_loop"), optimizer_kernels("train_optimizer_fused")
    assert loop == [2416, 2416] and fused == [12, 12]  # both steps are steady
    check = next(s for s in d.suggestions if s.id == "fused_optimizer")
    assert check.applied is True and check.applied_evidence == "kernels per optimizer step 2416.0 → 12.0"
    saved = assert_projected_headline(d, before, after)
    assert check.realised_us_per_step == pytest.approx(saved)
    assert abs(saved - check.predicted_us_per_step) <= 0.35 * check.predicted_us_per_step
    assert check.outcome == "came true"
    # the fused run replays nothing from a CUDA graph: that suggestion is neither credited nor blamed
    graphs = next(s for s in d.suggestions if s.id == "cuda_graphs")
    assert graph_share("train_optimizer_fused") == 0.0
    assert graphs.applied is False and graphs.outcome == "unconfirmed" and graphs.came_true is None
    assert graphs.applied_evidence.startswith("GPU activities replayed from CUDA graphs 0 % → 0 %")


ELEMENTWISE_NAME = re.compile(r"elementwise_kernel|triton_poi_fused")


def test_eager_to_compiled_elementwise_time_and_prediction() -> None:
    d, before, after = compared("elementwise_eager", "elementwise_compiled")
    per_step, counts = [], []
    for name, r in (("elementwise_eager", before), ("elementwise_compiled", after)):
        steps = selected(r.analysis)
        _, kernels = raw(SAMPLES / f"{name}.trace.json.gz")
        mine = [dur for n, _, dur, s in kernels if s in steps and ELEMENTWISE_NAME.search(n)]
        per_step.append(sum(mine) / len(steps))
        counts.append(len(mine) / len(steps))
    check = next(s for s in d.suggestions if s.id == "fuse_elementwise")
    assert check.before_part_us == pytest.approx(per_step[0], rel=1e-6)
    assert check.after_part_us == pytest.approx(per_step[1], rel=1e-6)
    assert counts == [4.0, 1.0]  # four eager kernels a step, one fused Triton kernel
    assert check.applied is True
    # and the one fused kernel is generated (a Triton kernel from Inductor): 0 → 1, from the same count
    assert check.applied_evidence == ("elementwise + normalization kernels per step 4.0 → 1.0; "
                                      "generated (Inductor, Triton) kernels per step 0.0 → 1.0")
    saved = assert_projected_headline(d, before, after)
    # the what-if (the chains' kernels faster by the rule's GPU saving, replayed: queued launches follow
    # their stream, model/graph.py QUEUED_US) is within ±35 % of the step the compiled run saved
    assert check.realised_us_per_step == pytest.approx(saved)
    assert abs(saved - check.predicted_us_per_step) <= 0.35 * check.predicted_us_per_step
    assert check.outcome == "came true"


def test_naive_attention_to_sdpa_chain_time() -> None:
    """attention_naive.py runs only the attention: its chain is (nearly) every GPU activity of a step."""
    d, before, after = compared("attention_naive", "attention_sdpa")
    check = next(s for s in d.suggestions if s.id == "use_sdpa")
    _, kernels = raw(SAMPLES / "attention_naive.trace.json.gz")
    steps = selected(before.analysis)
    every = sum(dur for _, _, dur, s in kernels if s in steps) / len(steps)
    assert not any("sdpa" in n for n, *_ in kernels)
    assert check.before_part_us == pytest.approx(every, rel=0.05)
    _, kernels = raw(SAMPLES / "attention_sdpa.trace.json.gz")
    steps = selected(after.analysis)
    fused = [dur for n, _, dur, s in kernels if s in steps and "sdpa" in n]
    assert check.after_part_us == pytest.approx(sum(fused) / len(steps), rel=1e-6)
    assert len(fused) / len(steps) == 1.0  # one fused attention kernel a step where none ran
    assert check.applied is True and check.applied_evidence == "fused attention kernels per step 0.0 → 1.0"
    saved = assert_projected_headline(d, before, after)
    # the what-if shortens the chain's kernels (GEMMs, softmax and the scale/mask/transpose kernels:
    # suggestions/whatif.py GPU_CLASSES) by the rule's saving: within ±35 % of the step saved
    assert check.realised_us_per_step == pytest.approx(saved)
    assert abs(saved - check.predicted_us_per_step) <= 0.35 * check.predicted_us_per_step
    assert check.outcome == "came true"


def test_ci_gate_on_a_real_pair() -> None:
    from tracekit.report.diff_text import slower_message

    assert slower_message(compared("linear_fp32", "linear_tf32")[0], 5) is None
    backward, tf32, fp32 = compared("linear_tf32", "linear_fp32")
    message = slower_message(backward, 5)
    pct = 100 * (fp32.analysis.unprofiled.step_us / tf32.analysis.unprofiled.step_us - 1)
    assert message is not None and "gemm grew most" in message
    assert f"(projected unprofiled) got {pct:.1f}% slower" in message


def syncs_per_step(name: str, r: LocalResult) -> float:
    """Host sync calls (stream/device/event synchronize, synchronous cudaMemcpy) inside the selected
    steps' ProfilerStep ranges, per step."""
    windows, _ = raw(SAMPLES / f"{name}.trace.json.gz")
    steps = selected(r.analysis)
    sync = re.compile(r"^(cuda(Device|Stream|Event)Synchronize|cudaMemcpy)$")
    calls = [float(e["ts"]) for e in events(SAMPLES / f"{name}.trace.json.gz")
             if e.get("cat") in ("cuda_runtime", "cuda_driver") and sync.match(e["name"])]
    return sum(windows[s][0] <= t < windows[s][1] for s in steps for t in calls) / len(steps)


@pytest.mark.parametrize(("pair", "fired", "outcome"), [
    (("train_dataloader", "train_dataloader_fixed"), "dataloader_workers", "came true"),
    # one .item() a step removed: the no-sync what-if replays the freed loop free-running (the step the
    # longer of CPU and GPU time: model/outlook.py _after_span) and meets the projected saving
    (("train_sync", "train_sync_fixed"), "avoid_sync", "came true"),
    (("train_copies", "train_copies_fixed"), "pinned_memory", "came true"),
])
def test_host_bound_fixes(pair: tuple[str, str], fired: str, outcome: str) -> None:
    """H200 training loops and their fixes: the fix shows in AFTER, its suggestion is checked against
    the projected step, the traced step change is explained by named parts, and the CI gate fires in
    the slower direction only."""
    from tracekit.report.diff_text import slower_message

    d, before, after = compared(*pair)
    memcpy = []
    for name, r in zip(pair, (before, after), strict=True):
        steps = selected(r.analysis)
        _, activities = raw(SAMPLES / f"{name}.trace.json.gz")
        memcpy.append(sum(dur for n, _, dur, s in activities if s in steps and n.startswith("Memcpy")) / len(steps))
    classes = d.classes.set_index("class")
    assert classes.loc["memcpy", BEFORE] == pytest.approx(memcpy[0], rel=1e-6)
    assert classes.loc["memcpy", AFTER] == pytest.approx(memcpy[1], rel=1e-6)
    check = next(s for s in d.suggestions if s.id == fired)
    assert check.applied is True
    saved = assert_projected_headline(d, before, after)
    assert check.realised_us_per_step == pytest.approx(saved)
    assert check.outcome == outcome
    if fired == "avoid_sync":
        syncs = syncs_per_step(pair[0], before), syncs_per_step(pair[1], after)
        assert syncs == (1.0, 0.0)  # one sync a step, none after the fix
        assert check.applied_evidence == "host syncs per steady step 1.0 → 0.0"
        # the what-if (3.19 ms) within ±35 % of the projected saving (3.17 ms): docs/model.md, "Free-running"
        assert abs(check.predicted_us_per_step - saved) <= 0.35 * check.predicted_us_per_step
    assert d.attributed_share >= 0.8
    assert d.step.delta < 0 and d.headline.delta < 0
    assert slower_message(d, 5) is None and slower_message(compared(pair[1], pair[0])[0], 5) is not None
