"""Gradient accumulation (detectors/accumulation.py) and larger_batch's fewer, larger micro-batches: a synthetic step of k forward+backward passes before one optimizer step, its near misses, the what-if by hand and the real fixed trace (one full batch) silent."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_suggestions_kernels import _analysis
from test_whatif_loops import _model
from tracebuilder import TraceBuilder

from tracekit.model.whatif import batch_forwards
from tracekit.suggestions import rules_memory
from tracekit.suggestions.rules import RULES_BY_ID

F32 = "float"
LINEAR = ("aten::linear", [[4, 128, 64], [256, 64], [256]], [F32, F32, F32], "nvjet_sm90_tst_64x64_64x13_4x2_h_bz_NNT")
RELU = ("aten::relu", [[4, 128, 256]], [F32], "void at::native::vectorized_elementwise_kernel<relu>")
BACKWARD = ("autograd::engine::evaluate_function: ReluBackward0", "autograd::engine::evaluate_function: AddmmBackward0")
MAIN, AUTOGRAD = 100, 200
FIXED = Path(__file__).resolve().parents[1] / "sample_traces" / "heldout4" / "ho4_micro_batches_fixed.trace.json.gz"


def accumulation_trace(tmp_path, k: int = 4, backward_each: bool = True, vary: bool = False):
    """A 1000 µs step: `k` micro-batches, each a forward of 2 ops on the main thread (linear, relu) and a
    backward of 2 evaluate_function ops on the autograd thread, every op 8 µs long at a 10 µs stride with
    one 2 µs kernel launched 1 µs in; then one fused optimizer op (one 2 µs kernel). `backward_each`
    False: the k forwards, then one backward (a layer stack); `vary`: each micro-batch 4 + i sequences."""
    b = TraceBuilder()
    cpu = 100.0

    def op(name: str, tid: int, kernel: str, dims: list | None = None, types: list | None = None) -> None:
        nonlocal cpu
        args = {"Input Dims": dims, "Input type": types} if dims is not None else {}
        ext = b.op(name, cpu, 8, tid=tid, **args)
        b.launch(cpu + 1, 1, kernel, cpu + 3, 2, ext=ext, tid=tid)
        cpu += 10

    def backward() -> None:
        for name in BACKWARD:
            op(name, AUTOGRAD, "void at::native::vectorized_elementwise_kernel<backward>")

    for i in range(k):
        for name, dims, types, kernel in (LINEAR, RELU):
            op(name, MAIN, kernel, [[d[0] + i, *d[1:]] if vary and len(d) == 3 else d for d in dims], types)
        if backward_each:
            backward()
    if not backward_each:
        backward()
    op("aten::_fused_adamw_", MAIN, "void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor>", [[]], [F32])
    b.annotation("ProfilerStep#1", 0, 1000)
    return b.write(tmp_path / "accumulate.json")


def test_accumulation_found_and_priced_as_traced(tmp_path):
    a = _analysis(accumulation_trace(tmp_path))
    (row,) = a.ranks[0].patterns.accumulation.to_dict("records")
    # 4 passes of 4 launches (2 forward + 2 backward), 16 kernels × 2 µs = 32 µs; the forward's first
    # inputs: linear 4×128×64 + relu 4×128×256 fp32 = (32768 + 131072) × 4 B = 655360 B
    assert (row["micro_batches"], row["launches"]) == (4, 4)
    assert row["gpu_us"] == pytest.approx(32.0)
    assert row["input_bytes"] == pytest.approx(655360.0)
    assert row["ops"] == "linear → relu"
    assert int(a.ranks[0].patterns.in_accumulation.sum()) == 16  # the optimizer's kernel is not a pass's
    s = RULES_BY_ID["larger_batch"].run(a)
    # one micro-batch of 4×: the step − max(1000 / 4, the passes' batched GPU time (≤ 32 µs) + the
    # optimizer's 2 µs) = 1000 − 250 = 750 µs
    assert s.id == "larger_batch" and s.saving_us == pytest.approx(750.0)
    assert "4 times with the same shapes" in s.title and "memory not recorded" in s.title
    e = s.evidence[0]
    assert (e["micro_batches"], e["micro_batch_multiple"], e["memory_recorded"]) == (4, 4, False)
    # with memory recorded and room for 2.5× the batch: 2× larger micro-batches: 1000 − 1000 / 2 = 500 µs
    half = rules_memory.micro_batches(a, 2.5)
    assert half is not None and half.saving_us == pytest.approx(500.0)
    assert half.evidence[0]["micro_batch_multiple"] == 2
    assert rules_memory.micro_batches(a, 1.5) is None  # no room for 2×


@pytest.mark.parametrize("case", ["one", "layers", "shapes"])
def test_accumulation_near_misses(tmp_path, case):
    """One micro-batch; the forwards repeated with one backward after all of them (a layer stack, not
    accumulation); micro-batches of different sizes (not one batch without padding)."""
    path = {"one": lambda: accumulation_trace(tmp_path, k=1),
            "layers": lambda: accumulation_trace(tmp_path, backward_each=False),
            "shapes": lambda: accumulation_trace(tmp_path, vary=True)}[case]()
    a = _analysis(path)
    assert not len(a.ranks[0].patterns.accumulation)
    assert RULES_BY_ID["larger_batch"].run(a) is None


def test_batch_forwards_over_the_passes_only_by_hand(tmp_path):
    """whole_step=False on test_whatif.py's launch loop (projected: first gap 5.6875 µs, calls 3 µs,
    gaps 40 µs, kernels 8 µs after their call, a 130 µs tail; 955.6875 µs), k = 2 over the first 10
    launches of each step, kernels of unknown cost (each keeps its time): their gaps and calls halve
    (2.84375, 20 µs, 1.5 µs), the other 10 and the tail stay. Call 19 starts at 2.84375 + 1.5 + 9 × 21.5
    + 40 + 9 × 43 = 624.84375; the CPU ends at 624.84375 + 3 + 130 = 757.84375 µs, after the GPU
    (624.84375 + 8 + 10)."""
    _, model, n_gpu = _model(tmp_path)
    assert n_gpu == 40  # 2 steps × 20 launches, in time order
    first = np.tile(np.arange(20) < 10, 2)
    out = model.what_if(batch_forwards(2.0, first, np.full(n_gpu, np.nan), whole_step=False))
    assert out.saving_us / out.steps == pytest.approx(955.6875 - 757.84375)


@pytest.mark.skipif(not FIXED.exists(), reason="sample_traces/heldout4 not present")
def test_silent_on_the_full_batch_h200_trace():
    """benchmarks/heldout4/micro_batches.py --variant full on the H200: the 256 sequences in one
    forward/backward per optimizer step: no accumulation, larger_batch silent."""
    import tracekit
    from tracekit.analyzers.analysis import analyze

    a = analyze(tracekit.load_trace(FIXED))
    assert not len(a.ranks[0].patterns.accumulation)
    assert RULES_BY_ID["larger_batch"].run(a) is None


def test_diff_credits_fewer_micro_batches(tmp_path):
    """The change shows when the passes per optimizer step halve: 4 → 1 (one micro-batch: a training
    trace without accumulation) is made; 4 → 4 is not."""
    from tracekit.compare.applied import applied, micro_batches_per_step

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    four = _analysis(accumulation_trace(tmp_path / "a"))
    one = _analysis(accumulation_trace(tmp_path / "b", k=1))
    assert (micro_batches_per_step(four), micro_batches_per_step(one)) == (4.0, 1.0)
    made = applied("larger_batch", four, one)
    assert made.applied is True and made.evidence.startswith("forward+backward passes per optimizer step 4")
    assert applied("larger_batch", four, four).applied is False


def test_each_step_gets_its_own_passes_and_gpu_time(tmp_path):
    """Three 1000 µs ProfilerSteps with 2, 3 and 4 micro-batches (each: linear and relu forward on the
    main thread, two backward nodes on the autograd thread, one 2 µs kernel per op), then the optimizer:
    per step 4 launches per pass and k × 4 × 2 µs of GPU time (16, 24, 32 µs); 36 kernels in passes."""
    b = TraceBuilder()
    for step, k in enumerate((2, 3, 4)):
        cpu = 1000.0 * step + 100.0
        b.annotation(f"ProfilerStep#{step + 1}", 1000.0 * step, 1000)
        passes = [(LINEAR[0], MAIN, LINEAR[3], LINEAR[1], LINEAR[2]), (RELU[0], MAIN, RELU[3], RELU[1], RELU[2])]
        passes += [(name, AUTOGRAD, "void at::native::vectorized_elementwise_kernel<backward>", None, None)
                   for name in BACKWARD]
        for _ in range(k):
            for name, tid, kernel, dims, types in passes:
                args = {"Input Dims": dims, "Input type": types} if dims is not None else {}
                ext = b.op(name, cpu, 8, tid=tid, **args)
                b.launch(cpu + 1, 1, kernel, cpu + 3, 2, ext=ext, tid=tid)
                cpu += 10
        ext = b.op("aten::_fused_adamw_", cpu, 8, tid=MAIN, **{"Input Dims": [[]], "Input type": [F32]})
        b.launch(cpu + 1, 1, "void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor>", cpu + 3, 2,
                 ext=ext, tid=MAIN)
    a = _analysis(b.write(tmp_path / "steps.json"))
    rows = a.ranks[0].patterns.accumulation.to_dict("records")
    assert [(r["step"], r["micro_batches"], r["launches"]) for r in rows] == [(1, 2, 4), (2, 3, 4), (3, 4, 4)]
    assert [r["gpu_us"] for r in rows] == pytest.approx([16.0, 24.0, 32.0])
    assert int(a.ranks[0].patterns.in_accumulation.sum()) == 36


def test_rows_by_key_is_each_keys_rows_in_order():
    from tracekit.trace.grouping import rows_by_key

    rng = np.random.default_rng(2)
    for n in (0, 1, 9, 300):
        key = rng.integers(-1, 6, n)
        rows = np.sort(rng.choice(n, size=n // 2, replace=False)) if n else np.zeros(0, dtype=np.int64)
        got = rows_by_key(rows, key)
        want = {k: rows[key[rows] == k] for k in sorted(set(key[rows].tolist()))}
        assert list(got) == list(want)
        assert all(got[k].tolist() == want[k].tolist() for k in want)
