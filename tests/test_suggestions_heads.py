"""batch_bmm on attention heads written as separate modules called in turn (detectors/heads.py): a synthetic trace with hand-computed answers (fires on per-head blocks, silent on a layer stack) and the real H200 pair ho4_head_list (sample_traces/heldout4/)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import SAMPLE_TRACES
from shared_analysis import analysed_file
from test_heldout3_loops import _bare_median_ms
from test_suggestions_kernels import _analysis
from tracebuilder import TraceBuilder

from tracekit.analyzers.detectors import ensembles, heads
from tracekit.suggestions import rules_batching, rules_launch

F32 = "float"
GEMM = "volta_sgemm_128x64_tn"
FLASH = "flash_fwd_kernel"
FLASH_BWD = "flash_bwd_dq_dk_dv_loop_kernel"
ADD = "void at::native::vectorized_elementwise_kernel<4, add>"
EVAL = "autograd::engine::evaluate_function: "
X = [64, 32]  # the activation every head reads: d = 32


def heads_trace(tmp_path, k: int = 4, head: int = 8, residual: bool = False, grads: int = 3, span: float = 2000,
                projections: int = 3):
    """k heads on one [64, 32] input (forward, thread 1): per head Linear(32, head) for q, k and v (one
    GEMM each) and one SDPA call on [4, 1, 16, head] (one kernel), then the output projection and the
    residual add outside the heads. Backward on thread 2: per head the SDPA backward (one kernel), three
    MmBackward0 (two GEMMs each, and a child add_ on [64, 32]: the input gradient's sum over heads),
    then `grads` AccumulateGrad calls that launch nothing. Every top-level op is 8 µs and starts 10 µs
    after the one before; launches 1 µs, kernels 2 µs. `residual`: an add on [64, 32] inside each
    repetition (a layer stack: it gives back its input's shape). `projections`: the forward's GEMMs a head
    (the backward keeps three)."""
    b = TraceBuilder()
    qkv = [[4, 1, 16, head]] * 3
    block = [("aten::linear", [X, [head, 32], []], GEMM)] * projections + [("aten::scaled_dot_product_attention", qkv, FLASH)]
    if residual:
        block.append(("aten::add", [X, X, []], ADD))
    tail = [("aten::linear", [X, [32, 32], [32]], GEMM), ("aten::add", [X, X, []], ADD)]
    cpu = 100.0
    for name, dims, kernel in block * k + tail:
        ext = b.op(name, cpu, 8, tid=1, **{"Input Dims": dims, "Input type": [F32] * len(dims)})
        b.launch(cpu + 1, 1, kernel, cpu + 2, 2, ext=ext, tid=1)
        cpu += 10
    cpu = 1000.0
    for _ in range(k):
        ext = b.op(EVAL + "ScaledDotProductFlashAttentionBackward0", cpu, 8, tid=2)
        b.launch(cpu + 1, 1, FLASH_BWD, cpu + 2, 2, ext=ext, tid=2)
        cpu += 10
        for _ in range(3):
            ext = b.op(EVAL + "MmBackward0", cpu, 8, tid=2)
            b.launch(cpu + 1, 1, GEMM, cpu + 2, 1, ext=ext, tid=2)
            b.launch(cpu + 3, 1, GEMM, cpu + 4, 1, ext=ext, tid=2)
            add = b.op("aten::add_", cpu + 5, 2, tid=2, **{"Input Dims": [X, X, []], "Input type": [F32, F32, "Scalar"]})
            b.launch(cpu + 5.5, 1, ADD, cpu + 6, 1, ext=add, tid=2)
            cpu += 10
        for _ in range(grads):
            b.op(EVAL + "torch::autograd::AccumulateGrad", cpu, 8, tid=2)
            cpu += 10
    b.annotation("ProfilerStep#1", 0, span)
    return b.write(tmp_path / f"heads{k}_{head}_{residual}_{grads}_{projections}.json")


def test_batch_bmm_fires_on_heads_called_in_turn(tmp_path):
    a = _analysis(heads_trace(tmp_path))
    p = a.ranks[0].patterns
    t = p.ensembles
    assert list(t[ensembles.EN_KIND]) == [ensembles.KIND_HEADS] * 2
    assert list(t[ensembles.EN_DIRECTION]) == [ensembles.FORWARD, ensembles.BACKWARD]
    assert list(t[ensembles.EN_MEMBERS]) == [4, 4]
    # forward: 16 head ops at 100 + 10 i, the last ending at 250 + 8: 158 µs; backward: 7 ops a head at
    # 1000 + 10 i (4 launching, 3 AccumulateGrad), the last head's last MmBackward0 at 1000 + 10 × 24,
    # ending 8 µs later: 248 µs
    assert list(t[ensembles.EN_HOST_US]) == pytest.approx([158.0, 248.0])
    # GEMMs: 3 a head forward, 6 backward; launches a head: 4 forward, 1 + 3 × 3 backward
    assert list(t[ensembles.EN_GEMMS]) == [12, 24] and list(t[ensembles.EN_LAUNCHES]) == [4, 10]
    assert set(t[ensembles.EN_FIRST]) == {"aten::linear[[64, 32], [8, 32], []]", f"{EVAL}ScaledDotProductFlashAttentionBackward0None"}
    # kernels in the stretches: 4 a head forward, 10 backward; the 12 input-gradient adds on [64, 32]
    # work on the heads' shared input (once for all heads: 1/4 of their time)
    assert int((p.ensemble_members == 4).sum()) == 4 * 4 + 4 * 10
    assert int(p.ensemble_shared.sum()) == 12
    factor = rules_batching.ensemble_factor(a.ranks[0], a.device)
    assert np.allclose(factor[p.ensemble_shared], 0.25)
    s = rules_launch.batch_bmm(a)
    # as traced: each stretch's host time × (1 − 1/4)
    assert s is not None and s.saving_us == pytest.approx((158 + 248) * 3 / 4)
    assert "Stack the 4 attention heads' weights" in s.title and "Linear(d, 3·d)" in s.title
    assert {e["stack"] for e in s.evidence} == {ensembles.KIND_HEADS}


def test_batch_bmm_silent_on_a_layer_stack(tmp_path):
    """A residual add on the block's input [64, 32] inside each repetition: every repetition gives back
    its input's shape, so one's output can be the next one's input (a stack of layers, not heads)."""
    a = _analysis(heads_trace(tmp_path, residual=True))
    assert not len(a.ranks[0].patterns.ensembles)
    assert rules_launch.batch_bmm(a) is None


def test_heads_need_narrow_projections_and_weights_of_their_own(tmp_path):
    """N × k ≤ d: 4 heads of 8 on d = 32 fire, 4 of 16 (4 × 16 = 64 > 32) do not; fewer AccumulateGrad
    calls in the backward stretch than heads (shared weights) keep it silent: one a head gives 3 inside
    (the last head's after the stretch), two a head 6."""
    assert not len(_analysis(heads_trace(tmp_path, head=16)).ranks[0].patterns.ensembles)
    assert not len(_analysis(heads_trace(tmp_path, grads=1)).ranks[0].patterns.ensembles)
    assert len(_analysis(heads_trace(tmp_path, grads=2)).ranks[0].patterns.ensembles) == 2


def test_one_narrow_gemm_a_repetition_is_not_a_head(tmp_path):
    """heads.MIN_PROJECTIONS = 2: q and k (and v) project the same input; one Linear a repetition is a
    row of towers (hta's trace_diff control trace), left out; two fire."""
    assert heads.MIN_PROJECTIONS == 2
    assert not len(_analysis(heads_trace(tmp_path, projections=1)).ranks[0].patterns.ensembles)
    assert len(_analysis(heads_trace(tmp_path, projections=2)).ranks[0].patterns.ensembles) == 2


def test_minimum_heads(tmp_path):
    """4 heads (heads.MIN_HEADS) are heads; 3 are not."""
    assert heads.MIN_HEADS == 4
    assert not len(_analysis(heads_trace(tmp_path, k=3)).ranks[0].patterns.ensembles)


def test_runs_prefer_the_longest_stretch():
    """a b b b a b b b a b b b a b b b: period 4 covers 16 positions, period 1 (b b b) 3: the heads win."""
    codes = np.array([0, 1, 1, 1] * 4)
    assert heads.runs(codes, 8, 3) == [(0, 4, 4)]


HELDOUT4 = SAMPLE_TRACES / "heldout4"


def _pair():
    """The analyses of ho4_head_list and its fixed variant, and the measured unprofiled saving (ms)."""
    paths = [HELDOUT4 / f"ho4_head_list{tail}.trace.json.gz" for tail in ("", "_fixed")]
    if not all(p.exists() for p in paths):
        pytest.skip("no heldout4 sample trace")

    # measured: the stored bare steps, 12 Head modules × 6 layers → one Linear(768, 3 × 768) and one SDPA
    # per layer (benchmarks/heldout4/head_list.py)
    return analysed_file(paths[0]), analysed_file(paths[1]), _bare_median_ms(paths[0]) - _bare_median_ms(paths[1])


def test_head_list_gets_batch_bmm_first_within_35_percent():
    before, after, measured = _pair()
    first = before.suggestions[0]
    assert first.id == "batch_bmm" and "12 attention heads" in first.title
    assert abs(first.per_step_us / 1e3 - measured) <= 0.35 * measured
    t = before.analysis.ranks[0].patterns.ensembles
    forward = t[t[ensembles.EN_DIRECTION] == ensembles.FORWARD]
    # the script: per head query/key/value Linear(768, 64, bias=False) on [16, 1024, 768], then SDPA;
    # 6 layers a step, each one stretch of 12 heads
    assert set(forward[ensembles.EN_MEMBERS]) == {12} and set(forward[ensembles.EN_GEMMS]) == {36}
    assert set(forward[ensembles.EN_FIRST]) == {"aten::linear[[16, 1024, 768], [64, 768], []]"}
    assert len(forward) == 6 * forward[ensembles.EN_STEP].nunique()
    assert not len(after.analysis.ranks[0].patterns.ensembles)
    assert "batch_bmm" not in {s.id for s in after.suggestions}
    # tracekit diff credits it: per step 6 layers × 12 heads × (3 forward GEMMs + 9 backward) → 0
    from tracekit.compare.applied import applied

    made = applied("batch_bmm", before.analysis, after.analysis)
    assert made.applied is True and f"{6 * 12 * (3 + 9):.1f} → 0.0" in made.evidence
