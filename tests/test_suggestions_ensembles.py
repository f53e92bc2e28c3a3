"""batch_bmm on model ensembles called member by member, and foreach_loops on a hand-written Adam loop: synthetic traces with hand-computed answers (fire and near-miss silence)."""

from __future__ import annotations

import pytest
from test_suggestions_batching import Host, W
from test_suggestions_kernels import _analysis
from tracebuilder import TraceBuilder

from tracekit.analyzers.detectors import ensembles, foreach
from tracekit.suggestions import rules_batching, rules_launch
from tracekit.suggestions.rules import RULES_BY_ID

F32 = "float"
GEMM = "volta_sgemm_128x64_tn"
RELU = "void at::native::vectorized_elementwise_kernel<relu>"
GRAD = ensembles.ACCUMULATE_GRAD


def ensemble_trace(tmp_path, members: int = 8, chained: bool = False, grads_per_member: int = 4,
                   span: float = 1000):
    """`members` MLPs 32 -> 16 -> 1 called one by one on one [64, 32] input (forward, thread 1), then
    their backward on thread 2: per member AddmmBackward0 (2 GEMMs), ReluBackward0, AddmmBackward0 (1
    GEMM), then `grads_per_member` AccumulateGrad calls that launch nothing. Every op is 8 µs and starts
    10 µs after the one before; each launch 1 µs, its kernel 2 µs. `chained`: 32 -> 32 layers whose
    output shape is the next member's input shape (a layer stack, not an ensemble)."""
    b = TraceBuilder()
    hidden = 32 if chained else 16
    fwd = [("aten::linear", [[64, 32], [hidden, 32], [hidden]], GEMM),
           ("aten::relu", [[64, hidden]], RELU),
           ("aten::linear", [[64, hidden], [1, hidden], [1]], GEMM)]
    cpu = 100.0
    for _ in range(members):
        for name, dims, kernel in fwd:
            ext = b.op(name, cpu, 8, tid=1, **{"Input Dims": dims, "Input type": [F32] * len(dims)})
            b.launch(cpu + 1, 1, kernel, cpu + 2, 2, ext=ext, tid=1)
            cpu += 10
    cpu = 400.0
    bwd = [("autograd::engine::evaluate_function: AddmmBackward0", 2, GEMM),
           ("autograd::engine::evaluate_function: ReluBackward0", 1, RELU),
           ("autograd::engine::evaluate_function: AddmmBackward0", 1, GEMM)]
    for _ in range(members):
        for name, kernels, kernel in bwd:
            ext = b.op(name, cpu, 8, tid=2)
            for i in range(kernels):
                b.launch(cpu + 1 + 3 * i, 1, kernel, cpu + 2 + 3 * i, 2, ext=ext, tid=2)
            cpu += 10
        for _ in range(grads_per_member):
            b.op(GRAD, cpu, 8, tid=2)
            cpu += 10
    b.annotation("ProfilerStep#1", 0, span)
    return b.write(tmp_path / f"ensemble{members}{chained}{grads_per_member}_{span:.0f}.json")


def test_batch_bmm_fires_on_an_ensemble_called_member_by_member(tmp_path):
    a = _analysis(ensemble_trace(tmp_path))
    t = a.ranks[0].patterns.ensembles
    assert list(t[ensembles.EN_DIRECTION]) == [ensembles.FORWARD, ensembles.BACKWARD]
    assert list(t[ensembles.EN_MEMBERS]) == [8, 8]
    # forward: 24 ops at 100 + 10 i, the last ending at 330 + 8: 238 µs; backward: the launching ops
    # of member m at 400 + 70 m + {0, 10, 20} (4 AccumulateGrad between members), the last one ending at
    # 400 + 490 + 20 + 8 = 918: 518 µs
    assert list(t[ensembles.EN_HOST_US]) == pytest.approx([238.0, 518.0])
    # GEMMs: 2 a member forward, 3 backward; launches per member: 3 forward, 4 backward
    assert list(t[ensembles.EN_GEMMS]) == [16, 24] and list(t[ensembles.EN_LAUNCHES]) == [3, 4]
    # every kernel of the 8 members (7 a member, 2 µs each) carries its member count
    members = a.ranks[0].patterns.ensemble_members
    assert int((members == 8).sum()) == 56 and int((members > 0).sum()) == 56
    s = RULES_BY_ID["batch_bmm"].run(a)
    # as traced: each stretch's host time × (1 − 1/8) = (238 + 518) × 7/8
    assert s is not None and s.saving_us == pytest.approx((238 + 518) * 7 / 8)
    assert "Stack the 8 ensemble members' weights" in s.title and "stack_module_state" in s.title
    assert "stack_module_state" in s.snippet and "baddbmm" in s.snippet
    assert {e["direction"] for e in s.evidence} == {"forward", "backward"}


def test_batch_bmm_silent_on_a_layer_stack(tmp_path):
    """32 -> 32 layers: the block's input shape [64, 32] is read again inside it (the ReLU), so a member's
    output could be the next one's input: a stack of layers, not an ensemble."""
    a = _analysis(ensemble_trace(tmp_path, chained=True))
    assert not len(a.ranks[0].patterns.ensembles)
    assert rules_launch.batch_bmm(a) is None


def test_batch_bmm_silent_when_the_members_share_weights(tmp_path):
    """Fewer AccumulateGrad calls in the backward stretch than members (one module called 8 times
    accumulates its gradient once): the same weights on 8 inputs, not 8 sets of weights. One per member
    (the last member's after the stretch: 7 inside) is one short; two per member (14 inside) is enough."""
    assert not len(_analysis(ensemble_trace(tmp_path, grads_per_member=1)).ranks[0].patterns.ensembles)
    assert len(_analysis(ensemble_trace(tmp_path, grads_per_member=2)).ranks[0].patterns.ensembles) == 2


def test_batch_bmm_silent_below_2_percent_of_the_step(tmp_path):
    """(238 + 518) × 7/8 = 661.5 µs: 2.0 % of a 33,075 µs step fires, 1.9 % of a 34,816 µs step does not."""
    assert rules_launch.batch_bmm(_analysis(ensemble_trace(tmp_path, span=33075))) is not None
    assert rules_launch.batch_bmm(_analysis(ensemble_trace(tmp_path, span=34816))) is None


def test_batch_bmm_minimum_members(tmp_path):
    """8 members (ensembles.MIN_MEMBERS) are an ensemble; 7 are not."""
    assert ensembles.MIN_MEMBERS == 8
    assert len(_analysis(ensemble_trace(tmp_path, members=8)).ranks[0].patterns.ensembles) == 2
    assert not len(_analysis(ensemble_trace(tmp_path, members=7)).ranks[0].patterns.ensembles)


# torch/optim/adam.py _single_tensor_adam as research code writes it (benchmarks/heldout3/manual_adam.py):
# p.mul_(1 - lr·wd); m.mul_(β1).add_(g, alpha=1 - β1); v.mul_(β2).addcmul_(g, g, value=1 - β2);
# denom = (v.sqrt() / c).add_(eps); p.addcdiv_(m, denom, value=-step)
ADAM = (("aten::mul_", [W, []], [F32, "Scalar"]), ("aten::mul_", [W, []], [F32, "Scalar"]),
        ("aten::add_", [W, W, []], [F32, F32, "Scalar"]), ("aten::mul_", [W, []], [F32, "Scalar"]),
        ("aten::addcmul_", [W, W, W, []], [F32, F32, F32, "Scalar"]), ("aten::sqrt", [W], [F32]),
        ("aten::div", [W, []], [F32, "Scalar"]), ("aten::add_", [W, [], []], [F32, "Scalar", "Scalar"]),
        ("aten::addcdiv_", [W, W, W, []], [F32, F32, F32, "Scalar"]))


def adam_trace(tmp_path, tensors: int = 16):
    h = Host(span=100 + 10 * tensors * len(ADAM) + 50)
    for _ in range(tensors):
        for name, dims, types in ADAM:
            h.op(name, dims, types)
    return h.write(tmp_path / f"adam{tensors}.json")


def test_foreach_loops_names_the_optimizer_for_a_hand_written_adam_loop(tmp_path):
    a = _analysis(adam_trace(tmp_path))
    s = rules_batching.foreach_loops(a)
    assert s is not None
    row = s.evidence[0]
    # the out-of-place sqrt and div join the run (they used to end it after 5 ops of each tensor)
    assert row["ops"] == "mul_ → add_ → addcmul_ → sqrt → div → addcdiv_"
    # 16 tensors (the loop's iterations: sqrt, div and addcdiv_ are called once a tensor; mul_ 3 times)
    assert row["launches_per_step"] == 16 * 9 and row["tensors"] == 16
    assert row["replace"].startswith("torch.optim.AdamW(params, foreach=True) (or fused=True)")
    # CPU: 144 ops at 100 + 10 i, 8 µs each: 10 × 143 + 8 = 1438 µs. Multi-tensor launches per op (16
    # chunks of 65536 a [1024, 1024] tensor, foreach.MAX_BLOCKS = 320 per launch): mul_ 48 calls, one
    # list: max(⌈48/110⌉, ⌈768/320⌉) = 3; add_ 32 calls, two lists (≤ 64): max(1, ⌈512/320⌉) = 2;
    # addcmul_, sqrt, div, addcdiv_ 16 calls each: 1 each; 9 launches × 3 µs + 144 calls × 0.5 µs = 99 µs
    assert row["foreach_launches_per_step"] == 9
    assert s.saving_us == pytest.approx(1438 - 99)
    # a CUDA graph of the model leaves the hand-written optimizer out, as it does an Optimizer.step range
    assert int(a.ranks[0].patterns.in_optimizer_loop.sum()) == 144


def test_an_ema_loop_is_not_an_optimizer(tmp_path):
    from test_suggestions_batching import loop_trace

    a = _analysis(loop_trace(tmp_path))
    assert not a.ranks[0].patterns.in_optimizer_loop.any()
    assert foreach.OPTIMIZER_LOOPS[0][0] == frozenset({"addcmul_", "addcdiv_"})
