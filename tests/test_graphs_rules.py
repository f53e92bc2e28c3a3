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
