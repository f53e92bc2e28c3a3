"""Rules foreach_loops and batch_requests on synthetic traces with hand-computed answers (fire and near-miss silence)."""

from __future__ import annotations

import pytest
from shared_analysis import analysed_file
from test_suggestions_kernels import _analysis
from tracebuilder import TraceBuilder

from tracekit.analyzers.detectors import foreach
from tracekit.suggestions import rules_batching, rules_host
from tracekit.suggestions.rules import RULES_BY_ID

W = [1024, 1024]  # a weight: 16 chunks of 65536 elements for multi_tensor_apply
F32 = "float"
MUL = ("aten::mul_", [W, []], [F32, "Scalar"])
ADD = ("aten::add_", [W, W, []], [F32, F32, "Scalar"])
NORM = ("aten::linalg_vector_norm", [W, [], [], [], []], [F32, "Scalar", "", "Scalar", ""])
LINEAR = ("aten::linear", [[256, 1024], W, [1024]], [F32, F32, F32])


class Host:
    """Ops one after another on the main thread every 10 µs (8 µs each), each launching one 2 µs
    kernel 1 µs in: a launch-bound step of tiny kernels."""

    def __init__(self, span: float) -> None:
        self.b, self.cpu, self.span = TraceBuilder(), 100.0, span

    def op(self, name: str, dims: list, types: list, kernels: int = 1, sync: bool = False) -> None:
        ext = self.b.op(name, self.cpu, 8, **{"Input Dims": dims, "Input type": types})
        for i in range(kernels):
            self.b.launch(self.cpu + 1 + 2 * i, 1, f"void at::native::vectorized_elementwise_kernel<{name}>",
                          self.cpu + 3 + 2 * i, 2, ext=ext)
        if sync:
            self.b.launch(self.cpu + 5, 2, None, 0, 0, ext=ext, api="cudaStreamSynchronize")
        self.cpu += 10

    def write(self, path, optimizer_range: tuple[float, float] | None = None):
        if optimizer_range is not None:
            self.b.annotation("Optimizer.step#AdamW.step", *optimizer_range)
        self.b.annotation("ProfilerStep#1", 0, self.span)
        return self.b.write(path)


def loop_trace(tmp_path, tensors: int = 40, body=(MUL, ADD), in_optimizer: bool = False, between=None):
    """An EMA-style loop: for each of `tensors` weights, the ops of `body` (optionally with `between`
    after each tensor's ops), in a 1000 µs step."""
    h = Host(span=max(1000.0, 100 + 10 * tensors * (len(body) + (between is not None)) + 50))
    for _ in range(tensors):
        for name, dims, types in body:
            h.op(name, dims, types, sync=name == "aten::item")
        if between is not None:
            h.op(*between)
    rng = (50.0, h.cpu + 10 - 50.0) if in_optimizer else None
    return h.write(tmp_path / f"loop{tensors}.json", rng)


def test_foreach_loops_fires_on_an_ema_loop(tmp_path):
    a = _analysis(loop_trace(tmp_path))
    s = RULES_BY_ID["foreach_loops"].run(a)
    # 80 ops at ts 100 + 10 i, 8 µs each: the loop's CPU time is 10 × 79 + 8 = 798 µs. multi-tensor
    # launches: mul_ (one list, ≤ 110 tensors) max(ceil(40 / 110), ceil(40 × 16 chunks / 320)) = 2;
    # add_ (two lists, ≤ 64) max(1, 2) = 2; after = 4 × 3 µs + 80 calls × 0.5 µs = 52 µs
    assert s.saving_us == pytest.approx(798 - 52)
    row = s.evidence[0]
    assert (row["ops"], row["tensors"], row["launches_per_step"], row["foreach_launches_per_step"]) == \
        ("mul_ → add_", 40, 80, 4)
    # e.mul_(d).add_(p, alpha=1 - d) is an EMA: one torch._foreach_lerp_ (foreach.KNOWN_LOOPS)
    assert row["syncs_per_step"] == 0 and row["replace"] == "torch._foreach_lerp_(ema, params, 1 - decay)"
    assert "80 launch calls" in s.title and "4 multi-tensor launches" in s.title and "_foreach_lerp_" in s.title
    assert "_foreach_lerp_" in s.snippet and "clip_grad_norm_" in s.snippet


def test_foreach_loops_minimum_tensors(tmp_path):
    """16 tensors (foreach.MIN_TENSORS) is a loop; 15 is not."""
    assert foreach.MIN_TENSORS == 16
    assert rules_batching.foreach_loops(_analysis(loop_trace(tmp_path, tensors=16))) is not None
    assert rules_batching.foreach_loops(_analysis(loop_trace(tmp_path, tensors=15))) is None


def test_foreach_loops_silent_inside_the_optimizer(tmp_path):
    """The same loop inside Optimizer.step: the optimizer's own loop is fused_optimizer's, not this rule's."""
    assert rules_batching.foreach_loops(_analysis(loop_trace(tmp_path, in_optimizer=True))) is None


def test_foreach_loops_silent_when_other_work_sits_between(tmp_path):
    """A linear after each tensor's mul_ (a forward's layers, not a list of tensors): runs of one call."""
    assert rules_batching.foreach_loops(_analysis(loop_trace(tmp_path, body=(MUL,), between=LINEAR))) is None


def test_foreach_loops_silent_on_the_foreach_version(tmp_path):
    """One _foreach_mul_ and one _foreach_add_ over the 40 tensors: nothing per tensor is left."""
    h = Host(span=1000)
    h.op("aten::_foreach_mul_", [[], []], ["TensorList", "Scalar"], kernels=2)
    h.op("aten::_foreach_add_", [[], [], []], ["TensorList", "TensorList", "Scalar"], kernels=2)
    assert rules_batching.foreach_loops(_analysis(h.write(tmp_path / "foreach.json"))) is None


def test_the_loops_syncs_are_foreach_loops_not_avoid_sync(tmp_path):
    """A gradient-norm loop, p.grad.norm().item() per tensor: its 40 syncs are counted by foreach_loops
    (the change removes them) and avoid_sync stays silent; with 15 tensors (no loop) avoid_sync has them."""
    body = (NORM, ("aten::item", [[]], [F32]))
    a = _analysis(loop_trace(tmp_path, body=body))
    s = rules_batching.foreach_loops(a)
    assert (s.evidence[0]["syncs_per_step"], s.evidence[0]["tensors"]) == (40, 40)
    assert s.evidence[0]["ops"] == "linalg_vector_norm"
    assert s.evidence[0]["replace"] == "torch._foreach_norm"  # not a known loop: the op's foreach twin
    assert rules_host.avoid_sync(a) is None
    few = rules_host.avoid_sync(_analysis(loop_trace(tmp_path, tensors=15, body=body)))
    assert few is not None and few.evidence[0]["calls"] == 15


# --- batch_requests ----------------------------------------------------------------------------------
EMBED = ("aten::embedding", [[1000, 64], [1, 128]], ["float", "long int"])
PROJ = ("aten::linear", [[1, 128, 64], [256, 64], [256]], [F32, F32, F32])
ARGMAX = ("aten::argmax", [[1, 256]], [F32])


def requests_trace(tmp_path, k: int = 4, forward=(EMBED, PROJ, ARGMAX), vary: bool = False, prologue=None):
    """`k` forwards one after another in a 4000 µs step (3 ops, 3 launches of 2 µs each); `vary`: each
    request one token longer (different shapes); `prologue`: an op before the first forward."""
    h = Host(span=4000)
    if prologue is not None:
        h.op(*prologue)
    for i in range(k):
        for name, dims, types in forward:
            if vary:
                dims = [[d[0], d[1] + i, *d[2:]] if len(d) >= 2 and d[0] == 1 else d for d in dims]
            h.op(name, dims, types)
    return h.write(tmp_path / f"requests{k}.json")


def test_batch_requests_fires_on_forwards_one_at_a_time(tmp_path):
    a = _analysis(requests_trace(tmp_path))
    s = RULES_BY_ID["batch_requests"].run(a)
    # 4 forwards of 3 kernels × 2 µs: 24 µs of GPU time, far under the step / 4 = 1000 µs, so the
    # batched step is the host side shared by 4: 4000 − 4000 / 4 = 3000 µs
    assert s.saving_us == pytest.approx(3000.0)
    row = s.evidence[0]
    assert (row["requests_per_step"], row["launches_per_forward"]) == (4, 3)
    assert row["forward"] == "embedding → linear → argmax"
    assert row["gpu_us_per_step"] == pytest.approx(24.0)
    assert "4 times at batch 1" in s.title and "torch.cat" in s.snippet


@pytest.mark.parametrize("case", ["one", "shapes", "batched", "layers"])
def test_batch_requests_near_misses(tmp_path, case):
    """One request; requests of different lengths (not one batch without padding); forwards already at
    batch 2; and one forward whose layers repeat (an embedding before them: not a request loop)."""
    if case == "one":
        path = requests_trace(tmp_path, k=1)
    elif case == "shapes":
        path = requests_trace(tmp_path, vary=True)
    elif case == "batched":
        two = tuple((n, [[2, *d[1:]] if len(d) >= 2 and d[0] == 1 else d for d in dims], t)
                    for n, dims, t in (EMBED, PROJ, ARGMAX))
        path = requests_trace(tmp_path, forward=two)
    else:
        layer = (("aten::linear", [[1, 128, 64], [64, 64], [64]], [F32, F32, F32]), ("aten::relu", [[1, 128, 64]], [F32]))
        path = requests_trace(tmp_path, k=6, forward=layer, prologue=EMBED)
    assert rules_batching.batch_requests(_analysis(path)) is None


def test_the_optimizers_own_loop_is_fused_optimizers():
    """train_optimizer_loop (H200, AdamW foreach=False: per-parameter mul_/add_/addcmul_... inside
    Optimizer.step#AdamW.step): fused_optimizer names it, and no per-tensor loop is found outside it."""
    from conftest import SAMPLE_TRACES


    path = SAMPLE_TRACES / "train_optimizer_loop.trace.json.gz"
    if not path.exists():
        pytest.skip("sample_traces/train_optimizer_loop is not recorded in this checkout")
    result = analysed_file(path)
    assert all(not len(r.patterns.foreach_loops) for r in result.analysis.ranks)
    ids = [s.id for s in result.suggestions]
    assert ids[0] == "fused_optimizer" and "foreach_loops" not in ids


def test_batch_requests_leaves_decode_to_batch_decode(tmp_path):
    """Two generate-like requests one after another (test_suggestions_decode.requests_trace: a prompt
    forward, then decode forwards of one-row GEMVs): the detector sees 2 repeated forwards at batch 1,
    but the step is decode: batch_decode names it, batch_requests stays silent."""
    from test_suggestions_decode import requests_trace as decode_requests

    a = _analysis(decode_requests(tmp_path))
    assert a.ranks[0].patterns.requests["requests"].tolist() == [2]
    assert rules_batching.batch_requests(a) is None
    assert RULES_BY_ID["batch_decode"].run(a) is not None


def test_finest_request_inside_a_repeated_block():
    """By hand: a step of two clips, each two frame forwards (ops A B C: 1, 1 and 2 launches) and the
    clip's own op D (1 launch, ≤ a quarter of a forward's 4). The block found first is the clip
    (period 7, twice); the requests are the four forwards at positions 0–2, 3–5, 7–9 and 10–12. A forward whose
    layers repeat (E, then L three times, then H; E launches) stays one block."""
    import numpy as np

    from tracekit.analyzers.detectors.requests import _finest
    from tracekit.analyzers.detectors.toplevel import repeated_block

    codes = np.array([0, 1, 2, 0, 1, 2, 3] * 2)
    launches = np.array([1, 1, 2, 1, 1, 2, 1] * 2)
    assert repeated_block(codes) == (0, 7, 2)
    at, repeats = _finest(codes, launches, 0, 7, 2)
    assert repeats == 4 and at.tolist() == [0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12]
    layers = np.array([4, 5, 5, 5, 6] * 2)
    assert _finest(layers, np.ones(10, dtype=int), 0, 5, 2)[1] == 2
    heavy_tail = np.array([1, 1, 2, 1, 1, 2, 3] * 2)  # the clip's own op launches 3 (> 4 / 4)
    assert _finest(codes, heavy_tail, 0, 7, 2)[1] == 2
