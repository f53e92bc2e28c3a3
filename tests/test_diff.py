"""tracekit diff: per-step deltas by class / op+shapes / kernel name on synthetic traces with known answers,
the CLI (text, JSON, HTML, --fail-if-slower exit codes, bad input)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import tracekit_in_process
from tracebuilder import TraceBuilder

from tracekit.analyzers import analyze
from tracekit.compare.diff import AFTER, BEFORE, DELTA, diff
from tracekit.suggestions import suggest
from tracekit.trace.load import load_trace

SHAPES = {"Input Dims": [[64, 64], [64, 64]], "Input type": ["float", "float"]}
FP32_GEMM = "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize32x32x8_stage3"
TF32_GEMM = "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>"
STEPS = 6


def step_span(gemm_us: float, n_add: int, add_us: float) -> float:
    """The step length the builder below lays out: 100 µs lead-in, the GEMM, the adds, 50 µs tail."""
    return 100 + gemm_us + n_add * (add_us + 12) + 50


def build(path: Path, gemm: str, gemm_us: float, n_add: int, add_us: float, *, add_name: str = ADD) -> Path:
    """STEPS identical ProfilerSteps: one aten::mm GEMM then n_add aten::add kernels, back to back."""
    b = TraceBuilder()
    span = step_span(gemm_us, n_add, add_us)
    for s in range(STEPS):
        t0 = s * span
        b.annotation(f"ProfilerStep#{s}", t0, span)
        ext = b.op("aten::mm", t0 + 10, 20, **SHAPES)
        b.launch(t0 + 12, 5, gemm, t0 + 100, gemm_us, ext=ext)
        t = t0 + 100 + gemm_us
        for _ in range(n_add):
            ext = b.op("aten::add", t - 8, 6, **SHAPES)
            b.launch(t - 7, 4, add_name, t + 12, add_us, ext=ext)
            t += add_us + 12
    return b.write(path)


def compare(before: Path, after: Path):
    """diff of the two traces' analyses, with BEFORE's suggestions."""
    a = analyze(load_trace(before))
    return diff(a, analyze(load_trace(after)), suggest(a))


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    # before: fp32 GEMM 400 µs + 4 adds of 30 µs; after: TF32 GEMM 100 µs + 1 add of 40 µs
    return (build(tmp_path / "before.json", FP32_GEMM, 400, 4, 30),
            build(tmp_path / "after.json", TF32_GEMM, 100, 1, 40))


def test_per_step_metrics_and_classes(pair: tuple[Path, Path]) -> None:
    d = compare(*pair)
    # every step is identical, so per-step values do not depend on which steps are steady
    assert d.step.before == pytest.approx(step_span(400, 4, 30))  # 718
    assert d.step.after == pytest.approx(step_span(100, 1, 40))  # 302
    assert d.step.pct == pytest.approx(100 * (302 - 718) / 718)
    assert d.step.ratio == pytest.approx(718 / 302)
    assert d.metric("gpu_busy_us").before == pytest.approx(400 + 4 * 30)
    assert d.metric("gpu_busy_us").after == pytest.approx(100 + 40)
    assert d.metric("kernels").before == pytest.approx(5) and d.metric("kernels").after == pytest.approx(1 + 1)
    classes = d.classes.set_index("class")
    assert classes.loc["gemm", BEFORE] == pytest.approx(400)
    assert classes.loc["gemm", AFTER] == pytest.approx(100)
    assert classes.loc["gemm", DELTA] == pytest.approx(-300)
    assert classes.loc["elementwise", DELTA] == pytest.approx(40 - 120)
    assert d.classes["class"].iloc[0] == "gemm"  # largest |delta| first
    idle = d.idle.set_index("part")
    assert idle.loc["gpu_idle", BEFORE] == pytest.approx(718 - 520)
    assert idle.loc["gpu_idle", AFTER] == pytest.approx(302 - 140)
    # span = busy + idle, and the busy part is all named classes here (one stream, no overlap)
    assert d.attributed_share is not None and d.attributed_share > 0.8
    # analyze() without the execution model: nothing projected, the traced step is the headline
    assert d.projected is None and d.measured is None and d.headline is d.step and d.headline_kind == "as traced"


def test_ops_matched_by_op_and_shapes_and_kernels_by_name(pair: tuple[Path, Path]) -> None:
    d = compare(*pair)
    ops = d.ops.set_index("op")
    mm = ops.loc["aten::mm"]
    assert mm["match"] == "op+shapes"  # same op, same shapes, another kernel
    assert mm["kernels_before"] == FP32_GEMM and mm["kernels_after"] == TF32_GEMM
    assert mm[DELTA] == pytest.approx(-300)
    assert ops.loc["aten::add", "match"] == "op+shapes"
    kernels = d.kernels.set_index("name")
    assert kernels.loc[FP32_GEMM, "match"] == "vanished" and kernels.loc[TF32_GEMM, "match"] == "new"
    assert kernels.loc[ADD, "match"] == "name"
    assert kernels.loc[ADD, DELTA] == pytest.approx(40 - 120)
    assert d.moved["op"].iloc[0] == "aten::mm"


def test_kernel_match_across_ops(tmp_path: Path) -> None:
    """The same kernel launched by another op (a graph replay has none) is matched by its name."""
    before = build(tmp_path / "b.json", FP32_GEMM, 200, 0, 0)
    b = TraceBuilder()
    span = step_span(200, 0, 0)
    for s in range(STEPS):
        t0 = s * span
        b.annotation(f"ProfilerStep#{s}", t0, span)
        b.launch(t0 + 12, 5, FP32_GEMM, t0 + 100, 200, api="cudaGraphLaunch")
    after = b.write(tmp_path / "a.json")
    d = compare(before, after)
    assert set(d.ops["match"]) == {"kernel"}
    assert d.kernels.set_index("name").loc[FP32_GEMM, "match"] == "name"


def tk_process(*args: str | Path) -> subprocess.CompletedProcess:
    """`tracekit ARGS` in a fresh process: its exit status and output as the shell sees them."""
    return subprocess.run([sys.executable, "-m", "tracekit", *map(str, args)], capture_output=True,
                          text=True, env=os.environ.copy(), check=False)


tk = tracekit_in_process  # the same command in this process (the gate's exit status: tk_process above)


def test_cli_fail_if_slower(pair: tuple[Path, Path]) -> None:
    before, after = pair
    faster = tk("diff", "-q", before, after, "--fail-if-slower", "5")
    assert faster.returncode == 0, faster.stderr
    slower = tk_process("diff", "-q", after, before, "--fail-if-slower", "5")  # exit 1 from a real process
    assert slower.returncode == 1
    # The gate reads the projected unprofiled step (tracekit diff runs the execution model). By hand:
    # 718 µs traced (4 adds) has per step launch calls of 5 µs (mm) and 4 × 4 µs (adds): pooled, the
    # fast (10th percentile) launch is 4 µs, so each recorded CPU event costs 3.75 × (4 − 3.85) =
    # 0.5625 µs, and the median 4 µs launch loses 4 − 3 = 1 µs (mm 5 → 4, adds 4 → 3). Every kernel is
    # launch-bound (it starts 88 / 19 µs after its call) and the 50 µs tail is kept, so the step ends
    # earlier by what the chain lost: 6 events (step mark, mm, 4 adds) × 0.5625 + 5 × 1 = 8.375 µs:
    # 709.625 µs. 302 µs (1 add): fast launch 4 µs (same 0.5625 µs), median 4.5 µs loses 1.5 µs
    # (mm 5 → 3.5, add 4 → 3: 1 µs, the floor): 3 × 0.5625 + 1.5 + 1 = 4.1875 µs: 297.8125 µs.
    # 709.625 / 297.8125 = +138.3 %; gemm grew most (+300 µs per step, GPU time as traced)
    assert "(projected unprofiled) got 138.3% slower" in slower.stderr and "gemm grew most" in slower.stderr
    within = tk("diff", "-q", after, before, "--fail-if-slower", "200")
    assert within.returncode == 0


def test_cli_bad_input(tmp_path: Path, pair: tuple[Path, Path]) -> None:
    missing = tk("diff", pair[0], tmp_path / "nope.json")
    assert missing.returncode == 2 and "nope.json" in missing.stderr
    assert "Traceback" not in missing.stderr
    empty = tmp_path / "empty.json"
    empty.write_text("")
    bad = tk("diff", empty, pair[1], "--fail-if-slower", "5")
    assert bad.returncode == 2 and "empty.json" in bad.stderr and "Traceback" not in bad.stderr
    negative = tk("diff", pair[0], pair[1], "--fail-if-slower", "-3")
    assert negative.returncode == 2


def test_cli_json_schema(pair: tuple[Path, Path]) -> None:
    out = tk("diff", "--json", *pair)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["schema"] == "tracekit.diff/2"
    gemm = next(r for r in doc["classes"] if r["class"] == "gemm")
    assert (gemm["before_us_per_step"], gemm["after_us_per_step"], gemm["delta_us_per_step"]) == \
        pytest.approx((400, 100, -300))
    idle = next(r for r in doc["idle"] if r["part"] == "gpu_idle")
    assert idle["before_us_per_step"] == pytest.approx(198) and idle["delta_us_per_step"] == pytest.approx(162 - 198)
    for s in doc["suggestions"]:
        assert {"id", "predicted_us_per_step", "realised_us_per_step", "came_true"} <= set(s)
    assert doc["step"]["before"] == pytest.approx(718)
    # the CLI runs the model: the projected steps derived in test_cli_fail_if_slower lead
    assert doc["headline"]["kind"] == "projected unprofiled" and doc["headline"]["direction"] == "faster"
    assert (doc["headline"]["before"], doc["headline"]["after"]) == pytest.approx((709.625, 297.8125))
    assert doc["projected"]["delta"] == pytest.approx(297.8125 - 709.625) and doc["measured"] is None
    assert doc["headline"]["disagreement"] is None  # traced and projected both faster


def test_cli_text_and_html_escaped(tmp_path: Path) -> None:
    evil = "<script>alert(1)</script>\x1b[31m"
    before = build(tmp_path / "b.json", FP32_GEMM, 400, 2, 30, add_name=evil)
    after = build(tmp_path / "a.json", FP32_GEMM, 400, 1, 30)
    page = tmp_path / "d.html"
    out = tk("diff", before, after, "--html", page)
    assert out.returncode == 0, out.stderr
    assert "\x1b" not in out.stdout and "ops that moved most" in out.stdout
    html = page.read_text()
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "Content-Security-Policy" in html and "script-src 'none'" in html
    assert "http://" not in html and "https://" not in html
    again = tk("diff", "-q", before, after, "--html", page)  # exists, no --force: a numbered file beside
    assert again.returncode == 0 and (tmp_path / "d-1.html").exists()


def test_suggestion_outcomes() -> None:
    from tracekit.compare.diff import SuggestionCheck

    def outcome(predicted: float, realised: float | None, applied: bool | None = True) -> tuple[bool | None, str | None]:
        c = SuggestionCheck("x", "x", "part", predicted, 500, 400, applied=applied, realised_us_per_step=realised)
        return c.came_true, c.outcome

    assert outcome(100, 130) == (True, "came true")  # +30 %
    assert outcome(100, 65) == (True, "came true")  # -35 %: on the edge
    assert outcome(100, 140) == (False, "exceeded")  # +40 %
    assert outcome(100, 60) == (False, "fell short")
    assert outcome(100, 5) == (False, "untouched")  # the step moved by 5 % of the prediction
    assert outcome(100, -30) == (False, "worse")
    assert outcome(0, 100) == (None, None)
    # not credited or blamed unless AFTER shows the change: whatever the step did
    assert outcome(100, 130, applied=False) == (None, "unconfirmed")
    assert outcome(100, -30, applied=None) == (None, "unconfirmed")
    part = SuggestionCheck("x", "x", "part", 100, 500, 400)
    assert part.part_saving_us == 100 and part.realised_us_per_step is None


def test_warns_when_gpus_or_versions_differ(tmp_path: Path) -> None:
    before = build(tmp_path / "before.json", FP32_GEMM, 400, 4, 30)
    same = compare(before, build(tmp_path / "same.json", FP32_GEMM, 400, 4, 30))
    assert not [w for w in same.warnings if "different" in w]
    doc = json.loads(before.read_text())
    doc["deviceProperties"] = [{**doc["deviceProperties"][0], "name": "Tesla V100-SXM2-16GB"}]
    doc["cuda_runtime_version"] = 11080
    other = tmp_path / "v100.json"
    other.write_text(json.dumps(doc))
    before_doc = json.loads(before.read_text())
    before_doc["cuda_runtime_version"] = 12040
    before.write_text(json.dumps(before_doc))
    d = compare(before, other)
    assert "the traces ran on different GPUs (NVIDIA H200 -> Tesla V100-SXM2-16GB): the change is not only the code's" \
        in d.warnings
    assert "the traces come from different CUDA runtime versions (12040 -> 11080)" in d.warnings


def test_warns_when_pytorch_versions_differ(tmp_path: Path) -> None:
    # the version `tracekit profile` writes into the trace's "tracekit" object (profile/record.py)
    paths = []
    for name, version in (("old", "2.4.1+cu124"), ("new", "2.11.0+cu130")):
        path = build(tmp_path / f"{name}.json", FP32_GEMM, 400, 4, 30)
        doc = json.loads(path.read_text())
        doc["tracekit"] = {"torch": version}
        path.write_text(json.dumps(doc))
        paths.append(path)
    d = compare(*paths)
    assert "the traces come from different PyTorch versions (2.4.1+cu124 -> 2.11.0+cu130)" in d.warnings
    assert not [w for w in d.warnings if "different GPUs" in w]  # same device name on both sides
