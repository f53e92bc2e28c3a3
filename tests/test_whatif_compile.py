"""The torch.compile what-if (model/whatif_runs.py compile_runs): runs of elementwise launches become one
fused kernel each, with the eager dispatch between them gone; numbers derived by hand on a synthetic trace."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from shared_analysis import analysed_file
from tracebuilder import TraceBuilder

from tracekit.model.whatif_runs import compile_runs
from tracekit.suggestions.whatif_evidence import class_rows

GEMM = "ampere_sgemm_128x64_nn"
MUL = "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, MulFunctor<float>>>"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>"
GELU = "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>"


def chain_trace(path: Path) -> Path:
    """Each 400 µs step: aten::mm launches a 20 µs GEMM; aten::mul, aten::add, aten::gelu (each 30 µs
    apart) launch 10 µs elementwise kernels: a run of 3; aten::mm again; then one lone aten::add (a
    run of 1: nothing to fuse)."""
    b = TraceBuilder()
    for s in range(6):
        t0 = s * 400
        b.annotation(f"ProfilerStep#{s}", t0, 400)
        b.launch(t0 + 12, 5, GEMM, t0 + 20, 20, ext=b.op("aten::mm", t0 + 10, 8))
        for j, (name, kernel) in enumerate((("aten::mul", MUL), ("aten::add", ADD), ("aten::gelu", GELU))):
            at = t0 + 50 + 30 * j
            b.launch(at + 2, 5, kernel, at + 10, 10, ext=b.op(name, at, 8))
        b.launch(t0 + 152, 5, GEMM, t0 + 160, 20, ext=b.op("aten::mm", t0 + 150, 8))
        b.launch(t0 + 202, 5, ADD, t0 + 210, 10, ext=b.op("aten::add", t0 + 200, 8))
    return b.write(path)


def test_a_run_of_three_becomes_one_launch_and_a_third_of_its_gpu_time(tmp_path: Path) -> None:
    result = analysed_file(chain_trace(tmp_path / "chain.json"))
    model, rank = result.models[0], result.analysis.ranks[0]
    step = model.steps[0]
    g = step.graph
    rows = class_rows(rank, ("elementwise",))
    costs = compile_runs(rows, 3.0)(step)
    calls = np.flatnonzero(g.gpu_launch >= 0)
    order = np.argsort(g.gpu_launch[calls])
    nodes = calls[order]  # GPU nodes in launch order: mm, mul, add, gelu, mm, add
    launch = g.gpu_launch[nodes]
    before_gap = step.costs.call_gap_us if step.costs.call_gap_us is not None else g.call_gap_us
    before_dur = step.costs.call_dur_us if step.costs.call_dur_us is not None else g.call_dur_us
    before_gpu = step.costs.gpu_dur_us if step.costs.gpu_dur_us is not None else g.gpu_dur_us
    # the run's head launch costs 3 µs; its two inner calls and the gaps before them are gone
    assert costs.call_dur_us[launch[1]] == 3.0
    assert list(costs.call_dur_us[launch[2:4]]) == [0.0, 0.0]
    assert list(costs.call_gap_us[launch[2:4]]) == [0.0, 0.0]
    assert costs.call_gap_us[launch[1]] == before_gap[launch[1]]  # the head keeps the gap before it
    # the run's kernels take a third of their 10 µs; the GEMMs and the lone add (a run of one) keep theirs
    assert costs.gpu_dur_us[nodes[1:4]] == pytest.approx(before_gpu[nodes[1:4]] / 3)
    for k in (0, 4, 5):
        assert costs.gpu_dur_us[nodes[k]] == before_gpu[nodes[k]]
        assert costs.call_dur_us[launch[k]] == before_dur[launch[k]]
    # with no elementwise rows nothing changes
    assert compile_runs(np.zeros_like(rows), 3.0)(step) is step.costs


CAST = "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)>"
MEAN = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>>>"
TRANSPOSE = "void cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, true, false>"


def cast_trace(path: Path, middle: tuple[tuple[str, str], ...], tail: tuple[tuple[str, str], ...] = ()) -> Path:
    """Each 400 µs step: aten::mm (20 µs GEMM), then aten::mul, the `middle` ops, aten::gelu, the
    `tail` ops (10 µs kernels, 30 µs apart), then aten::mm again."""
    b = TraceBuilder()
    ops = (("aten::mul", MUL), *middle, ("aten::gelu", GELU), *tail)
    for s in range(6):
        t0 = s * 400
        b.annotation(f"ProfilerStep#{s}", t0, 400)
        b.launch(t0 + 12, 5, GEMM, t0 + 20, 20, ext=b.op("aten::mm", t0 + 10, 8))
        for j, (name, kernel) in enumerate(ops):
            at = t0 + 50 + 30 * j
            b.launch(at + 2, 5, kernel, at + 10, 10, ext=b.op(name, at, 8))
        b.launch(t0 + 302, 5, GEMM, t0 + 310, 20, ext=b.op("aten::mm", t0 + 300, 8))
    return b.write(path)


def _fused_gpu_times(path: Path) -> list[float]:
    """The GPU times of the step's kernels (launch order) under fuse_elementwise's what-if."""
    from tracekit.suggestions.whatif import _fuse_elementwise

    result = analysed_file(path)
    model, rank = result.models[0], result.analysis.ranks[0]
    step = model.steps[0]
    g = step.graph
    costs = _fuse_elementwise(None, rank, 0.0)(step)  # the transform reads neither the suggestion nor the saving
    calls = np.flatnonzero(g.gpu_launch >= 0)
    before = step.costs.gpu_dur_us if step.costs.gpu_dur_us is not None else g.gpu_dur_us
    nodes = calls[np.argsort(g.gpu_launch[calls])]
    after = costs.gpu_dur_us if costs.gpu_dur_us is not None else before  # unchanged: the step's own costs
    return [float(after[n] / before[n]) for n in nodes]


def test_casts_and_reduce_kernels_join_the_run_that_compile_fuses(tmp_path: Path) -> None:
    # mul → copy_ (a dtype cast) → mean (torch's reduce kernel) → gelu: one run of 4, each kernel at 1/4
    path = cast_trace(tmp_path / "cast.json", (("aten::copy_", CAST), ("aten::mean", MEAN)))
    assert _fused_gpu_times(path) == pytest.approx([1.0, 0.25, 0.25, 0.25, 0.25, 1.0])


def test_a_cast_next_to_a_gemm_stays_its_own_kernel(tmp_path: Path) -> None:
    # mul → gelu → copy_ (autocast's cast of the next GEMM's operand: no fused kernel after it) → mm:
    # the cast is not between two fusable kernels, so only mul → gelu fuse (a run of 2, each at 1/2);
    # the cast keeps its time (suggestions/whatif_evidence.py operand_casts)
    path = cast_trace(tmp_path / "operand.json", (), (("aten::copy_", CAST),))
    assert _fused_gpu_times(path) == pytest.approx([1.0, 0.5, 0.5, 1.0, 1.0])


def test_a_cudnn_layout_transpose_still_splits_the_run(tmp_path: Path) -> None:
    # mul → nchwToNhwc (cuDNN's, class copy: the convolution's) → gelu: two runs of one, nothing fused
    path = cast_trace(tmp_path / "transpose.json", (("aten::cudnn_convolution", TRANSPOSE),))
    assert _fused_gpu_times(path) == pytest.approx([1.0] * 5)


def test_a_host_gap_longer_than_a_millisecond_inside_a_run_stays(tmp_path: Path) -> None:
    """aten::mul, then 1.5 ms of Python, then aten::add (a run of 2): the add's call still costs nothing
    more than the fused launch, but the 1.5 ms before it is not dispatch and stays (model/whatif.py
    LONG_GAP_US = 1 ms, as cuda_graph keeps it)."""
    b = TraceBuilder()
    for s in range(6):
        t0 = s * 2000
        b.annotation(f"ProfilerStep#{s}", t0, 2000)
        b.launch(t0 + 12, 5, GEMM, t0 + 20, 20, ext=b.op("aten::mm", t0 + 10, 8))
        b.launch(t0 + 52, 5, MUL, t0 + 60, 10, ext=b.op("aten::mul", t0 + 50, 8))
        b.launch(t0 + 1567, 5, ADD, t0 + 1575, 10, ext=b.op("aten::add", t0 + 1565, 8))
        b.launch(t0 + 1602, 5, GEMM, t0 + 1610, 20, ext=b.op("aten::mm", t0 + 1600, 8))
    result = analysed_file(b.write(tmp_path / "gap.json"))
    step = result.models[0].steps[0]
    g = step.graph
    costs = compile_runs(class_rows(result.analysis.ranks[0], ("elementwise",)), 3.0)(step)
    calls = np.flatnonzero(g.gpu_launch >= 0)
    launch = g.gpu_launch[calls[np.argsort(g.gpu_launch[calls])]]  # mm, mul, add, mm
    before_gap = step.costs.call_gap_us if step.costs.call_gap_us is not None else g.call_gap_us
    assert g.call_gap_us[launch[2]] > 1000  # the traced gap before the add: 1.5 ms of host time
    assert costs.call_gap_us[launch[2]] == before_gap[launch[2]]
    assert costs.call_dur_us[launch[2]] == 0.0  # the add is still fused into the mul's kernel


BATCH_NORM = "void at::native::batch_norm_transform_input_kernel<float, float, float, true, int>"


def _norm_trace(path: Path, training: bool) -> Path:
    """Each 400 µs step: aten::mm (20 µs GEMM), aten::mul (10 µs), aten::batch_norm (30 µs), aten::gelu
    (10 µs), 30 µs apart, aten::mm again; `training`: an autograd node op after them (no kernel)."""
    b = TraceBuilder()
    for s in range(6):
        t0 = s * 400
        b.annotation(f"ProfilerStep#{s}", t0, 400)
        b.launch(t0 + 12, 5, GEMM, t0 + 20, 20, ext=b.op("aten::mm", t0 + 10, 8))
        for j, (name, kernel, dur) in enumerate((("aten::mul", MUL, 10), ("aten::batch_norm", BATCH_NORM, 30),
                                                 ("aten::gelu", GELU, 10))):
            at = t0 + 50 + 40 * j
            b.launch(at + 2, 5, kernel, at + 10, dur, ext=b.op(name, at, 8))
        b.launch(t0 + 202, 5, GEMM, t0 + 210, 20, ext=b.op("aten::mm", t0 + 200, 8))
        if training:
            b.op("autograd::engine::evaluate_function: MulBackward0", t0 + 300, 5)
    return b.write(path)


def test_a_training_norm_bounds_its_fused_run(tmp_path: Path) -> None:
    """mul (10 µs) → batch_norm (30 µs) → gelu (10 µs), a run of 3. Inference: each kernel at 1/3 (the
    run 50 → 16.7 µs). Training: the norm computes its statistics over its whole input first, so the
    fused kernel takes the norm's 30 µs: each node 30 / 3 = 10 µs (mul 1.0, norm 1/3, gelu 1.0 of its time)."""
    assert _fused_gpu_times(_norm_trace(tmp_path / "infer.json", False)) == pytest.approx([1.0, 1 / 3, 1 / 3, 1 / 3, 1.0])
    assert _fused_gpu_times(_norm_trace(tmp_path / "train.json", True)) == pytest.approx([1.0, 1.0, 1 / 3, 1.0, 1.0])
