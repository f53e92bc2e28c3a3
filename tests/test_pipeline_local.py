"""The pipeline's in-memory entry points (local, compare, produce_report) give what the steps by hand give."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import SAMPLE_TRACES
from test_ranks import STEPS, rank_trace, write_job

import tracekit
from tracekit.analyzers.analysis import Analysis, analyze
from tracekit.analyzers.step_selection import StepsError
from tracekit.compare.diff import diff
from tracekit.pipeline.compare import compare_files
from tracekit.pipeline.local import analyse_file, analyse_ranks, analyse_trace, model_ranks
from tracekit.pipeline.reports import produce_report, write_report
from tracekit.suggestions import Suggestion, analysis_document, suggest

FP32 = SAMPLE_TRACES / "linear_fp32.trace.json.gz"
TF32 = SAMPLE_TRACES / "linear_tf32.trace.json.gz"


def modelled(trace: tracekit.Trace, rank: int | None = None) -> tuple[Analysis, list[Suggestion]]:
    """The steps by hand: analyze, the execution model of each rank, the rules priced by it."""
    a = analyze(trace, rank=rank)
    models = model_ranks(trace, a)
    a = a.with_model({m.rank: m.unprofiled for m in models})
    return a, suggest(a, models=models)


def _with_bad_event(path: Path) -> Path:
    """Rank 0 of the test job plus one malformed event: loading it warns once."""
    builder = rank_trace(0)
    builder.raw({"ph": "X", "name": "bad", "ts": "x", "dur": [1], "pid": 1, "tid": 1, "cat": "cpu_op"})
    return builder.write(path)


def test_analyse_file_is_load_analyze_suggest(tmp_path):
    path = _with_bad_event(tmp_path / "w.json")
    got = analyse_file(path)
    by_hand, rules = modelled(tracekit.load_trace(path))
    assert analysis_document(got.analysis, got.suggestions) == analysis_document(by_hand, rules)
    assert [s.id for s in got.suggestions] == [s.id for s in rules]
    # On the traced timeline overlap_comm fires; the what-if replay silences it: the step mark runs
    # 2.24 ms past the last all-reduce's launch with nothing recorded, so shorter collectives leave
    # the step as long (test_ranks.rank_trace: the last launch at step + 7.75 ms, the mark ends at + 9.99 ms).
    # That silence is what preprocess_off_thread answers: from the launch's return (step + 7760) to the
    # next step's DataLoader window (step + 10001) no call, 2241 µs, the GPU idle but for rank 0's second
    # all-reduce (7810 → 7900): 2151 µs, in steady steps 2-4 (each gap counts in the step of the call that
    # ends it): 6453 µs traced.
    assert [s.id for s in suggest(by_hand)] == ["overlap_comm", "preprocess_off_thread"]
    assert [s.id for s in rules] == ["preprocess_off_thread"] and rules[0].traced_saving_us == pytest.approx(6453.0)
    assert got.path == str(path) and got.warnings == (f"{path}: skipped 1 malformed events",)
    assert analyse_file(path, with_suggestions=False).suggestions == ()


def test_analyse_trace_takes_the_rank_and_steps(tmp_path):
    trace = tracekit.load_trace(write_job(tmp_path / "job"))
    one = analyse_trace(trace, rank=2, steps="all")
    assert [r.rank for r in one.analysis.ranks] == [2]
    assert one.analysis.totals.steps == len(STEPS)  # the job marks 4 steps
    assert analyse_trace(trace, rank=2, steps="2-3").analysis.totals.steps == 2
    with pytest.raises(StepsError):
        analyse_trace(trace, steps="5-2")


def test_analyse_ranks_is_one_analysis_per_rank(tmp_path):
    trace = tracekit.load_trace(write_job(tmp_path / "job"))
    per_rank = analyse_ranks(trace)
    assert sorted(per_rank) == [0, 1, 2]
    for number, result in per_rank.items():
        by_hand, rules = modelled(trace, rank=number)
        assert [r.rank for r in result.analysis.ranks] == [number]
        assert analysis_document(result.analysis, result.suggestions) == analysis_document(by_hand, rules)
    assert list(analyse_ranks(trace, rank=1)) == [1]


def test_compare_files_is_the_diff_of_both_analyses_with_the_rules_of_before(tmp_path):
    warned: list[str] = []
    bad = _with_bad_event(tmp_path / "w.json")
    got = compare_files(FP32, bad, warn=warned.append)
    (before, rules), (after, _) = modelled(tracekit.load_trace(FP32)), modelled(tracekit.load_trace(bad))
    assert got.to_dict() == diff(before, after, rules).to_dict()
    assert warned == [f"{bad}: skipped 1 malformed events"]  # FP32 loads without a warning
    forward = compare_files(FP32, TF32)
    assert [s.id for s in forward.suggestions] == ["lower_precision"]  # the fp32 run's rule, checked
    assert forward.step.pct is not None and forward.step.pct < -80  # 2.75 ms -> 333 µs per step


def test_produce_report_says_where_it_wrote(tmp_path):
    trace = tmp_path / "lin.json.gz"
    trace.write_bytes(FP32.read_bytes())
    first = produce_report(trace, jobs=1)
    assert first.path == first.wanted == tmp_path / "lin.report.html"
    assert not first.result.multi and len(first.view.ranks) == 1
    second = produce_report(trace, jobs=1)  # the first is kept: a numbered name beside it
    assert second.wanted == first.path and second.path == tmp_path / "lin-1.report.html"
    assert write_report(trace, jobs=1) == tmp_path / "lin-2.report.html"  # the API still returns the path
    assert produce_report(trace, first.path, force=True, jobs=1).path == first.path
