"""Rule drop_checkpointing: forward ops re-run inside backward nodes (activation checkpointing)."""

from __future__ import annotations

from pathlib import Path

from shared_analysis import analysed_file
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


def entry_trace(tmp_path: Path) -> Path:
    """One step on one thread: `aten::add` (0–30 µs, launch at 5–7), the checkpoint's tiny
    `aten::empty` (100–103), a `cudaStreamIsCapturing` (150–152), `_NoopSaveInputs` (200–250), then
    seven ops of 20 µs 10 µs apart from 290 (layer_norm, linear, gelu, add, ...), each launching one
    kernel 5 µs in."""
    b = TraceBuilder()
    ext = b.op("aten::add", 0, 30)
    b.launch(5, 2, GEMM, 10, 5, ext=ext)
    b.op("aten::empty", 100, 3)
    b.launch(150, 2, None, 0, 0, api="cudaStreamIsCapturing")
    b.op("_NoopSaveInputs", 200, 50)
    for i, name in enumerate(("aten::layer_norm", "aten::linear", "aten::gelu", "aten::add",
                              "aten::linear", "aten::gelu", "aten::add")):
        t = 290 + 30 * i
        ext = b.op(name, t, 20)
        b.launch(t + 5, 2, GEMM, t + 10, 5, ext=ext)
    b.annotation("ProfilerStep#1", 0, 520)
    return b.write(tmp_path / "entry.json")


def test_checkpoint_entry_cut_from_the_gaps_around_it(tmp_path: Path) -> None:
    """By hand: sibling gaps 70, 97, 40 and seven of 10 µs: median 10. The stretch runs from the end
    of the last sibling of ≥ 10 µs before `_NoopSaveInputs` (the add, 30; the 3 µs empty is the
    checkpoint's own) to the next op's start (290): 260 µs, less the usual 10, so 25/26 of what lies
    in each call's gap: the IsCapturing call's gap (from the add's launch end, 7) holds 30–150, 120 µs
    → 115.385; the layer_norm launch's gap (from 152) holds 152–290, 138 µs → 132.692. Nowhere else."""
    import numpy as np

    import tracekit
    from tracekit.analyzers.detectors.checkpoint_entry import entry_cuts
    from tracekit.trace import tables

    rank = tracekit.load_trace(entry_trace(tmp_path)).rank()
    cut = entry_cuts(rank, np.zeros(len(rank.ops), dtype=bool))
    names = rank.runtime[tables.RT_NAME].to_numpy(dtype=object)
    ts = rank.runtime[tables.RT_TS].to_numpy(dtype=float)
    origin = float(ts.min())  # the add's launch, at 5 in the file
    got = {(str(n), round(float(t) - origin + 5, 3)): float(c) for n, t, c in zip(names, ts, cut, strict=True) if c}
    assert got.keys() == {("cudaStreamIsCapturing", 150.0), ("cudaLaunchKernel", 295.0)}
    assert abs(got[("cudaStreamIsCapturing", 150.0)] - 120 * 25 / 26) < 1e-6
    assert abs(got[("cudaLaunchKernel", 295.0)] - 138 * 25 / 26) < 1e-6


HELDOUT5 = Path(__file__).resolve().parent.parent / "sample_traces" / "heldout5"


def test_heldout5_checkpoint_all_pair() -> None:
    """H200 heldout5 checkpoint_all (8 GPT blocks through checkpoint(use_reentrant=False)): measured
    unprofiled 36.06 → 23.46 ms without checkpointing, a 12.60 ms saving (sample_traces/heldout5/
    README.md). The re-runs alone priced 5.34 ms (−58 %); with the forward's checkpoint entries
    (32 in the 4 steps, ~446 µs each as traced, from the raw events: the previous block's last
    `aten::add` to the next `aten::layer_norm`, against ~40 µs between blocks without checkpointing)
    8.64 ms (−31 %), second behind cuda_graphs. Silent on the variant without checkpointing."""
    before = analysed_file(HELDOUT5 / "ho5_checkpoint_all.trace.json.gz")
    patterns = before.analysis.ranks[0].patterns
    assert (patterns.recompute_entry_us > 0).sum() == 64  # the IsCapturing call and the first launch, per entry
    assert abs(patterns.recompute_entry_us.sum() / 32 - 446) < 10
    s = next(x for x in before.suggestions if x.id == "drop_checkpointing")
    assert abs(s.per_step_us - 8641) < 0.02 * 8641
    assert abs(s.per_step_us - 12600) / 12600 < 0.35
    after = analysed_file(HELDOUT5 / "ho5_checkpoint_all_no_checkpoint.trace.json.gz")
    assert all(x.id != "drop_checkpointing" for x in after.suggestions)
