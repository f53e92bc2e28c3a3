"""tracekit.pipeline: per-rank workers + merge give what the in-memory analysis gives; inputs; errors."""

from __future__ import annotations

import json
import pickle

import pytest
from conftest import SAMPLE_TRACES
from test_ranks import rank_trace, write_job

import tracekit
from tracekit import pipeline
from tracekit.analyzers.analysis import analyze
from tracekit.cli import main
from tracekit.errors import TraceFormatError
from tracekit.pipeline import reports
from tracekit.pipeline.local import model_ranks
from tracekit.suggestions import analysis_document, suggest

DECODE = SAMPLE_TRACES / "gpt2_decode_graph.trace.json.gz"


@pytest.fixture
def job(tmp_path):
    return write_job(tmp_path / "job", "rank{r}.json.gz")


def in_memory(path) -> dict:
    """The reference: the whole trace loaded in this process and analysed at once."""
    trace = tracekit.load_trace(path)
    a = analyze(trace)
    models = model_ranks(trace, a)
    a = a.with_model({m.rank: m.unprofiled for m in models})
    return analysis_document(a, suggest(a, models=models))


def test_one_rank_document_is_the_in_memory_one():
    got = pipeline.run(str(DECODE), jobs=1).to_dict()
    assert got == in_memory(str(DECODE))


def test_merged_document_matches_in_memory(job):
    ref = in_memory(job)
    got = pipeline.run(job, jobs=2).to_dict()
    assert [r["rank"] for r in got["ranks"]] == [r["rank"] for r in ref["ranks"]] == [0, 1, 2]
    for key in ("span_us", "gpu_busy_us", "kernels", "launches", "cpu_launch_us", "steps", "verdict"):
        assert got["summary"][key] == pytest.approx(ref["summary"][key]), key
    assert got["summary"]["queue_p50_us"] == pytest.approx(ref["summary"]["queue_p50_us"], abs=1.0)
    assert got["summary"]["queue_max_us"] == pytest.approx(ref["summary"]["queue_max_us"])
    assert got["steps"] == ref["steps"]
    assert [(c["class"], c["count"]) for c in got["classes"]] == [(c["class"], c["count"]) for c in ref["classes"]]
    for g, r in zip(got["classes"], ref["classes"], strict=True):
        assert g["time_us"] == pytest.approx(r["time_us"]) and g["share"] == pytest.approx(r["share"])
    assert [(k["name"], k["count"]) for k in got["kernels"]] == [(k["name"], k["count"]) for k in ref["kernels"]]
    assert "stragglers" in got and "stragglers" not in ref


def test_pool_and_dask_give_the_same_cross_rank_view(job):
    distributed = pytest.importorskip("dask.distributed")
    local = pipeline.run(job, jobs=1)
    pooled = pipeline.run(job, jobs=2)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        dasked = pipeline.run(job, scheduler=client)
    assert pooled.cross == local.cross == dasked.cross
    assert [s.rank for s in dasked.cross.stragglers] == [2]
    assert len({r.pid for r in pooled.results}) >= 1


def test_results_are_compact():
    result = pipeline.run(str(DECODE), jobs=1, view=True)
    r = result.results[0]
    size = len(pickle.dumps(r))
    # the trace holds ~7,000 kernels and 40,000 events; the result only grouped rows and per-step numbers
    assert size < DECODE.stat().st_size
    assert r.digest.steps and not any(hasattr(v, "columns") for v in vars(r).values())


def test_glob_list_and_rank_filter(job):
    files = sorted(str(p) for p in job.iterdir())
    by_glob = pipeline.run(str(job / "rank*.json.gz"), jobs=1)
    by_list = pipeline.run(files, jobs=1)
    assert [r.rank for r in by_glob.results] == [r.rank for r in by_list.results] == [0, 1, 2]
    one = pipeline.run(job, jobs=1, rank=1)
    assert [r.rank for r in one.results] == [1] and one.cross is None
    with pytest.raises(TraceFormatError, match="no rank 7"):
        pipeline.run(job, jobs=1, rank=7)


def test_cli_inputs_and_errors(job, tmp_path, capsys):
    files = sorted(str(p) for p in job.iterdir())
    assert main(["analyze", "--json", "-q", "-j", "1", files[0], files[2]]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["rank"] for r in doc["ranks"]] == [0, 2]
    assert main(["analyze", str(tmp_path / "nothing" / "*.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tracekit: error:") and "no file matches" in err and "Traceback" not in err
    assert main(["analyze", "-j", "0", files[0]]) == 2
    assert main(["info", "--json", "-j", "1", str(job / "rank*.json.gz")]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["ranks"] == [0, 1, 2]


def test_bad_file_is_skipped_with_a_warning(job, capsys):
    (job / "rank9.json").write_text("{not json")
    result = pipeline.run(job, jobs=1)
    assert [r.rank for r in result.results] == [0, 1, 2]
    assert any(w.startswith("skipped ") and "rank9.json" in w for w in result.warnings)
    bad = job.parent / "bad"
    bad.mkdir()
    (bad / "a.json").write_text("[")
    (bad / "b.json").write_text("")
    with pytest.raises(TraceFormatError, match="none of the 2 files"):
        pipeline.run(bad, jobs=1)


def test_same_rank_twice_gets_the_next_free_number(tmp_path):
    folder = tmp_path / "dup"
    folder.mkdir()
    rank_trace(0).write(folder / "a.json")
    rank_trace(0).write(folder / "b.json")
    result = pipeline.run(folder, jobs=1, view=True)
    assert [r.rank for r in result.results] == [0, 1]
    assert [r.view.anchor for r in result.results] == ["r0", "r1"]
    assert [r["rank"] for r in result.to_dict()["ranks"]] == [0, 1]


def test_write_report_api(job, tmp_path):
    out = tracekit.write_report(job, tmp_path / "r.html", jobs=1)
    assert 'id="cross-ranks"' in out.read_text(encoding="utf-8")


def test_default_report_path_of_a_glob_or_list(job):
    assert reports.default_report_path(str(job / "rank*.json.gz")) == job.parent / "job.report.html"
    assert reports.default_report_path([str(job / "rank1.json.gz")]) == job / "rank1.report.html"
    assert reports.default_report_path(job) == job.parent / "job.report.html"


def test_cli_scheduler_address(job, capsys, monkeypatch):
    distributed = pytest.importorskip("dask.distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cluster:
        monkeypatch.setenv("TRACEKIT_SCHEDULER", cluster.scheduler_address)
        assert main(["analyze", "--json", "-q", str(job)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [s["rank"] for s in doc["stragglers"]] == [2]
