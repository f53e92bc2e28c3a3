"""cuda_graphs stays silent on graph-replayed work and speaks about the eager rest (synthetic traces).

Timings by construction: each piecewise replay (2 kernels of 2 µs) is launched 20 µs after the
previous one ended, so without the graph exclusion each replay's first kernel is a host-wait gap.
"""

from __future__ import annotations

from tracebuilder import TraceBuilder

import tracekit
from tracekit.analyzers import analyze
from tracekit.suggestions import rules_launch

ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>"


def _replays(b: TraceBuilder, t: float, n: int) -> float:
    """n graph launches of a 2-kernel graph, each 20 µs after the previous replay ended."""
    for _ in range(n):
        corr = b.launch(t, 5, ADD, t + 20, 2, api="cudaGraphLaunch")
        b.gpu(ADD, t + 22.5, 2, corr)
        t += 45
    return t


def _eager(b: TraceBuilder, t: float, n: int) -> float:
    """n eager kernels of 2 µs, one launch every 20 µs: a host-wait gap before each."""
    for _ in range(n):
        op = b.op("aten::add", t, 8, **{"Input Dims": [[256], [256]], "Input type": ["float", "float"]})
        b.launch(t + 1, 5, ADD, t + 8, 2, ext=op)
        t += 20
    return t


def test_silent_when_the_launch_gaps_are_graph_replays(tmp_path):
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 40 * 45 + 10)
    _replays(b, 1, 40)
    a = analyze(tracekit.load_trace(b.write(tmp_path / "g.json")))
    assert a.ranks[0].graphs is not None and a.ranks[0].graphs.launches == 40
    assert rules_launch.cuda_graphs(a) is None


def test_speaks_about_the_eager_rest(tmp_path):
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 40 * 45 + 30 * 20 + 10)
    t = _replays(b, 1, 40)
    _eager(b, t, 30)
    s = rules_launch.cuda_graphs(analyze(tracekit.load_trace(b.write(tmp_path / "g.json"))))
    assert s is not None and "eager rest" in s.title and "80 GPU activities already replay" in s.title
    # the gaps counted are the eager kernels' host waits only: 29 after the first eager kernel plus
    # the first eager kernel itself (it follows a replay), 30 in all
    assert sum(row["launch_gaps"] for row in s.evidence) == 30


def test_report_section_lists_each_graph_escaped(tmp_path):
    """The graphs partial (rendered from this checkout's templates/) shows launches and per-replay
    time, and escapes kernel names."""
    from pathlib import Path
    from types import SimpleNamespace

    import jinja2

    from tracekit.report.graphs_view import graph_section

    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 1000)
    for i in range(3):
        corr = b.launch(10 + 300 * i, 5, "<script>k</script>", 30 + 300 * i, 7, api="cudaGraphLaunch")
        b.gpu(ADD, 40 + 300 * i, 3, corr)
    a = analyze(tracekit.load_trace(b.write(tmp_path / "g.json")))
    section = graph_section([r.graphs for r in a.ranks if r.graphs is not None])  # typed results, not to_dict()
    assert section is not None and len(section.rows) == 1
    row = section.rows[0]
    assert (row.launches, row.activities, row.gpu_time) == ("3", "2", "10.0 µs")  # 7 + 3 µs per replay
    templates = Path(tracekit.__file__).resolve().parents[1] / "templates"
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(templates), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    html = env.get_template("_graphs.html.j2").render(r=SimpleNamespace(anchor="r0", graphs=section))
    assert "&lt;script&gt;k&lt;/script&gt;" in html and "<script>k" not in html


def test_whole_report_has_the_graph_section(tmp_path, monkeypatch):
    """`tracekit report` of a trace with graph replays: the page (this checkout's templates) holds
    the graph table and the join line."""
    from pathlib import Path

    import jinja2

    from tracekit.pipeline.reports import build_view
    from tracekit.report import html

    templates = Path(tracekit.__file__).resolve().parents[1] / "templates"
    monkeypatch.setattr(html, "_loader", lambda: jinja2.FileSystemLoader(templates))
    html.environment.cache_clear()
    html.asset.cache_clear()
    try:
        b = TraceBuilder()
        b.annotation("ProfilerStep#1", 0, 1000)
        for i in range(4):
            corr = b.launch(10 + 200 * i, 5, ADD, 30 + 200 * i, 7, api="cudaGraphLaunch")
            b.gpu(ADD, 40 + 200 * i, 3, corr)
        page = html.render(build_view(tracekit.load_trace(b.write(tmp_path / "g.json"))))
    finally:
        html.environment.cache_clear()
        html.asset.cache_clear()
    assert 'id="r0-graphs"' in page
    assert "graph replays: 8 GPU activities from 4 launches of 1 graph; 0 (0.0% of their GPU time)" in page
