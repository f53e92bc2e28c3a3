"""Weight-only int4 GEMMs (tinygemm, `aten::_weight_int4pack_mm`) at prefill-sized M: the op's FLOPs/bytes
model checked against the held-out trace's raw events by hand, rule int4_large_batch on the H100 pair
heldout8 int4_prefill (132.46 ms → 5.89 ms bare with bf16 weights; silent on both fixes), and a
synthetic trace worked by hand (a large-M call that fires, a decode call and a fast M = 256 call that
do not)."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from shared_analysis import analysed_file
from tracebuilder import TraceBuilder

from tracekit.analyzers import analyze
from tracekit.analyzers.costs.models import op_cost
from tracekit.compare.applied import applied
from tracekit.suggestions import rules_int4
from tracekit.suggestions.rules import RULES_BY_ID
from tracekit.trace.load import load_trace

HELDOUT8 = Path(__file__).resolve().parents[1] / "sample_traces" / "heldout8"
BASE = HELDOUT8 / "ho8_int4_prefill.trace.json.gz"
BF16_WEIGHTS = HELDOUT8 / "ho8_int4_prefill_bf16_weights.trace.json.gz"
DEQUANT = HELDOUT8 / "ho8_int4_prefill_dequant.trace.json.gz"
OP = "aten::_weight_int4pack_mm"
# the bare (unprofiled) step times of the three runs, ms (sample_traces/heldout8/README.md)
BARE_BASE_MS, BARE_BF16_MS, BARE_DEQUANT_MS = 132.46, 5.89, 10.34
BAND = 0.35  # the what-if within ±35 % of the measured saving (benchmarks/validate_pairs.py)


def _events(path: Path) -> list[dict]:
    """The trace's events, read with gzip + json (no tracekit code)."""
    with gzip.open(path, "rt") as fh:
        return json.load(fh)["traceEvents"]


def _raw_int4_calls(path: Path) -> list[dict]:
    """The trace's `_weight_int4pack_mm` CPU ops."""
    return [e for e in _events(path) if e.get("cat") == "cpu_op" and e.get("name") == OP]


def _mnk(e: dict) -> tuple[int, int, int]:
    """(M, N, K) by hand: x [M, K]; scales_and_zeros [K/group, N, 2]; the packed weight int32
    [N/8, K/(16·tiles), 32, tiles/2] (tiles = 8) says the same N and K."""
    x, packed, _, sz = e["args"]["Input Dims"]
    group = int(e["args"]["Concrete Inputs"][2])
    m, k = x
    n = sz[1]
    assert sz[0] * group == k and sz[2] == 2
    assert packed[0] * 8 == n and packed[1] * 16 * 2 * packed[3] == k  # tiles = 2 × the last dim
    return m, n, k


def test_raw_shapes_of_the_prefill_trace():
    calls = _raw_int4_calls(BASE)
    shapes = Counter(_mnk(e) for e in calls)
    # 4 steps × 2 layers: qkv [12288, 4096], o [4096, 4096], gate_up [28672, 4096], down [4096, 14336]
    assert shapes == {(4096, 12288, 4096): 8, (4096, 4096, 4096): 8, (4096, 28672, 4096): 8,
                      (4096, 4096, 14336): 8}
    steps = sum(1 for e in _events(BASE)
                if e.get("cat") == "user_annotation" and str(e.get("name")).startswith("ProfilerStep#"))
    assert steps == 4 and len(calls) / steps == 8  # 8 int4 GEMM calls per step


def test_flops_and_bytes_of_each_call_by_hand():
    for e in _raw_int4_calls(BASE):
        m, n, k = _mnk(e)
        a = e["args"]
        cost = op_cost(OP, a["Input Dims"], a["Input type"], a["Input Strides"], a["Concrete Inputs"])
        assert cost is not None and cost.dtype == "bf16"
        assert cost.flops == 2.0 * m * n * k
        # x bf16, the int4 weights N·K/2, the bf16 scales and zeros [K/128, N, 2], the output bf16
        assert cost.bytes == 2 * m * k + n * k / 2 + 2 * (k // 128) * n * 2 + 2 * m * n
    # the largest, gate_up: 2 · 4096 · 28672 · 4096 = 962.07 GFLOP per call
    e = next(e for e in _raw_int4_calls(BASE) if _mnk(e)[1] == 28672)
    a = e["args"]
    assert op_cost(OP, a["Input Dims"], a["Input type"], a["Input Strides"], a["Concrete Inputs"]).flops \
        == pytest.approx(962.07e9, rel=1e-5)
    # per step: 2 layers × 2·4096·4096·(12288 + 4096 + 28672 + 14336) = 3.986 TFLOP
    assert sum(2.0 * m * n * k for m, n, k in map(_mnk, _raw_int4_calls(BASE))) / 4 == pytest.approx(3.986e12, rel=1e-3)


def test_the_cpu_op_and_mismatched_scales():
    # _weight_int4pack_mm_for_cpu: the packed weight is uint8 [N, K/2]: the same N·K/2 bytes
    cost = op_cost("aten::_weight_int4pack_mm_for_cpu", [[32, 256], [512, 128], [], [2, 512, 2]],
                   ["float", "unsigned char", "Scalar", "float"], None, ["", "", "128", ""])
    assert cost is not None and cost.flops == 2.0 * 32 * 512 * 256
    assert cost.bytes == 4 * 32 * 256 + 512 * 256 / 2 + 4 * 2 * 512 * 2 + 4 * 32 * 512
    # scales that do not cover K in groups of 128: not this signature, unknown
    assert op_cost(OP, [[32, 256], [64, 2, 32, 4], [], [3, 512, 2]], ["c10::BFloat16", "int", "Scalar",
                   "c10::BFloat16"], None, ["", "", "128", ""]) is None


def test_rule_fires_first_on_the_prefill_within_the_band():
    result = analysed_file(BASE)
    ids = [s.id for s in result.suggestions]
    assert ids[0] == "int4_large_batch"
    s = result.suggestions[0]
    measured_ms = BARE_BASE_MS - BARE_BF16_MS  # 126.57 ms
    assert s.per_step_us / 1e3 == pytest.approx(measured_ms, rel=BAND)
    assert s.per_step_us / 1e3 == pytest.approx(125.5, abs=1.0)  # what tracekit predicts today
    assert {(e["m"], e["n"], e["k"]) for e in s.evidence} == {
        (4096, 12288, 4096), (4096, 4096, 4096), (4096, 28672, 4096), (4096, 4096, 14336)}
    # the traced estimate by hand: each row's cuBLAS reference = 2·M·N·K / (70 % × 989.4 TFLOP/s)
    # (compute-bound: the bf16 bytes / 3350 GB/s are far less), 6 calls of each over 3 steady steps
    ref = sum(6 * 2.0 * m * n * k / (0.7 * 989.4e12) * 1e6 for m, n, k in
              ((4096, 12288, 4096), (4096, 4096, 4096), (4096, 28672, 4096), (4096, 4096, 14336)))
    assert ref == pytest.approx(17.26e3, rel=1e-3)
    assert sum(e["new_time_us"] for e in s.evidence) == pytest.approx(ref, rel=1e-6)
    assert s.traced_saving_us == pytest.approx(sum(e["time_us"] for e in s.evidence) - ref, rel=1e-6)
    gate_up = next(e for e in s.evidence if e["n"] == 28672)
    assert (gate_up["int4_weight_bytes"], gate_up["bf16_weight_bytes"]) == (28672 * 4096 / 2, 28672 * 4096 * 2)
    assert 25 < gate_up["achieved_tflops"] < 35  # tinygemm at M = 4,096: ~3 % of the bf16 peak
    assert "_weight_int4pack_mm" in s.snippet and "F.linear" in s.snippet


@pytest.mark.parametrize("path", [BF16_WEIGHTS, DEQUANT], ids=["bf16_weights", "dequant"])
def test_silent_on_the_fixes(path: Path):
    result = analysed_file(path)
    assert "int4_large_batch" not in {s.id for s in result.suggestions}
    assert not _raw_int4_calls(path)
    got = applied("int4_large_batch", analysed_file(BASE).analysis, result.analysis)
    assert got.applied is True and got.evidence == "int4 GEMM calls with M ≥ 256 per step 8.0 → 0.0"


# --- synthetic: worked by hand -----------------------------------------------------------------

TINY = ("void at::native::tinygemm_m16n8k16_chunk_kernel<at::native::ALayout_RM<(at::native::KReductionType)0>, "
        "at::native::BLayout_TC_int4<8, 128>, at::native::ALayout_RM<(at::native::KReductionType)0>, 8, 8>"
        "(void const*, void const*, void const*, void*, int, int, int, int, int, int)")
BF16, N, K = "c10::BFloat16", 4096, 4096


def _int4_call(b: TraceBuilder, cpu: float, gpu: float, m: int, us: float) -> None:
    """One _weight_int4pack_mm(x [m, K], packed [N/8, K/128, 32, 4], 128, sz [K/128, N, 2]) of `us` µs."""
    ext = b.op(OP, cpu, 4, **{"Input Dims": [[m, K], [N // 8, K // 128, 32, 4], [], [K // 128, N, 2]],
                              "Input type": [BF16, "int", "Scalar", BF16],
                              "Concrete Inputs": ["", "", "128", ""]})
    b.launch(cpu + 1, 2, TINY, gpu, us, ext=ext)


def synthetic(tmp_path: Path, prefill_us: float = 1000.0, steps: int = 2) -> Path:
    """Per step (H200): a prefill call M = 1,024 (`prefill_us`), a decode call M = 8 (50 µs), and a
    call at M = 256 of 20 µs (under twice its 12.4 µs cuBLAS reference: not far below the roof)."""
    b = TraceBuilder()
    for i in range(steps):
        t0 = 100.0 + 5000.0 * i
        gpu = t0 + 20
        for j, (m, us) in enumerate(((1024, prefill_us), (8, 50.0), (256, 20.0))):
            _int4_call(b, t0 + 10 + 10 * j, gpu, m, us)
            gpu += us + 5
        b.annotation(f"ProfilerStep#{i + 1}", t0, gpu - t0 + 10)
    return b.write(tmp_path / "int4.json")


def test_synthetic_worked_by_hand(tmp_path):
    a = analyze(load_trace(synthetic(tmp_path)))
    s = RULES_BY_ID["int4_large_batch"].run(a)
    assert s is not None
    # M = 1,024: 2·1024·4096·4096 = 34.36 GFLOP at 70 % of 989.4 TFLOP/s (H200) = 49.61 µs; its bf16
    # bytes (x 8.39 MB + weights 33.55 MB + out 8.39 MB = 50.33 MB) at 4800 GB/s = 10.49 µs: compute
    flops = 2.0 * 1024 * N * K
    ref = flops / (0.7 * 989.4e12) * 1e6
    assert ref == pytest.approx(49.61, abs=0.01)
    memory_us = (2 * 1024 * K + 2 * N * K + 2 * 1024 * N) / 4800e9 * 1e6
    assert memory_us == pytest.approx(10.49, abs=0.01)
    (row,) = s.evidence  # the decode call (M = 8) and the fast M = 256 call stay out
    assert (row["m"], row["n"], row["k"], row["count"]) == (1024, N, K, 2)
    assert row["new_time_us"] == pytest.approx(2 * ref)
    assert s.saving_us == pytest.approx(2 * (1000.0 - ref))  # 2 steps × 950.39 µs
    assert s.per_step_us == pytest.approx(1000.0 - ref)
    # M = 256 at 20 µs: its reference max(2·256·4096·4096 / 692.58 TFLOP/s = 12.40 µs, 37.75 MB / 4800 GB/s
    # = 7.86 µs) = 12.40 µs; 20 < 2 × 12.40: not fired
    assert rules_int4.cublas_us(a.device, 256, N, K) == pytest.approx(12.40, abs=0.01)
    assert rules_int4.int4_large_calls(a) == 4  # M = 1,024 and M = 256, 2 steps


def test_synthetic_near_misses(tmp_path):
    # the prefill call fast enough (90 µs < 2 × 49.61): nothing far below the roof
    assert RULES_BY_ID["int4_large_batch"].run(analyze(load_trace(synthetic(tmp_path, prefill_us=90.0)))) is None
    # decode only: no large-M call at all
    b = TraceBuilder()
    for i in range(2):
        t0 = 100.0 + 1000.0 * i
        _int4_call(b, t0 + 10, t0 + 20, 8, 500.0)
        b.annotation(f"ProfilerStep#{i + 1}", t0, 600.0)
    a = analyze(load_trace(b.write(tmp_path / "decode.json")))
    assert RULES_BY_ID["int4_large_batch"].run(a) is None and rules_int4.int4_large_calls(a) == 0


def test_synthetic_whatif_sets_the_kernel_durations(tmp_path):
    a = analyze(load_trace(synthetic(tmp_path)))
    s = RULES_BY_ID["int4_large_batch"].run(a)
    assert s is not None
    r = a.ranks[0]
    new = rules_int4.large_m_rows(r, {(e["op"], e["shapes"]) for e in s.evidence})
    ref = 2.0 * 1024 * N * K / (0.7 * 989.4e12) * 1e6
    assert np.sort(new[~np.isnan(new)]).tolist() == pytest.approx([ref, ref])  # the two M = 1,024 kernels
    assert rules_int4.int4_transform(s, r, s.per_step_us) is not None
