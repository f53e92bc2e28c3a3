"""The operator view on the H200 batch-32 recording with Python stacks and nn.Module frames
(benchmarks/gpu/memory_batches.py, tests/data/memory/stack_b32.trace.json.gz): FLOPs per step by op,
module and line against the model's by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
from shared_analysis import analysed_file

import tracekit
from tracekit.analyzers.analysis import analyze
from tracekit.analyzers.operators import BY_LINE, BY_MODULE, BY_OP, operator_views
from tracekit.analyzers.step_plan import plan_steps

TRACE = Path(__file__).resolve().parent / "data" / "memory" / "stack_b32.trace.json.gz"
B, S, D, HEADS, BLOCKS = 32, 512, 512, 8, 4
# per block, forward GEMMs (benchmarks/gpu/memory_validate.py Block): qkv D -> 3D, scores Q·Kᵀ and
# scores·V (2·B·S²·D each, over the heads), the projection D -> D, the MLP D -> 4D -> D
QKV = 2 * B * S * D * 3 * D
SCORES = 2 * B * S * S * D
PROJ = 2 * B * S * D * D
MLP = 2 * (2 * B * S * D * 4 * D)
BLOCK = QKV + 2 * SCORES + PROJ + MLP  # 120.26 GFLOP
HEAD = 2 * B * S * D * 1  # the final nn.Linear(D, 1)


@pytest.fixture(scope="module")
def views():
    if not TRACE.exists():
        pytest.skip(f"{TRACE} is not in this checkout")
    rank = tracekit.load_trace(TRACE).rank()
    plan = plan_steps(rank)
    a = analyze(tracekit.load_trace(TRACE))
    steps = a.totals.steps
    assert steps == 2  # the headline steps of the inferred ones
    return {v.by: {r.key: r for r in v.rows} for v in a.ranks[0].operators}, steps, operator_views(rank, plan)


def test_flops_by_op(views):
    rows, steps, _ = views
    linears = BLOCKS * (QKV + PROJ + MLP) + HEAD  # every forward nn.Linear is an aten::addmm
    assert rows[BY_OP]["aten::addmm"].flops / steps == pytest.approx(linears, rel=1e-4)
    assert rows[BY_OP]["aten::addmm"].calls == 2 * (BLOCKS * 4 + 1)  # 17 nn.Linear a step
    assert rows[BY_OP]["aten::mm"].flops / steps == pytest.approx(2 * linears, rel=1e-4)  # dX and dW
    # 2 bmm a block forward, 4 backward (the gradients of both operands of each)
    assert rows[BY_OP]["aten::bmm"].flops / steps == pytest.approx(6 * BLOCKS * SCORES, rel=1e-4)


def test_flops_by_module_and_line(views):
    rows, steps, _ = views
    for i in range(BLOCKS):  # GEMMs plus the norms', softmax's and GELU's few FLOPs: within 1 %
        assert rows[BY_MODULE][f"Block_{i}"].flops / steps == pytest.approx(BLOCK, rel=0.01)
    assert rows[BY_MODULE]["Linear_2"].flops / steps == pytest.approx(MLP / 2, rel=1e-4)
    # python_function events name the line a function starts on: Block.forward's `def` line
    line = rows[BY_LINE]["memory_validate.py:45 forward"]
    assert line.flops / steps == pytest.approx(BLOCKS * BLOCK, rel=0.01)


def test_backward_is_placed_on_no_line(views):
    _, _, ops = views
    by = {v.by: v for v in ops}
    assert by[BY_OP].attributed_share == pytest.approx(1.0)
    # the backward pass (launched on the autograd thread, no Python frames) does twice the forward's
    # GEMM FLOPs: about two thirds of the GPU time is placed on no line or module
    assert 0.25 < by[BY_LINE].attributed_share < 0.45 and 0.25 < by[BY_MODULE].attributed_share < 0.45


def test_where_is_a_share_of_all_the_kernels_time():
    if not TRACE.exists():
        pytest.skip(f"{TRACE} is not in this checkout")
    found = {s.id: s.where for s in analysed_file(TRACE).suggestions}
    where = found["lower_precision"]
    assert where.startswith("memory_validate.py:45 forward launches ")
    share = float(where.split(" launches ")[1].split(" %")[0])
    assert 25 <= share <= 45  # the forward GEMMs; the backward ones run under no line
