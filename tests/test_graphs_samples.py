"""Graph replays on recorded traces: counts and per-replay GPU time checked against the raw JSON."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict

import pytest
from conftest import SAMPLE_TRACES

import tracekit
from tracekit.analyzers.graphs import graph_replays

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
