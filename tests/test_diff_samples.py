"""tracekit diff on H200 before/after sample pairs; expected numbers recomputed from the raw JSON events.

The steady steps are the analysis's own choice (read from it); every time is recomputed here from the
trace's events: ProfilerStep ranges, GPU activities assigned to the step of their launch call
(correlation), step windows as the README defines them.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest

from tracekit.analyzers import analyze, step_parts
from tracekit.compare.diff import AFTER, BEFORE, diff
from tracekit.suggestions import suggest
from tracekit.trace.load import load_trace

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
GEMM_NAME = re.compile(r"gemm|nvjet|xmma", re.I)


def raw(path: Path) -> tuple[dict[int, tuple[float, float]], list[tuple[str, float, float, int]]]:
    """{step: (start, end)} of the ProfilerStep annotations and (name, ts, dur, step) per GPU activity."""
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    steps = {int(e["name"].split("#")[1]): (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
             for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")}
    launch_ts = {e["args"]["correlation"]: float(e["ts"]) for e in events
                 if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    kernels = []
    for e in events:
        if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        t = launch_ts.get(e["args"].get("correlation"), float(e["ts"]))
        step = next((s for s, (a, b) in steps.items() if a <= t < b), -1)
        kernels.append((e["name"], float(e["ts"]), float(e["dur"]), step))
    return steps, kernels


def analysed(name: str):
    return analyze(load_trace(SAMPLES / f"{name}.trace.json.gz"))


def selected(a) -> list[int]:
    return sorted(step_parts.steady(a).by_rank[0])


def test_fp32_to_tf32_gemm_time_and_prediction() -> None:
    before, after = analysed("linear_fp32"), analysed("linear_tf32")
    d = diff(before, after, suggest(before))
    per_step = []
    for name, a in (("linear_fp32", before), ("linear_tf32", after)):
        steps = selected(a)
        _, kernels = raw(SAMPLES / f"{name}.trace.json.gz")
        total = sum(dur for n, _, dur, s in kernels if s in steps and GEMM_NAME.search(n))
        per_step.append(total / len(steps))
    gemm = d.classes.set_index("class").loc["gemm"]
    assert gemm[BEFORE] == pytest.approx(per_step[0], rel=1e-6)
    assert gemm[AFTER] == pytest.approx(per_step[1], rel=1e-6)
    check = next(s for s in d.suggestions if s.id == "lower_precision")
    assert check.realised_us_per_step == pytest.approx(per_step[0] - per_step[1], rel=1e-6)
    assert check.came_true  # the rule's TF32 estimate is within ±35 % of the GEMM time saved
    assert check.realised_us_per_step / check.predicted_us_per_step == pytest.approx(1.0, abs=0.1)


def _busy(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, -np.inf
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def test_loop_to_cuda_graph_idle_and_prediction() -> None:
    before, after = analysed("small_matmul_loop"), analysed("small_matmul_graph")
    d = diff(before, after, suggest(before))
    idle, span = [], []
    for name, a in (("small_matmul_loop", before), ("small_matmul_graph", after)):
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
    assert check.realised_us_per_step == pytest.approx(idle[0] - idle[1], rel=0.03)
    assert check.came_true
    assert d.attributed_share > 0.8


ELEMENTWISE_NAME = re.compile(r"elementwise_kernel|triton_poi_fused")


def test_eager_to_compiled_elementwise_time_and_prediction() -> None:
    before, after = analysed("elementwise_eager"), analysed("elementwise_compiled")
    d = diff(before, after, suggest(before))
    per_step = []
    for name, a in (("elementwise_eager", before), ("elementwise_compiled", after)):
        steps = selected(a)
        _, kernels = raw(SAMPLES / f"{name}.trace.json.gz")
        total = sum(dur for n, _, dur, s in kernels if s in steps and ELEMENTWISE_NAME.search(n))
        per_step.append(total / len(steps))
    check = next(s for s in d.suggestions if s.id == "fuse_elementwise")
    assert check.before_part_us == pytest.approx(per_step[0], rel=1e-6)
    assert check.after_part_us == pytest.approx(per_step[1], rel=1e-6)
    assert check.came_true


def test_naive_attention_to_sdpa_chain_time() -> None:
    """attention_naive.py runs only the attention: its chain is (nearly) every GPU activity of a step."""
    before, after = analysed("attention_naive"), analysed("attention_sdpa")
    d = diff(before, after, suggest(before))
    check = next(s for s in d.suggestions if s.id == "use_sdpa")
    _, kernels = raw(SAMPLES / "attention_naive.trace.json.gz")
    steps = selected(before)
    every = sum(dur for _, _, dur, s in kernels if s in steps) / len(steps)
    assert check.before_part_us == pytest.approx(every, rel=0.05)
    _, kernels = raw(SAMPLES / "attention_sdpa.trace.json.gz")
    steps = selected(after)
    fused = sum(dur for n, _, dur, s in kernels if s in steps and "sdpa" in n) / len(steps)
    assert check.after_part_us == pytest.approx(fused, rel=1e-6)
    assert check.came_true


def test_ci_gate_on_a_real_pair() -> None:
    from tracekit.report.diff_text import slower_message

    fp32, tf32 = analysed("linear_fp32"), analysed("linear_tf32")
    assert slower_message(diff(fp32, tf32, suggest(fp32)), 5) is None
    message = slower_message(diff(tf32, fp32, suggest(tf32)), 5)
    assert message is not None and "gemm grew most" in message


@pytest.mark.parametrize(("pair", "fired"), [
    (("train_dataloader", "train_dataloader_fixed"), "dataloader_workers"),
    (("train_sync", "train_sync_fixed"), "avoid_sync"),
    (("train_copies", "train_copies_fixed"), "pinned_memory"),
])
def test_host_bound_fixes(pair: tuple[str, str], fired: str) -> None:
    """H200 training loops and their fixes: the suggestion the fix answers came true, the step change is
    explained by named parts, and the CI gate fires in the slower direction only."""
    from tracekit.report.diff_text import slower_message

    before, after = analysed(pair[0]), analysed(pair[1])
    d = diff(before, after, suggest(before))
    memcpy = []
    for name, a in zip(pair, (before, after), strict=True):
        steps = selected(a)
        _, activities = raw(SAMPLES / f"{name}.trace.json.gz")
        memcpy.append(sum(dur for n, _, dur, s in activities if s in steps and n.startswith("Memcpy")) / len(steps))
    classes = d.classes.set_index("class")
    assert classes.loc["memcpy", BEFORE] == pytest.approx(memcpy[0], rel=1e-6)
    assert classes.loc["memcpy", AFTER] == pytest.approx(memcpy[1], rel=1e-6)
    check = next(s for s in d.suggestions if s.id == fired)
    assert check.outcome == "came true"
    assert d.attributed_share >= 0.8
    assert d.step.delta < 0
    assert slower_message(d, 5) is None and slower_message(diff(after, before, suggest(after)), 5) is not None
