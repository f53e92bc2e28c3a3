"""Graph-replay decode traces recorded on an H200 (sample_traces/scripts/graph_decode.py): match
rates and the FLOPs of the replayed GEMMs, derived from the model's configuration alone.

GPU model (graph_decode.GPU_CONFIG): 4 layers, hidden 1024, 16 heads of 64, SwiGLU MLP 2816,
vocabulary 8192, static cache of 64 slots, bf16. One decode step at batch B runs, per layer, the
linears q, k, v, o (1024 x 1024), gate, up (1024 -> 2816) and down (2816 -> 1024) on B rows, and
two attention matmuls over the whole cache per (sequence, head): scores (1 x 64) . (64 x 64) and
context (1 x 64) . (64 x 64); then the LM head (1024 -> 8192). A GEMM (M, N, K) has 2*M*N*K FLOPs.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import SAMPLE_TRACES

import tracekit
from tracekit.analyzers.costs.attribution import estimate_costs
from tracekit.analyzers.graphs import graph_replays
from tracekit.analyzers.kernels import classify
from tracekit.trace import tables

H, LAYERS, HEADS, D, FFN, VOCAB, SLOTS = 1024, 4, 16, 64, 2816, 8192, 64
GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm")


def step_gemm_flops(batch: int) -> float:
    linears = 2 * batch * (4 * H * H + 3 * H * FFN)
    attention = 2 * (2 * batch * HEADS * 1 * SLOTS * D)  # scores and context, K or N = 64 slots
    return LAYERS * (linears + attention) + 2 * batch * H * VOCAB


def _need(*names: str):
    paths = [SAMPLE_TRACES / n for n in names]
    if not all(p.exists() for p in paths):
        pytest.skip("H200 graph_decode traces not recorded yet (benchmarks/gpu/graph_traces.sh)")
    return paths


def _replayed_gemm_flops(rank) -> tuple[float, int]:
    """FLOPs tracekit gives the replayed kernels of GEMM ops, and the number of graph launches."""
    costs = estimate_costs(rank, classify(rank))
    gpu = rank.gpu
    rep = gpu[tables.GPU_GRAPH].to_numpy() >= 0
    op = gpu[tables.GPU_OP].to_numpy()
    names = rank.ops[tables.OP_NAME].to_numpy(dtype=object)
    gemm = rep & (op >= 0) & np.isin(np.where(op >= 0, names[np.maximum(op, 0)], ""), GEMM_OPS)
    launches = len(np.unique(gpu[tables.GPU_LAUNCH].to_numpy()[rep]))
    return float(np.nansum(costs.table["flops"].to_numpy()[gemm])), launches


def _shares(rank):
    res = graph_replays(rank, estimate_costs(rank, classify(rank)))
    return res, res.matched_share, res.flops_known_us / res.gpu_us


@pytest.mark.parametrize("batch", [1, 8])
def test_inline_capture_joins_every_replay(batch):
    (path,) = _need(f"graph_decode_inline_b{batch}.trace.json.gz")
    rank = tracekit.load_trace(path).rank()
    res, matched, flops_known = _shares(rank)
    assert res.launches == 16 and len(res.graphs) == 1
    assert matched >= 0.95 and flops_known >= 0.80
    flops, launches = _replayed_gemm_flops(rank)
    assert flops == pytest.approx(launches * step_gemm_flops(batch), rel=1e-6)


def test_split_capture_and_execution_traces_two_batch_sizes():
    (exe,) = _need("graph_decode_split/exec.trace.json.gz",
                   "graph_decode_split/capture_traces/capture_b1.trace.json.gz",
                   "graph_decode_split/capture_traces/capture_b8.trace.json.gz")[:1]
    trace = tracekit.load_trace(exe.parent)  # capture_traces/ picked up
    rank = trace.rank()
    res, matched, flops_known = _shares(rank)
    assert res.launches == 32 and len(res.graphs) == 2
    assert sorted(g.source for g in res.graphs) == ["capture_b1.trace.json.gz", "capture_b8.trace.json.gz"]
    assert matched >= 0.95 and flops_known >= 0.80
    flops, _ = _replayed_gemm_flops(rank)
    assert flops == pytest.approx(16 * (step_gemm_flops(1) + step_gemm_flops(8)), rel=1e-6)


def test_mismatched_capture_is_one_line_and_not_joined():
    exe, bad = _need("graph_decode_split/exec.trace.json.gz",
                     "graph_decode_mismatch/capture_traces/capture_b1.trace.json.gz")
    trace = tracekit.load_trace(exe, captures=[bad])
    lines = [w for w in trace.warnings if str(bad) in w]
    assert len(lines) == 1 and "not joined" in lines[0]
    origins = set(trace.rank().ops[tables.OP_ORIGIN].tolist()) - {""}
    assert str(bad) not in origins


def test_piecewise_graphs_between_eager_attention():
    (path,) = _need("graph_decode_piecewise_b8.trace.json.gz")
    rank = tracekit.load_trace(path).rank()
    res, matched, _ = _shares(rank)
    assert res.launches == 16 * LAYERS  # one MLP graph per layer per token
    assert matched >= 0.95
    flops, launches = _replayed_gemm_flops(rank)
    assert flops == pytest.approx(launches * 2 * 8 * 3 * H * FFN, rel=1e-6)  # gate, up, down per replay


@pytest.mark.parametrize("batch", [1, 8])
def test_inferred_path_without_the_capture(batch):
    """The inline traces also run the decode step eagerly (the reference tokens and the warm-up):
    with the in-trace capture ignored, every replayed kernel finds its eager twin."""
    from tracekit.trace import graphs
    from tracekit.trace.graphs import MATCH_INFERRED
    from tracekit.trace.load import load_file

    (path,) = _need(f"graph_decode_inline_b{batch}.trace.json.gz")
    rank = graphs.join_graphs(load_file(path), [], own_capture=False).rank
    rep = rank.gpu[rank.gpu[tables.GPU_GRAPH] >= 0]
    assert (rep[tables.GPU_GRAPH_MATCH] == MATCH_INFERRED).all()
    flops, launches = _replayed_gemm_flops(rank)
    assert flops == pytest.approx(launches * step_gemm_flops(batch), rel=1e-6)
