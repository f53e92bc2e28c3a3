"""Graph replays joined to their capture (trace.graphs) on synthetic traces with known answers.

Every expected number comes from the synthetic step in graph_traces.py: an aten::mm of (M, K) x
(K, N) has 2*M*N*K FLOPs; a step has 7 GPU activities (3 GEMM, 1 split-K reduce, 2 adds, 1 memcpy).
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import tracekit_in_process
from graph_traces import GraphTrace, decode_step

import tracekit
from tracekit.analyzers.costs.attribution import estimate_costs
from tracekit.analyzers.graphs import graph_replays
from tracekit.analyzers.kernels import classify
from tracekit.errors import TraceFormatError
from tracekit.trace import tables
from tracekit.trace.graphs import MATCH_INFERRED, MATCH_NAME, MATCH_ORDER

STEP_ACTIVITIES = 7


def _gemm_flops(batch: int, hidden: int = 1024, ffn: int = 4096) -> list[float]:
    """FLOPs of the step's three GEMMs, by hand: 2*M*N*K."""
    return [2.0 * batch * hidden * hidden, 2.0 * batch * ffn * hidden, 2.0 * batch * hidden * ffn]


def _exec(tmp_path, steps, replays=3, name="exec.json", **kw):
    b = GraphTrace()
    b.annotation("ProfilerStep#1", 0, 1e6)
    for _ in range(replays):
        for s in steps:
            b.replay(s, **kw)
    return b.write(tmp_path / name)


def _capture(tmp_path, steps, name, warmup=False, markers=False):
    b = GraphTrace()
    for s in steps:
        if warmup:
            b.eager(s)
        b.capture(s, markers=markers)
    (tmp_path / "caps").mkdir(exist_ok=True)
    return b.write(tmp_path / "caps" / name)


def _replayed(rank):
    g = rank.gpu
    return g[g[tables.GPU_GRAPH] >= 0]


def _gemm_flops_of(rank):
    """FLOPs tracekit gives the replayed GEMM kernels of the first replay, in order."""
    costs = estimate_costs(rank, classify(rank))
    g = rank.gpu
    first = g[tables.GPU_LAUNCH].to_numpy() == g[tables.GPU_LAUNCH][g[tables.GPU_GRAPH] >= 0].min()
    gemm = g[tables.GPU_NAME].str.contains("xmma_gemm").to_numpy() & first
    return costs.table["flops"].to_numpy()[np.flatnonzero(gemm)].tolist()


def test_separate_capture_without_warmup_joins_by_order(tmp_path):
    step = decode_step(4)
    exe = _exec(tmp_path, [step])
    cap = _capture(tmp_path, [step], "cap.json")
    rank = tracekit.load_trace(exe, captures=[cap]).rank()
    rep = _replayed(rank)
    assert len(rep) == 3 * STEP_ACTIVITIES
    assert (rep[tables.GPU_GRAPH_MATCH] == MATCH_ORDER).all()
    names = rank.ops[tables.OP_NAME].to_numpy()[rep[tables.GPU_OP].to_numpy()]
    assert names[:STEP_ACTIVITIES].tolist() == ["aten::mm", "aten::add", "aten::mm", "aten::mm", "aten::add",
                                                "aten::mm", "aten::copy_"]
    assert (rank.ops[tables.OP_ORIGIN].to_numpy()[rep[tables.GPU_OP].to_numpy()] == str(cap)).all()
    assert _gemm_flops_of(rank) == _gemm_flops(4)
    res = graph_replays(rank)
    assert (res.launches, len(res.graphs), res.activities, res.matched_count) == (3, 1, 21, 21)
    assert res.graphs[0].activities_per_replay == STEP_ACTIVITIES
    # per-replay GPU time: 3 x 40 + 4 + 2 x 2 + 1 = 129 µs (durations in graph_traces.py)
    assert res.graphs[0].gpu_us_per_replay == pytest.approx(129.0)
    assert res.graphs[0].source == "cap.json"


def test_warmup_in_capture_trace_confirms_kernel_names(tmp_path):
    step = decode_step(4)
    exe = _exec(tmp_path, [step])
    cap = _capture(tmp_path, [step], "cap.json", warmup=True, markers=True)
    rank = tracekit.load_trace(exe, captures=[cap]).rank()
    assert (_replayed(rank)[tables.GPU_GRAPH_MATCH] == MATCH_NAME).all()


def test_two_batch_sizes_each_graph_finds_its_own_capture(tmp_path):
    s1, s8 = decode_step(1), decode_step(64)
    exe = _exec(tmp_path, [s1, s8])
    c1 = _capture(tmp_path, [s1], "cap_b1.json", warmup=True)
    c8 = _capture(tmp_path, [s8], "cap_b64.json", warmup=True)
    rank = tracekit.load_trace(exe, captures=[c8, c1]).rank()
    res = graph_replays(rank)
    assert sorted(g.source for g in res.graphs) == ["cap_b1.json", "cap_b64.json"]
    assert res.matched_count == res.activities == 2 * 3 * STEP_ACTIVITIES
    costs = estimate_costs(rank, classify(rank))
    gemm = rank.gpu[tables.GPU_NAME].str.contains("xmma_gemm").to_numpy()
    total = float(np.nansum(costs.table["flops"].to_numpy()[gemm]))
    assert total == pytest.approx(3 * (sum(_gemm_flops(1)) + sum(_gemm_flops(64))))


def test_extra_and_missing_nodes_are_tolerated(tmp_path):
    step = decode_step(4)
    exe = _exec(tmp_path, [step], drop=(3,), extra=2)  # no split-K reduce node, 2 extra memcpy nodes
    cap = _capture(tmp_path, [step], "cap.json")
    rank = tracekit.load_trace(exe, captures=[cap]).rank()
    rep = _replayed(rank)
    assert len(rep) == 3 * (STEP_ACTIVITIES - 1 + 2)
    matched = rep[rep[tables.GPU_GRAPH_MATCH] != ""]
    # the 6 kept step activities match; of the 2 extra memcpy nodes at most none (the capture's one
    # memcpy is at the end, aligned to the step's own copy)
    assert len(matched) == 3 * (STEP_ACTIVITIES - 1)
    assert _gemm_flops_of(rank) == _gemm_flops(4)


def test_mismatched_capture_is_reported_in_one_line_not_joined(tmp_path):
    exe = _exec(tmp_path, [decode_step(4, hidden=1024)])
    cap = _capture(tmp_path, [decode_step(4, hidden=512, ffn=2048)], "other.json", warmup=True)
    trace = tracekit.load_trace(exe, captures=[cap])
    rank = trace.rank()
    assert (_replayed(rank)[tables.GPU_GRAPH_MATCH] == "").all()
    lines = [w for w in trace.warnings if "other.json" in w]
    assert len(lines) == 1 and "not joined" in lines[0] and "\n" not in lines[0]


def test_capture_trace_without_capture_is_reported(tmp_path):
    exe = _exec(tmp_path, [decode_step(4)])
    b = GraphTrace()
    b.eager(decode_step(4))
    cap = b.write(tmp_path / "eager.json")
    trace = tracekit.load_trace(exe, captures=[cap])
    assert any("eager.json" in w and "no graph capture" in w for w in trace.warnings)


def test_capture_inside_the_same_trace_needs_no_option(tmp_path):
    step = decode_step(8)
    b = GraphTrace()
    b.eager(step)  # warm-up
    b.capture(step)
    for _ in range(4):
        b.replay(step)
    rank = tracekit.load_trace(b.write(tmp_path / "inline.json")).rank()
    rep = _replayed(rank)
    assert len(rep) == 4 * STEP_ACTIVITIES and (rep[tables.GPU_GRAPH_MATCH] == MATCH_NAME).all()
    assert _gemm_flops_of(rank) == _gemm_flops(8)


def test_eager_twin_gives_inferred_ops(tmp_path):
    step = decode_step(2)
    b = GraphTrace()
    b.eager(decode_step(16))  # a prefill-like step: other shapes, other grids
    b.eager(step)  # the same kernels as the graph, run eagerly before capture
    for _ in range(2):
        b.replay(step)
    rank = tracekit.load_trace(b.write(tmp_path / "t.json")).rank()
    rep = _replayed(rank)
    assert (rep[tables.GPU_GRAPH_MATCH] == MATCH_INFERRED).all()
    assert _gemm_flops_of(rank) == _gemm_flops(2)


def test_capture_traces_folder_is_picked_up(tmp_path):
    step = decode_step(4)
    _exec(tmp_path, [step], name="exec.json")
    folder = tmp_path / "capture_traces"
    folder.mkdir()
    b = GraphTrace()
    b.capture(step)
    b.write(folder / "cap.json")
    rank = tracekit.load_trace(tmp_path).rank()
    assert (_replayed(rank)[tables.GPU_GRAPH_MATCH] == MATCH_ORDER).all()


def test_non_trace_file_in_capture_folder_is_skipped_with_one_warning(tmp_path):
    """xDiT writes a manifest (execution_details.json: a list of {file, batch_size, mode}) into
    capture_traces/; it must not make the trace unreadable, nor stop the real capture from joining."""
    step = decode_step(4)
    exe = _exec(tmp_path, [step], name="exec.json")
    folder = tmp_path / "capture_traces"
    folder.mkdir()
    b = GraphTrace()
    b.capture(step)
    b.write(folder / "cap.json")
    manifest = folder / "execution_details.json"
    manifest.write_text(json.dumps([{"file": "cap.json", "batch_size": 4, "mode": "FULL"}]))
    trace = tracekit.load_trace(exe)
    assert (_replayed(trace.rank())[tables.GPU_GRAPH_MATCH] == MATCH_ORDER).all()
    about = [w for w in trace.warnings if "execution_details.json" in w]
    assert len(about) == 1 and about[0].startswith("skipped capture_traces/ file ") and "\n" not in about[0]
    assert len(trace.warnings) == 1
    with pytest.raises(TraceFormatError, match=r"execution_details\.json: not a PyTorch profiler trace"):
        tracekit.load_trace(exe, captures=[manifest])  # a capture the user names must be a trace


def test_cli_capture_option_and_bad_capture_path(tmp_path):
    step = decode_step(4)
    exe = _exec(tmp_path, [step])
    cap = _capture(tmp_path, [step], "cap.json")
    run = [sys.executable, "-m", "tracekit"]
    out = tracekit_in_process("info", exe, "--capture", cap)  # info's real process: test_load_errors.py
    assert out.returncode == 0, out.stderr
    line = [x for x in out.stdout.splitlines() if x.startswith("graph replays:")]
    assert line == ["graph replays: 21 GPU activities from 3 launches of 1 graph; 21 (100.0% of their "
                    "GPU time) have an op: 21 by capture (order and kind)"]
    bad = subprocess.run([*run, "analyze", str(exe), "--capture", str(tmp_path / "nope.json")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "nope.json" in bad.stderr


def test_own_capture_can_be_ignored_to_measure_the_inferred_path(tmp_path):
    step = decode_step(8)
    b = GraphTrace()
    b.eager(step)
    b.capture(step)
    b.replay(step)
    from tracekit.trace import graphs
    from tracekit.trace.load import load_file

    rank = graphs.join_graphs(load_file(b.write(tmp_path / "t.json")), [], own_capture=False).rank
    assert (_replayed(rank)[tables.GPU_GRAPH_MATCH] == MATCH_INFERRED).all()
