"""Rule use_kv_cache: synthetic greedy generation loops that re-run a small decoder over the whole growing
sequence for every token, with savings derived by hand (and near misses: a model with a cache, too few
tokens, sizes from the data, a sweep over lengths, a backward pass, a saving below 2 % of the step)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from shared_analysis import analysed_file
from test_suggestions_kernels import _analysis
from tracebuilder import TraceBuilder

from tracekit.analyzers.detectors import generation as gn
from tracekit.compare.applied import Applied, applied
from tracekit.suggestions import rules_cache
from tracekit.suggestions.rules import RULES_BY_ID

B, D, N, V, H = 8, 1024, 4096, 32000, 16  # batch, width, MLP width, vocabulary, heads (of 64)
BF16, LONG = "c10::BFloat16", "long int"
GEMM = "nvjet_sm90_tst_128x128_64x4_1x2_h_bz_coopA_NNT"
FLASH = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t>>"
EW = "void at::native::vectorized_elementwise_kernel<4, at::native::{}>"
BW, PEAK = 4800e9, 989.4e12  # H200 SXM: HBM bytes/s, bf16 dense FLOP/s (analyzers/devices.py)


def forward(q: int, kv: int, rows: int) -> list[tuple[str, list, list, str, float]]:
    """One decoder forward: (op, Input Dims, Input type, kernel, kernel µs); `rows` positions through the
    weight GEMMs, `q` query and `kv` key positions in the attention."""
    x = [B, rows, D]
    return [("aten::embedding", [[V, D], [B, rows]], [BF16, LONG], EW.format("embedding"), 1.0),
            ("aten::linear", [x, [N, D], [N]], [BF16] * 3, GEMM, 50.0),
            ("aten::scaled_dot_product_attention", [[B, H, q, 64], [B, H, kv, 64], [B, H, kv, 64]], [BF16] * 3, FLASH, 1.0),
            ("aten::linear", [[B, rows, N], [D, N], [D]], [BF16] * 3, GEMM, 50.0),
            ("aten::argmax", [[B, V], [], []], [BF16, "Scalar", "Scalar"], EW.format("argmax"), 1.0),
            ("aten::cat", [[[B, kv], [B, 1]], []], ["TensorList", "Scalar"], EW.format("cat"), 1.0)]


def trace(tmp_path: Path, forwards: list[list[tuple[str, list, list, str, float]]], before_us: float = 0.0,
          backward: bool = False, blocked: range = range(0)) -> Path:
    """One step: the forwards' ops one after another on the main thread every 10 µs (8 µs each), each
    launching its kernel 1 µs in (a 1 µs call); kernels start 5 µs after their launch or when the one
    before ends; a device sync after the last op waits for the GPU. The launch calls of the ops at
    `blocked` (indices) take 5 µs (a full launch queue). `before_us`: a kernel of that length before the loop; `backward`: an autograd node."""
    b = TraceBuilder()
    cpu, free = 10.0, 0.0
    ops = [op for f in forwards for op in f]
    if before_us:
        ops = [("aten::mm", [[4096, 4096], [4096, 4096]], [BF16] * 2, GEMM, before_us), *ops]
    if backward:
        ops.append(("autograd::engine::evaluate_function: MmBackward0", [], [], GEMM, 1.0))
    for i, (name, dims, types, kernel, dur) in enumerate(ops):
        ext = b.op(name, cpu, 8, **{"Input Dims": dims, "Input type": types})
        start = max(cpu + 6, free)
        b.launch(cpu + 1, 5 if i in blocked else 1, kernel, start, dur, ext=ext)
        free, cpu = start + dur, cpu + 10
    end = max(cpu, free)  # a torch.cuda.synchronize() at the end of the step waits for the GPU
    b.launch(cpu, end - cpu + 1, None, 0, 0, api="cudaDeviceSynchronize")
    b.annotation("ProfilerStep#1", 0, end + 10)
    return b.write(tmp_path / "gen.json")


def no_cache(lengths: list[int]) -> list[list[tuple[str, list, list, str, float]]]:
    return [forward(n, n, n) for n in lengths]


def gemm_after(length: int, w_rows: int, w_cols: int) -> float:
    """One linear of x [B, L, w_cols] · W [w_rows, w_cols]ᵀ at one position (f = 1/L), by hand: the
    weights read whole, the rest of its bytes (x, bias, output; linear's op model) and FLOPs × f."""
    weights = 2.0 * w_rows * w_cols
    rest = 2.0 * (B * length * w_cols + w_rows + B * length * w_rows)
    flops = 2.0 * B * length * w_rows * w_cols
    return max(flops / length / PEAK, (weights + rest / length) / BW) * 1e6


def test_fires_on_generation_without_a_cache(tmp_path):
    a = _analysis(trace(tmp_path, no_cache([512, 513, 514, 515, 516, 517])))
    table = a.ranks[0].patterns.generation
    assert table[[gn.GN_FORWARDS, gn.GN_FIRST, gn.GN_LAST, gn.GN_STRIDE, gn.GN_GEMMS, gn.GN_LAUNCHES]].values.tolist() \
        == [[6, 512, 517, 1, 2, 6]]
    # the 5 forwards after the first: 6 kernels each (2 GEMMs of 50 µs, 4 others of 1 µs): 520 µs of GPU;
    # their host time from the second forward's first op (ts 10 + 6 × 10 = 70) to the last op's end (op 35: ts 360 + 8)
    assert table[gn.GN_GPU_US].iat[0] == pytest.approx(520.0)
    assert table[gn.GN_HOST_US].iat[0] == pytest.approx(298.0)
    share = a.ranks[0].patterns.generation_share
    assert (share > 0).sum() == 30 and share[share > 0].min() == pytest.approx(1 / 517)
    assert np.unique(share[share > 0]).tolist() == pytest.approx(sorted([1 / n for n in (517, 516, 515, 514, 513)] + [1.0]))
    # at one position each GEMM reads its 8 MiB of weights: (8 388 608 + 81 920 + ~16 B) / 4.8 TB/s ≈ 1.765 µs;
    # the 1 µs kernels stay 1 µs (MIN_KERNEL_US); the argmax ([8, 32000] every token) keeps its time
    gemms = sum(gemm_after(n, N, D) + gemm_after(n, D, N) for n in (513, 514, 515, 516, 517))
    assert gemms / 10 == pytest.approx(1.7648, abs=1e-3)
    cached = gemms + 5 * 4 * 1.0
    s = RULES_BY_ID["use_kv_cache"].run(a)
    # max(host 298, GPU 520) − max(host 298, cached ≈ 37.6) = 520 − 298 = 222 µs
    assert s.saving_us == pytest.approx(520.0 - 298.0)
    row = s.evidence[0]
    assert row["cached_gpu_us_per_step"] == pytest.approx(cached)
    assert (row["forwards_per_step"], row["lengths"], row["stride"], row["launches_per_forward"]) == (6, "512–517", 1, 6)
    assert row["weight_bytes_per_forward"] == pytest.approx(2 * 2.0 * N * D)
    assert "Use a KV cache" in s.title and "past_key_values" in s.snippet and "= 222 µs per step" in s.formula


def test_the_launch_path_leaves_out_a_full_queue(tmp_path):
    """The third forward's 6 launch calls take 5 µs instead of 1 (blocked on a full launch queue): the
    loop's fast launch (10th percentile of its 36 calls) is 1 µs, so 6 × 4 µs are the GPU's time, not
    the launch path: 298 − 24 = 274 µs."""
    a = _analysis(trace(tmp_path, no_cache([512, 513, 514, 515, 516, 517]), blocked=range(12, 18)))
    assert a.ranks[0].patterns.generation[gn.GN_HOST_US].iat[0] == pytest.approx(274.0)


def test_host_bound_after_the_gpu_work_is_gone(tmp_path):
    """Kernels of 10 µs: GPU 5 × (2 × 10 + 4) = 120 µs of the later forwards, under their 298 µs of host:
    nothing to gain (the launch path stays), the rule is silent."""
    path = trace(tmp_path, [[(o, d, t, k, 10.0 if k == GEMM else us) for o, d, t, k, us in f]
                            for f in no_cache([512, 513, 514, 515, 516, 517])])
    a = _analysis(path)
    assert len(a.ranks[0].patterns.generation) == 1
    assert rules_cache.use_kv_cache(a) is None


@pytest.mark.parametrize("case", ["cached", "three", "samples", "sweep", "backward"])
def test_near_misses(tmp_path, case):
    """A model with a cache (prefill over 512, then one position per token attending to 513..517 cached
    keys: only the attention's keys grow); three tokens (MIN_FORWARDS = 4); sizes from the data (per-sample
    lengths); a sweep over lengths 128, 256, 384, 512, 640 (the stride as large as the first length); and
    the same loop with a backward pass (training)."""
    if case == "cached":
        forwards = [forward(512, 512, 512)] + [forward(1, n, 1) for n in (513, 514, 515, 516, 517)]
    elif case == "three":
        forwards = no_cache([512, 513, 514])
    elif case == "samples":
        forwards = no_cache([300, 512, 417, 389, 450, 301])
    elif case == "sweep":
        forwards = no_cache([128, 256, 384, 512, 640])
    else:
        forwards = no_cache([512, 513, 514, 515, 516, 517])
    a = _analysis(trace(tmp_path, forwards, backward=case == "backward"))
    if case != "backward":
        assert len(a.ranks[0].patterns.generation) == 0 and not a.ranks[0].patterns.generation_share.any()
    assert rules_cache.use_kv_cache(a) is None


def test_silent_below_two_percent_of_the_step(tmp_path):
    """A 20 ms kernel before the loop: the 222 µs saving is ~1.1 % of the step."""
    a = _analysis(trace(tmp_path, no_cache([512, 513, 514, 515, 516, 517]), before_us=20_000.0))
    assert len(a.ranks[0].patterns.generation) == 1
    assert rules_cache.use_kv_cache(a) is None


def test_what_if_and_applied(tmp_path):
    """Through the pipeline (what-if replay on the projected step, which keeps this trace's 659 µs: no
    profiler excess to remove in 1 µs launch calls). By hand: the first forward's kernels end at 129 µs
    (16–17, GEMM 26–76, 76–77, GEMM 77–127, 127–128, 128–129); each later kernel then takes its
    one-position time (GEMMs ≈ 1.765 µs, the others 1 µs) and starts 5 µs after its launch, so the GPU
    has caught up by the third forward and ends with the last launch's kernel (ts 361 + 5 + 1 = 367);
    the host as it is: its last op ends its 10 µs slot at 370, the sync returns at once, and the step's
    10 µs tail ends it at 380 µs: 659 − 380 = 279 µs saved (the traced estimate, 222 µs, sets the later
    forwards' host time against their GPU time alone). The cached model's trace shows the change: no
    forward over the whole sequence is left."""
    before = analysed_file(trace(tmp_path, no_cache([512, 513, 514, 515, 516, 517])))
    (tmp_path / "after").mkdir()
    after = analysed_file(trace(tmp_path / "after", [forward(512, 512, 512)]
                               + [forward(1, n, 1) for n in (513, 514, 515, 516, 517)]))
    s = next(x for x in before.suggestions if x.id == "use_kv_cache")
    assert s.whatif.startswith("what-if replay") and before.analysis.unprofiled.step_us == pytest.approx(659.0)
    assert s.saving_us == pytest.approx(659.0 - 380.0) and s.traced_saving_us == pytest.approx(222.0)
    assert before.suggestions[0].id == "use_kv_cache"
    assert "use_kv_cache" not in {x.id for x in after.suggestions}
    assert applied("use_kv_cache", before.analysis, after.analysis) \
        == Applied(True, "forwards over the whole sequence per step 6.0 → 0.0")
