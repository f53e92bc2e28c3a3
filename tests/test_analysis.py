"""analyze(): the combined result, its JSON document, and the `tracekit analyze` command."""

from __future__ import annotations

import json

import pytest
from tracebuilder import TraceBuilder

import tracekit
from tracekit.analyzers.analysis import analyze
from tracekit.analyzers.summary import KERNEL_COLUMNS, SCHEMA
from tracekit.cli import main
from tracekit.suggestions import Suggestion, analysis_document

N = 4096
ADDMM_FLOPS = 2 * N * N * N  # 137.4 GFLOP


def decode_trace(tmp_path, *, rank: int | None = None, name: str = "decode.json"):
    """Two decode-like steps: a bf16 4096^3 addmm and three short elementwise kernels each."""
    b = TraceBuilder()
    if rank is not None:
        b.top["distributedInfo"] = {"rank": rank, "world_size": 2, "backend": "nccl"}
    for step, t0 in ((1, 0.0), (2, 2000.0)):
        b.annotation(f"ProfilerStep#{step}", t0, 2000)
        mm = b.op("aten::addmm", t0 + 10, 40, **{
            "Input Dims": [[N], [N, N], [N, N], [], []],
            "Input type": ["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "Scalar", "Scalar"]})
        b.launch(t0 + 20, 10, "nvjet_sm90_tst_256x128_64x4_2x1_v_bz_coopA_TNT", t0 + 100, 300, ext=mm)
        for i in range(3):
            add = b.op("aten::add", t0 + 500 + 400 * i, 30, **{
                "Input Dims": [[N, N], [N, N], []], "Input type": ["c10::BFloat16", "c10::BFloat16", "Scalar"]})
            b.launch(t0 + 505 + 400 * i, 10,
                     "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>",
                     t0 + 520 + 400 * i, 8, ext=add)
    return b.write(tmp_path / name)


def test_analysis_numbers(tmp_path):
    a = analyze(tracekit.load_trace(decode_trace(tmp_path)))
    t = a.totals
    assert (t.steps, t.kernels, t.launches) == (2, 8, 8)
    assert t.gpu_busy_us == pytest.approx(2 * (300 + 3 * 8))
    assert t.span_us == pytest.approx(4000.0)
    assert t.cpu_launch_us == pytest.approx(80.0)
    assert t.short_kernels == 6 and a.totals.kernels_per_step == 4.0
    assert a.verdict == "launch-bound"  # util 0.16; 6 of 8 kernels (8 µs) shorter than their 10 µs launch
    classes = a.classes.set_index("key")
    assert classes.loc["gemm", "time_us"] == pytest.approx(600.0)
    assert classes.loc["elementwise", "count"] == 6
    rows = a.kernels.set_index("name")
    gemm = rows.loc["nvjet_sm90_tst_256x128_64x4_2x1_v_bz_coopA_TNT"]
    assert (gemm["count"], gemm["class"], gemm["library"], gemm["op"]) == (2, "gemm", "cublas", "aten::addmm")
    assert gemm["time_us"] == pytest.approx(600.0)
    assert gemm["flops"] == pytest.approx(2 * ADDMM_FLOPS, rel=1e-3)  # two calls of 137.4 GFLOP
    assert a.device is not None and "H200" in a.device.name


def test_json_document(tmp_path):
    a = analyze(tracekit.load_trace(decode_trace(tmp_path)), tokens_per_step=1)
    doc = json.loads(json.dumps(analysis_document(a, None), allow_nan=False))
    assert doc["schema"] == SCHEMA == "tracekit.analysis/2"
    assert {"schema", "device", "summary", "steps", "classes", "kernels"} <= set(doc)
    s = doc["summary"]
    for key in ("gpu_busy_us", "span_us", "kernels", "launches", "cpu_launch_us", "verdict"):
        assert key in s
    assert (s["kernels"], s["launches"], s["verdict"]) == (8, 8, "launch-bound")
    assert s["kernels_per_token"] == 4.0 and s["queue_max_us"] == pytest.approx(70.0)
    assert [st["step"] for st in doc["steps"]] == [1, 2]
    assert doc["steps"][0]["gpu_busy_us"] == pytest.approx(324.0)
    assert {c["class"] for c in doc["classes"]} == {"gemm", "elementwise"}
    shares = {c["class"]: c["share"] for c in doc["classes"]}  # by hand: 2 x 300 µs GEMM, 6 x 8 µs adds
    assert shares["gemm"] == pytest.approx(600 / 648) and shares["elementwise"] == pytest.approx(48 / 648)
    for row in doc["kernels"]:
        assert tuple(row) == KERNEL_COLUMNS
    assert doc["kernels"][0]["time_us"] >= doc["kernels"][-1]["time_us"]
    assert "H200" in doc["device"]["name"]
    assert doc["suggestions"] is None
    rank0 = doc["ranks"][0]  # 7 gaps on stream 7, all launched late: 3328 - 100 - 648 µs of host wait
    assert rank0["streams"] == [{"stream": 7, "activities": 8, "busy_us": 648.0, "idle_us": pytest.approx(2580.0),
                                 "host_wait_us": pytest.approx(2580.0), "kernel_wait_us": 0.0, "other_us": 0.0}]
    assert {a["name"]: a["count"] for a in rank0["apis"]} == {"cudaLaunchKernel": 8}


def test_document_carries_the_suggestions_after_the_warnings(tmp_path):
    a = analyze(tracekit.load_trace(decode_trace(tmp_path)))
    s = Suggestion(id="cuda_graphs", title="t", saving_us=1.0, saving_pct=1.0, formula="f", snippet="",
                   evidence=({"shapes": ((4, 8), (8,)), "n": 1},))
    doc = analysis_document(a, [s])
    keys = list(doc)
    assert keys[keys.index("warnings") + 1] == "suggestions" and "suggestions" not in a.to_dict()
    (only,) = doc["suggestions"]
    assert only["id"] == "cuda_graphs"
    assert only["evidence"] == [{"shapes": "[4, 8], [8]", "n": 1}]  # tuples written as text
    assert analysis_document(a, None)["suggestions"] is None  # rules not run: null


def test_multi_rank_combines_and_selects(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    decode_trace(folder, rank=0, name="rank0.json")
    decode_trace(folder, rank=1, name="rank1.json")
    trace = tracekit.load_trace(folder)
    both = analyze(trace)
    assert [r.rank for r in both.ranks] == [0, 1]
    assert (both.totals.kernels, both.totals.steps) == (16, 4)
    assert both.kernels.set_index("name").loc["nvjet_sm90_tst_256x128_64x4_2x1_v_bz_coopA_TNT", "count"] == 4
    doc = both.to_dict()
    assert [r["rank"] for r in doc["ranks"]] == [0, 1] and len(doc["steps"]) == 4
    one = analyze(trace, rank=1)
    assert [r.rank for r in one.ranks] == [1] and one.totals.kernels == 8


def test_cpu_only(shared_traces):
    trace = tracekit.load_trace(shared_traces / "hta" / "cpu_only")
    doc = analyze(trace).to_dict()
    assert doc["summary"]["verdict"] == "cpu-only" and doc["kernels"] == [] and doc["classes"] == []
    assert doc["device"] is None


def test_cli_json_and_text(tmp_path, capsys):
    path = str(decode_trace(tmp_path))
    assert main(["analyze", path, "--json", "--tokens-per-step", "1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["kernels_per_token"] == 4.0
    assert main(["analyze", path]) == 0
    out = capsys.readouterr().out
    assert "verdict   launch-bound" in out and "time by class (total over" in out and "nvjet_sm90" in out


def test_cli_errors(tmp_path, capsys):
    path = str(decode_trace(tmp_path))
    assert main(["analyze", path, "--rank", "5"]) == 2
    assert "tracekit: error:" in capsys.readouterr().err
    assert main(["analyze", str(tmp_path / "missing.json")]) == 2


def test_cli_escapes_terminal_controls(tmp_path, capsys):
    b = TraceBuilder()
    b.launch(0, 5, "evil\x1b[2Jkernel", 10, 100)
    assert main(["analyze", str(b.write(tmp_path / "evil.json"))]) == 0
    out = capsys.readouterr().out
    assert "\x1b[2J" not in out and "evil\\x1b[2Jkernel" in out  # the escape shown, not obeyed
