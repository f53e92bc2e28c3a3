"""Rule drop_checkpointing: forward ops re-run inside backward nodes (activation checkpointing)."""

from __future__ import annotations

from pathlib import Path

from tracebuilder import TraceBuilder

from tracekit.pipeline.local import analyse_file
from tracekit.suggestions import rules_recompute
from tracekit.suggestions.rules import RULES_BY_ID

GEMM = "nvjet_sm90_tst_128x128_64x4_1x2_h_bz_coopA_NNT"
LN = "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float, T const*)"
X = [8, 1024, 1024]
BWD = 2  # the autograd thread


def ckpt_trace(tmp_path: Path, recompute: bool = True, us: float = 100.0, steps: int = 2) -> Path:
    """Per step: a forward of layer_norm + linear (one kernel of `us` µs each) on thread 1, then on the
    autograd thread one backward node `AddmmBackward0` that (when `recompute`) re-runs that forward
    first (two kernels of `us` µs) and then runs its own formula (`aten::mm`, `us` µs). Steps 10 ms apart."""
    b = TraceBuilder()
    for k in range(steps):
        t = 10.0 + 10_000.0 * k
        g = t + 5
        for name, kern in (("aten::layer_norm", LN), ("aten::linear", GEMM)):
            ext = b.op(name, t, 8, **{"Input Dims": [X, [1024, 1024]], "Input type": ["c10::BFloat16", "c10::BFloat16"]})
            b.launch(t + 2, 2, kern, max(g, t + 4), us, ext=ext)
            g, t = max(g, t + 4) + us, t + 10
        t += 20
        node_end = t + (40 if recompute else 20)
        b.op("autograd::engine::evaluate_function: AddmmBackward0", t, node_end - t, tid=BWD)
        b.op("AddmmBackward0", t + 1, node_end - t - 2, tid=BWD)
        c = t + 2
        if recompute:
            for name, kern in (("aten::layer_norm", LN), ("aten::linear", GEMM)):
                ext = b.op(name, c, 8, tid=BWD, **{"Input Dims": [X, [1024, 1024]],
                                                   "Input type": ["c10::BFloat16", "c10::BFloat16"]})
                b.launch(c + 2, 2, kern, max(g, c + 4), us, ext=ext, tid=BWD)
                g, c = max(g, c + 4) + us, c + 10
        ext = b.op("aten::mm", c, 8, tid=BWD, **{"Input Dims": [[1024, 1024], [1024, 1024]],
                                                 "Input type": ["c10::BFloat16", "c10::BFloat16"]})
        b.launch(c + 2, 2, GEMM, max(g, c + 4), us, ext=ext, tid=BWD)
        g = max(g, c + 4) + us
        b.annotation(f"ProfilerStep#{k + 1}", 10_000.0 * k + 5, max(g, node_end) - 10_000.0 * k)
    return b.write(tmp_path / "ckpt.json")


def test_detector_finds_the_forward_re_run_in_backward(tmp_path: Path) -> None:
    result = analyse_file(ckpt_trace(tmp_path), with_suggestions=False)
    table = result.analysis.ranks[0].patterns.recompute
    # per step: one node re-running 2 forward ops, 2 launches, 2 kernels of 100 µs; aten::mm (the
    # node's own formula) is not part of it; activations: 2 ops × input [8, 1024, 1024] bf16 = 32 MiB
    assert table["regions"].tolist() == [1, 1]
    assert table["ops"].tolist() == [2, 2]
    assert table["kernels"].tolist() == [2, 2]
    assert table["time_us"].tolist() == [200.0, 200.0]
    assert table["activation_bytes"].tolist() == [2 * 8 * 1024 * 1024 * 2.0] * 2


def test_rule_fires_with_the_re_run_kernel_time(tmp_path: Path) -> None:
    result = analyse_file(ckpt_trace(tmp_path), with_suggestions=False)
    s = rules_recompute.drop_checkpointing(result.analysis)
    assert s is not None
    # traced estimate: 2 kernels × 100 µs per headline step × the headline steps
    steps = result.analysis.totals.steps
    assert abs(s.saving_us - 200.0 * steps) < 1e-6
    assert "if memory allows (~" in s.title
    assert RULES_BY_ID["drop_checkpointing"].snippet


def test_rule_silent_without_recompute(tmp_path: Path) -> None:
    result = analyse_file(ckpt_trace(tmp_path, recompute=False), with_suggestions=False)
    assert not len(result.analysis.ranks[0].patterns.recompute)
    assert rules_recompute.drop_checkpointing(result.analysis) is None


def test_rule_silent_below_the_bar(tmp_path: Path) -> None:
    # re-run kernels of 0.5 µs: 1 µs per step of ~5 ms steps (the 2 steps' span 10.5 ms), 0.02 % < 2 %
    result = analyse_file(ckpt_trace(tmp_path, us=0.5), with_suggestions=False)
    assert rules_recompute.drop_checkpointing(result.analysis) is None
