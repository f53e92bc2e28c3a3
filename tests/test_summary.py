"""AnalysisSummary: per-rank summaries add up (numbers worked out by hand on the synthetic 3-rank job of
test_ranks), the sum does not depend on how it is grouped, and the document is written from it."""

from __future__ import annotations

import json

import pytest
from conftest import SAMPLE_TRACES
from test_ranks import STEPS, write_job

import tracekit
from tracekit import pipeline
from tracekit.analyzers.analysis import analyze
from tracekit.analyzers.summary import KERNEL_COLUMNS, combine, rank_summary, summarize_analysis

# Per step (tests/test_ranks.py:rank_trace): a 2,000 µs GEMM on every rank; all-reduce time 5,000 + 90
# (rank 0), 4,950 + 100 (rank 1), 1,000 + 100 (rank 2) µs; four steady steps per rank.
GEMM_US = 2000.0 * len(STEPS) * 3
COMM_US = (5090.0 + 5050.0 + 1100.0) * len(STEPS)
# Queue delays (kernel start - end of its launch call): 40 µs, except rank 0's second all-reduce
# (50 µs) and rank 1's first one (90 µs): 28 x 40, 4 x 50, 4 x 90 over the job.


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return pipeline.run(str(write_job(tmp_path_factory.mktemp("s") / "job")), jobs=1)


def test_ranks_add_up_to_the_hand_worked_totals(run):
    s = run.summary
    assert [r.rank for r in s.ranks] == [0, 1, 2]
    rows = {r.key: r for r in s.classes.rows}
    assert rows["gemm"].time_us == pytest.approx(GEMM_US) and rows["gemm"].count == 12
    assert rows["communication"].time_us == pytest.approx(COMM_US) and rows["communication"].count == 24
    assert rows["gemm"].share == pytest.approx(GEMM_US / (GEMM_US + COMM_US))
    assert [r.key for r in s.classes.rows] == ["communication", "gemm"]  # largest first
    assert s.totals.steps == 12 and s.totals.kernels == 36
    assert s.headline_kernels == (3,) * 12 and s.kernels_per_step_median == 3.0
    q = s.queue.stats
    assert (q.count, q.p50_us, q.max_us) == (36, 40.0, 90.0)
    assert 50.0 <= q.p90_us <= 90.0  # the sketch is exact in rank to 0.1 %: between the 32nd and 33rd value
    one = run.results[0].summary.queue.stats  # one rank: exact percentiles
    assert (one.count, one.p50_us, one.p90_us, one.max_us) == (12, 40.0, 50.0, 50.0)


def test_sum_does_not_depend_on_grouping(run):
    a, b, c = (r.summary for r in run.results)
    left, right, flat = (a + b) + c, a + (b + c), combine([a, b, c])
    for other in (left, right):
        assert other.totals == flat.totals and other.classes == flat.classes
        assert other.queue.stats == flat.queue.stats and other.steps == flat.steps
        assert other.kernels[list(KERNEL_COLUMNS)].equals(flat.kernels[list(KERNEL_COLUMNS)])
    assert run.to_dict()["classes"] == flat.classes.to_records("class")


def test_in_memory_rank_summaries_add_up_to_the_whole_analysis():
    """An Analysis of two ranks computes its classes over both ranks' raw rows at once; the sum of
    its per-rank summaries must give the same times and counts."""
    a = analyze(tracekit.load_trace(SAMPLE_TRACES / "ddp_slow_rank1"))
    summed = combine([rank_summary(a, r) for r in a.ranks])
    whole = {str(k): (t, n) for k, t, n in a.classes[["key", "time_us", "count"]].itertuples(index=False)}
    assert {r.key: r.count for r in summed.classes.rows} == {k: n for k, (_, n) in whole.items()}
    for r in summed.classes.rows:
        assert r.time_us == pytest.approx(whole[r.key][0], rel=1e-12)
    assert summed.totals == a.totals
    assert summed.kernels["time_us"].sum() == pytest.approx(a.kernels["time_us"].sum(), rel=1e-12)


def test_renumbered_rank_moves_every_row():
    a = analyze(tracekit.load_trace(SAMPLE_TRACES / "gpt2_decode_graph.trace.json.gz"))
    s = summarize_analysis(a).renumbered(7)
    doc = json.loads(json.dumps(s.to_dict(), allow_nan=False))
    assert {r["rank"] for r in doc["ranks"]} == {r["rank"] for r in doc["steps"]} == {7}
    assert {r["rank"] for r in doc["steady_steps"]} == {7}
