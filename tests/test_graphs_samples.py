"""Graph replays on recorded traces: counts and per-replay GPU time checked against the raw JSON."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict

import pytest
from conftest import SAMPLE_TRACES

import tracekit
from tracekit.analyzers.graphs import graph_replays
from tracekit.trace import tables
from tracekit.trace.graphs import MATCH_ORDER

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def _raw_replays(path) -> dict[int, list[float]]:
    """Durations of the GPU activities of each cudaGraphLaunch, by correlation id, from the JSON."""
    with gzip.open(path) as fh:
        events = json.load(fh)["traceEvents"]
    launches = {e["args"]["correlation"] for e in events if e.get("name") == "cudaGraphLaunch"}
    out: dict[int, list[float]] = defaultdict(list)
    for e in events:
        if e.get("cat") in GPU_CATS and e.get("args", {}).get("correlation") in launches:
            out[e["args"]["correlation"]].append(float(e["dur"]))
    return out


def _check(path, n_graphs: int) -> None:
    raw = _raw_replays(path)
    res = graph_replays(tracekit.load_trace(path).rank())
    assert res is not None
    assert res.launches == len(raw)
    assert res.activities == sum(len(v) for v in raw.values())
    assert len(res.graphs) == n_graphs
    assert res.gpu_us == pytest.approx(sum(sum(v) for v in raw.values()), rel=1e-9)
    by_len: dict[int, list[float]] = defaultdict(list)
    for v in raw.values():
        by_len[len(v)].append(sum(v))
    for g in res.graphs:  # here each graph has its own activity count
        per = by_len[g.activities_per_replay]
        assert g.launches == len(per)
        assert g.gpu_us_per_replay == pytest.approx(sum(per) / len(per), rel=1e-9)


def test_gpt2_decode_graph_replays_match_the_raw_json():
    # 20 tokens, one cudaGraphLaunch each, one graph of 340 activities
    _check(SAMPLE_TRACES / "gpt2_decode_graph.trace.json.gz", 1)


def test_trace_diff_two_graphs_match_the_raw_json(shared_traces):
    # 12 cudaGraphLaunch calls alternating between a 339- and a 502-activity graph
    _check(shared_traces / "hta" / "trace_diff" / "test" / "test.json.gz", 2)


def test_xdit_hip_graph_replays_join_their_capture(shared_traces):
    """xDiT Flux.1 on MI300X: 4 hipGraphLaunch replays of a torch.compile graph, joined to the
    capture in capture_traces/ by order and kind. The capture's ops name the Triton kernels they
    launch (Inductor records `<kernel>` or `<kernel>_<n>`), which checks the join kernel by kernel;
    the hipBLASLt Cijk_ GEMMs must land on aten::mm / aten::addmm."""
    path = shared_traces / "tracelens" / "inference" / "xdit_flux.1_aiter_sage" / "profile_trace_rank_0.json.gz"
    with gzip.open(path) as fh:
        events = json.load(fh)["traceEvents"]
    launches = {e["args"]["correlation"] for e in events if e.get("name") == "hipGraphLaunch"}
    replayed = [e for e in events if e.get("cat") in GPU_CATS and e.get("args", {}).get("correlation") in launches]
    assert (len(launches), len(replayed)) == (4, 6264)
    trace = tracekit.load_trace(path)
    assert not [w for w in trace.warnings if "not joined" in w]
    rank = trace.rank()
    rows = rank.gpu[rank.gpu[tables.GPU_GRAPH] >= 0]
    assert len(rows) == len(replayed) and (rows[tables.GPU_GRAPH_MATCH] == MATCH_ORDER).all()
    op_names = rank.ops[tables.OP_NAME].to_numpy(dtype=object)[rows[tables.GPU_OP].to_numpy()]
    pairs = list(zip(rows[tables.GPU_NAME], op_names, strict=True))
    triton = [(k, o) for k, o in pairs if k.startswith(("triton_", "sage_"))]
    assert len(triton) == sum(e["name"].startswith(("triton_", "sage_")) for e in replayed) == 4252
    assert all(o == k or o.rsplit("_", 1)[0] == k for k, o in triton)
    assert {o for k, o in pairs if k.startswith("Cijk_")} == {"aten::mm", "aten::addmm"}
