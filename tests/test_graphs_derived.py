"""Graph replays of real H200 kernels joined to a capture derived from the eager run of the same step.

sample_traces/gpt2_decode_graph.trace.json.gz replays, from a CUDA graph, the decode step that
sample_traces/gpt2_decode.trace.json.gz runs eagerly (same script, model, StaticCache and step
function; both recorded on the H200). Removing the GPU activities of one eager step (ProfilerStep#5)
from the eager trace leaves that step's launch calls inside their ops with no GPU work: what the
profiler records during graph capture. The other eager steps tell which kernel each launch makes.
Until a capture recorded on the GPU is in sample_traces/, this is the join's test on real kernels.

Expected GEMM FLOPs from GPT2Config() alone: 12 layers of Conv1D addmm on one token (768 -> 2304
qkv, 768 -> 768 attention out, 768 -> 3072 and 3072 -> 768 MLP), plus the 768 -> 50257 LM head;
2*M*N*K each with M = 1.
"""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from conftest import SAMPLE_TRACES

import tracekit
from tracekit.analyzers.costs.attribution import estimate_costs
from tracekit.analyzers.graphs import graph_replays
from tracekit.analyzers.kernels import classify
from tracekit.trace import tables
from tracekit.trace.graphs import MATCH_NAME

LAYER_GEMMS = ((768, 2304), (768, 768), (768, 3072), (3072, 768))
GEMM_FLOPS_PER_TOKEN = 12 * sum(2 * k * n for k, n in LAYER_GEMMS) + 2 * 768 * 50257
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "ac2g")


def derive_capture(eager_trace, step: int, out):
    """The eager trace with the GPU activities (and their flows) of ProfilerStep#`step` removed."""
    with gzip.open(eager_trace) as fh:
        doc = json.load(fh)
    events = doc["traceEvents"]
    mark = next(e for e in events if e.get("name") == f"ProfilerStep#{step}")
    t0, t1 = mark["ts"], mark["ts"] + mark["dur"]
    calls = {e["args"]["correlation"] for e in events
             if e.get("cat") in ("cuda_runtime", "cuda_driver") and t0 <= e["ts"] <= t1}
    doc["traceEvents"] = [e for e in events if not (
        e.get("cat") in GPU_CATS and (e.get("args", {}).get("correlation") in calls or e.get("id") in calls))]
    with gzip.open(out, "wt") as fh:
        json.dump(doc, fh)
    return out


@pytest.fixture(scope="module")
def joined(tmp_path_factory):
    cap = derive_capture(SAMPLE_TRACES / "gpt2_decode.trace.json.gz", 5,
                         tmp_path_factory.mktemp("cap") / "gpt2_capture.trace.json.gz")
    trace = tracekit.load_trace(SAMPLE_TRACES / "gpt2_decode_graph.trace.json.gz", captures=[cap])
    rank = trace.rank()
    return trace, rank, estimate_costs(rank, classify(rank))


def test_every_replayed_kernel_gets_its_captured_op(joined):
    trace, rank, costs = joined
    assert not trace.warnings
    res = graph_replays(rank, costs)
    assert (res.launches, res.activities) == (20, 20 * 340)  # from the raw JSON (test_graphs_samples)
    assert res.matched[MATCH_NAME][0] == res.activities  # names and grids confirmed for all
    assert res.flops_known_us / res.gpu_us >= 0.80


def test_replayed_gemm_flops_equal_the_model_s(joined):
    _, rank, costs = joined
    gpu = rank.gpu
    op = gpu[tables.GPU_OP].to_numpy()
    names = rank.ops[tables.OP_NAME].to_numpy(dtype=object)
    rep = gpu[tables.GPU_GRAPH].to_numpy() >= 0
    gemm = rep & np.isin(np.where(op >= 0, names[np.maximum(op, 0)], ""), ("aten::addmm", "aten::mm"))
    flops = float(np.nansum(costs.table["flops"].to_numpy()[gemm]))
    assert flops == pytest.approx(20 * GEMM_FLOPS_PER_TOKEN, rel=1e-9)


def test_capture_of_another_program_is_one_line_not_joined(tmp_path):
    # a capture derived the same way from the training sample: its launches align by kind with
    # some replayed kernels, but its eager steps show other kernels (names and grids)
    cap = derive_capture(SAMPLE_TRACES / "train_transformer.trace.json.gz", 3, tmp_path / "train_cap.json.gz")
    trace = tracekit.load_trace(SAMPLE_TRACES / "gpt2_decode_graph.trace.json.gz", captures=[cap])
    assert len(trace.warnings) == 1 and "train_cap.json.gz: capture trace not joined" in trace.warnings[0]
    assert graph_replays(trace.rank()).matched_count == 0
