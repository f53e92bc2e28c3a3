"""The HTML report: view-model numbers, escaping of untrusted names, atomic writes, CLI, ranks, CPU-only."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import shared_trace_files
from tracebuilder import H200, TraceBuilder

import tracekit
from tracekit.cli import main
from tracekit.errors import OutputError
from tracekit.pipeline.reports import render_html, write_report
from tracekit.report import default_output, write_view
from tracekit.report.context import SHAPES_WARNING, rank_view, report_view
from tracekit.suggestions.model import Suggestion
from tracekit.units import fmt_bytes

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces"
EVIL = "<script>alert(1)</script>\"q\"'s'&"
EVIL_ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


def small_trace(tmp_path: Path, kernel: str = "sm90_xmma_gemm_bf16", op: str = "aten::mm",
                shapes: bool = True) -> Path:
    """Two steps of 100 µs; step 0: one 20 µs kernel launched by a 5 µs call, step 1: one 10 µs kernel."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#0", 0, 100)
    b.annotation("ProfilerStep#1", 100, 100)
    dims = {"Input Dims": [[64, 128], [128, 64]], "Input type": ["c10::BFloat16"] * 2} if shapes else {}
    e1 = b.op(op, 10, 50, **dims)
    b.launch(15, 5, kernel, 30, 20, ext=e1)
    e2 = b.op("aten::add", 110, 20)
    b.launch(112, 5, "vectorized_elementwise_kernel", 120, 10, ext=e2)
    return b.write(tmp_path / "small.json")


def analysed(path: Path):
    """(trace, {rank: Analysis of that rank}) of a trace file, analysed rank by rank as the report does."""
    from tracekit.analyzers import analyze

    trace = tracekit.load_trace(path)
    return trace, {r: analyze(trace, rank=r) for r in trace.ranks}


def view_of(path: Path, suggestions: list | None = None):
    trace, analyses = analysed(path)
    views = [rank_view(a, suggestions, trace.warnings) for a in analyses.values()]
    return report_view(views, path=str(trace.path), warnings=trace.warnings)


def sugg(id_: str, title: str, saving: float, pct: float, evidence: tuple = (), **kw) -> Suggestion:
    return Suggestion(id=id_, title=title, saving_us=saving, saving_pct=pct, formula=kw.pop("formula", "f"),
                      snippet=kw.pop("snippet", ""), evidence=evidence, **kw)


# --- view model numbers on a hand-built trace ----------------------------------------------------

def test_view_headline_and_sections(tmp_path):
    r = view_of(small_trace(tmp_path), []).ranks[0]
    tiles = {t.label: t for t in r.tiles}
    # small_trace: kernels of 20 and 10 µs in two 100 µs steps, each launched by a 5 µs call: per step
    # 15 µs busy of 100 µs, 5 µs of launch calls, 1 launch, 1 kernel
    busy, launch = tiles["GPU busy per step"], tiles["CPU launch time per step"]
    assert busy.value == "15.0 µs" and busy.sub == "15.0% of the 100 µs step"
    assert launch.value == "5.00 µs" and launch.sub == "1 launch per step · 5.00 µs each"
    assert tiles["Kernels per step"].value == "1" and tiles["Kernels per step"].sub == "2 in total"
    assert tiles["GPU idle per step"].value == "85.0 µs"
    assert tiles["Steps"].value == "2" and tiles["Steps"].sub == "100 µs per step"
    # one device name: the device table's, with the memory the trace reports (tracebuilder.H200)
    assert tiles["Device"].value == f"NVIDIA H200 SXM 141GB ({fmt_bytes(H200['totalGlobalMem'])} reported)"
    assert tiles["Device"].sub == "989 TFLOP/s bf16 · 4.80 TB/s"
    assert next((b.label, b.value) for b in r.classes) == ("gemm", "20.0 µs")
    assert [s.label for s in r.steps] == ["step 0", "step 1"] and r.steps[0].busy_w == 20.0
    # timeline: the GPU row is busy 30 of the 200 µs; the first steps' bins hold the gemm kernel
    gpu_row = r.timeline["rows"][0]
    assert gpu_row["label"] == "GPU (all streams)" and gpu_row["busy_text"] == "30.0 µs"
    assert sum(gpu_row["busy"]) / 1000 * r.timeline["bin_us"] == pytest.approx(30.0, abs=0.5)  # per mille
    named = {r.timeline["names"][i] for i in gpu_row["top"] if i >= 0}
    assert named == {"sm90_xmma_gemm_bf16", "vectorized_elementwise_kernel"}
    assert r.suggestions == () and r.suggestions_available
    assert r.handoff is not None and r.handoff.step == "step 0" and r.handoff.span == "100 µs"


def test_roofline_hidden_with_reason_without_flops(tmp_path):
    html = write_report(small_trace(tmp_path, shapes=False), tmp_path / "r.html").read_text(encoding="utf-8")
    assert 'data-chart="roofline"' not in html
    assert "No roofline: no kernel row has both FLOPs and bytes (the trace has no input shapes)." in html


def test_missing_shapes_warning_and_no_suggestions_engine(tmp_path):
    trace, analyses = analysed(small_trace(tmp_path, shapes=False))
    html = render_html(analyses, trace, suggestions=None)
    assert "record with record_shapes=True to get FLOPs" in html and SHAPES_WARNING in html
    assert "Suggestions were not computed" in html
    trace, analyses = analysed(small_trace(tmp_path, shapes=True))
    html = render_html(analyses, trace, suggestions=[])
    # shapes were recorded (aten::add alone lacks them: the analyzer's own note says so)
    assert SHAPES_WARNING not in html and "No rule fired on this trace" in html


def test_suggestion_cards_render_in_order(tmp_path):
    cards = [
        sugg("avoid_sync", "Remove the .item() in the loop", 12.0, 6.0, ({"op": "aten::item", "count": 2},),
             snippet="x = t.item()  # move out of the loop"),
        sugg("cuda_graphs", "Capture the step in a CUDA graph", 150.0, 75.0,
             ({"step": 0, "gpu_idle_us": 80.0}, {"step": 1, "gpu_idle_us": 90.0}),
             snippet="torch.compile(model, mode=\"reduce-overhead\")", per_step_us=75.0,
             basis="of the 2 profiled steps"),
    ]
    trace, analyses = analysed(small_trace(tmp_path))
    html = render_html(analyses, trace, suggestions=cards)
    assert html.index("Capture the step in a CUDA graph") < html.index("Remove the .item() in the loop")
    assert "Biggest win" in html and "saves ~75.0 µs per step" in html and "(75.0%)" in html
    assert "75.0 µs per step · of the 2 profiled steps" in html
    assert "<th class=\"n\">gpu idle</th>" in html and "<td class=\"n\">90.0 µs</td>" in html
    assert "torch.compile(model, mode=&#34;reduce-overhead&#34;)" in html
    assert "do not add them up" in html  # two savings: the overlap note
    # a launch-bound saving says how much the profiler slowed the launches: 5 µs calls vs ~3 µs unprofiled
    assert "launch calls took 5.00 µs each here against ~3.00 µs without a profiler (1.7× slower)" in html


# --- safety: untrusted names ----------------------------------------------------------------------

def _assert_escaped(html: str) -> None:
    assert "<script>alert(1)" not in html
    assert EVIL_ESCAPED in html  # shown as text in the table
    # chart data is JSON inside <script type="application/json"> with <, >, & escaped
    for blob in re.findall(r'<script type="application/json"[^>]*>(.*?)</script>', html, re.S):
        assert "<" not in blob and ">" not in blob
        json.loads(blob)
    # the only executable script is ours, allowed by hash in the Content-Security-Policy
    assert len(re.findall(r"<script>", html)) == 1 and "script-src 'sha256-" in html


def test_escaping_in_render_html(tmp_path):
    trace, analyses = analysed(small_trace(tmp_path, kernel=EVIL, op=EVIL))
    html = render_html(analyses, trace, suggestions=[
        sugg("x", EVIL, 1.0, 1.0, ({"kernel": EVIL},), formula=EVIL, snippet=EVIL)])
    _assert_escaped(html)
    assert "\\u003cscript\\u003e" in html  # the timeline's kernel name, escaped inside JSON


def test_escaping_end_to_end(tmp_path):
    path = small_trace(tmp_path, kernel=EVIL, op=EVIL)
    out = write_report(path, tmp_path / "r.html")
    _assert_escaped(out.read_text(encoding="utf-8"))


# --- atomic output --------------------------------------------------------------------------------

def test_failing_render_leaves_no_file(tmp_path, monkeypatch):
    import tracekit.report as report

    def boom(view):
        raise RuntimeError("render failed")

    monkeypatch.setattr(report, "render", boom)
    view = view_of(small_trace(tmp_path), [])
    before = set(tmp_path.iterdir())
    with pytest.raises(RuntimeError):
        write_view(view, tmp_path / "r.html")
    assert set(tmp_path.iterdir()) == before  # neither the report nor a temp file


def test_existing_file_kept_without_force(tmp_path):
    view = view_of(small_trace(tmp_path), [])
    target = tmp_path / "r.html"
    target.write_text("old")
    written = write_view(view, target)
    assert written == tmp_path / "r-1.html" and target.read_text() == "old"
    assert written.read_text(encoding="utf-8").startswith("<!doctype html>")
    assert write_view(view, target, force=True) == target and target.read_text(encoding="utf-8") != "old"
    with pytest.raises(OutputError, match="does not exist"):
        write_view(view, tmp_path / "no" / "such" / "dir.html")


def test_default_output_beside_trace(tmp_path):
    p = tmp_path / "run.pt.trace.json.gz"
    p.write_bytes(b"")
    assert default_output(p) == tmp_path / "run.report.html"
    assert default_output(tmp_path) == tmp_path.parent / f"{tmp_path.name}.report.html"


# --- CLI ------------------------------------------------------------------------------------------

def test_cli_report_writes_and_does_not_clobber(tmp_path, capsys):
    trace = small_trace(tmp_path)
    out = tmp_path / "rep.html"
    assert main(["report", str(trace), "-o", str(out)]) == 0
    assert out.exists() and f"wrote {out}" in capsys.readouterr().out
    assert main(["report", str(trace), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"{out} exists; wrote {tmp_path / 'rep-1.html'} instead" in err
    assert main(["report", str(trace), "-o", str(out), "--force", "-q"]) == 0
    assert not (tmp_path / "rep-2.html").exists()


@pytest.mark.parametrize("content", [None, "not json", '{"traceEvents": 5}'])
def test_cli_bad_input_is_one_line_exit_2(tmp_path, capsys, content):
    path = tmp_path / "bad.json"
    if content is not None:
        path.write_text(content)
    assert main(["report", str(path), "-o", str(tmp_path / "x.html")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tracekit: error: ") and "\n" not in err and "Traceback" not in err
    assert not (tmp_path / "x.html").exists()


# --- CPU-only and multi-rank traces ---------------------------------------------------------------

def test_cpu_only_synthetic(tmp_path):
    b = TraceBuilder()
    b.annotation("ProfilerStep#0", 0, 1000)
    b.op("aten::matmul", 10, 600)
    b.op("aten::relu", 700, 100)
    html = write_report(b.write(tmp_path / "cpu.json"), tmp_path / "cpu.html").read_text(encoding="utf-8")
    assert "CPU-only" in html and "CPU time by top-level op" in html and "aten::matmul" in html
    assert 'data-chart="roofline"' not in html and 'data-chart="timeline"' not in html


def test_cpu_only_shared_trace(tmp_path):
    path = SHARED / "hta" / "cpu_only" / "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
    if not path.exists():
        pytest.skip("../shared/traces is absent")
    html = write_report(path, tmp_path / "cpu.html").read_text(encoding="utf-8")
    assert "CPU-only" in html and "CPU-only trace (no GPU kernels" in html  # the loader's warning


def test_multi_rank_directory(tmp_path):
    path = SHARED / "hta" / "trace_filter"
    if not path.is_dir():
        pytest.skip("../shared/traces is absent")
    html = write_report(path, tmp_path / "ranks.html").read_text(encoding="utf-8")
    assert 'data-rank="r0"' in html and 'data-rank="r1"' in html  # one section and one button per rank
    assert len(re.findall(r'<section class="rank"', html)) == 2
    only1 = write_report(path, tmp_path / "rank1.html", rank=1).read_text(encoding="utf-8")
    assert len(re.findall(r'<section class="rank"', only1)) == 1 and 'id="r1"' in only1
    # the Python API renders one Analysis per rank, and refuses (not re-analyses) a combined one
    from tracekit.analyzers import analyze

    trace, analyses = analysed(path)
    assert len(re.findall(r'<section class="rank"', render_html(analyses, trace))) == 2
    # a combined multi-rank Analysis is reported per rank, re-analysed from its trace...
    assert len(re.findall(r'<section class="rank"', render_html(analyze(trace), trace))) == 2
    with pytest.raises(ValueError, match="needs its trace"):  # ...which it cannot be without the trace
        render_html(analyze(trace))


# --- size: a 100k-kernel trace still renders, with capped rows and points ---------------------------

def test_100k_kernels_render_capped(tmp_path):
    from tracekit.analyzers.timeline import TIMELINE_BINS
    from tracekit.report import charts, tables

    b = TraceBuilder()
    n, t = 100_000, 0.0
    for i in range(n):
        if i % 2000 == 0:
            b.annotation(f"ProfilerStep#{i // 2000}", t, 20_000.0)
        ext = b.op("aten::mm", t, 8, **{"Input Dims": [[i % 64 + 1, 256], [256, 256]], "Input type": ["float", "float"]})
        b.launch(t + 1, 4, f"kernel_{i % 3000}", t + 6, 3.0, ext=ext, stream=7 + i % 20)
        t += 10.0
    out = write_report(b.write(tmp_path / "big.json"), tmp_path / "big.html")
    html = out.read_text(encoding="utf-8")
    assert out.stat().st_size < 5_000_000
    assert html.count('<tr data-class="') == tables.MAX_KERNEL_ROWS
    assert f"Showing the {tables.MAX_KERNEL_ROWS:,} longest of" in html
    timeline = json.loads(re.search(r'id="r0-tl-data">(.*?)</script>', html, re.S).group(1))
    assert all(len(row["busy"]) == TIMELINE_BINS for row in timeline["rows"])
    assert "8 other streams" in [row["label"] for row in timeline["rows"]]  # 20 streams: 12 shown + 8 merged
    roof = json.loads(re.search(r'id="r0-rf-data">(.*?)</script>', html, re.S).group(1))
    assert len(roof["points"]) <= charts.MAX_ROOFLINE_POINTS
    # the per-kernel detail: whole steps of 2,000 kernels from the first steady one, within the budget
    from tracekit.analyzers.timeline_detail import MAX_ACTIVITIES

    detail = timeline["detail"]
    n_steps = len(detail["steps"])
    assert n_steps == MAX_ACTIVITIES // 2000 and len(detail["gpu"]["t"]) == 2000 * n_steps
    assert detail["unit_us"] == 0.01
    starts = np.cumsum(detail["gpu"]["t"]) * 0.01  # deltas of 10 ns -> µs after the timeline start
    assert np.allclose(np.diff(starts), 10.0)  # one kernel every 10 µs, as built
    assert (detail["gpu"]["d"], detail["gpu"]["q"]) == (300, 100)  # every kernel 3 µs, 6 - (1 + 4) = 1 µs late
    assert out.stat().st_size <= 1_500_000  # the whole report, detail included


def test_gpt2_decode_sample_report_size(tmp_path):
    sample = Path(__file__).resolve().parents[1] / "sample_traces" / "gpt2_decode.trace.json.gz"
    if not sample.exists():
        pytest.skip("sample_traces/gpt2_decode.trace.json.gz is not recorded in this checkout")
    out = write_report(sample, tmp_path / "gpt2.html")
    assert out.stat().st_size < 5_000_000  # issue 5: under 5 MB (the < 2 s load is in test_browser)
    html = out.read_text(encoding="utf-8")
    assert "Launch-bound" in html and 'data-chart="roofline"' in html


@pytest.mark.parametrize("path", shared_trace_files(), ids=lambda p: p.name)
def test_every_shared_trace_reports(tmp_path, path):
    html = write_report(path, tmp_path / "r.html").read_text(encoding="utf-8")
    assert html.startswith("<!doctype html>") and html.rstrip().endswith("</html>")
    assert len(html.encode()) < 5_000_000
    for blob in re.findall(r'<script type="application/json"[^>]*>(.*?)</script>', html, re.S):
        json.loads(blob)  # chart data is valid JSON (no NaN)
