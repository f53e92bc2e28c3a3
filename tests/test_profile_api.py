"""Python API: `tracekit.profile()` blocks, `profile_callable`, step marks, report and analysis hooks."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tracekit.errors import OutputError, ProfileError  # noqa: E402
from tracekit.profile import (  # noqa: E402
    ProfileRun,
    profile,
    profile_callable,
    record,
    step,
)


def load(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def step_names(doc: dict) -> list[str]:
    names = [
        e["name"]
        for e in doc["traceEvents"]
        if e.get("cat") == "user_annotation" and e.get("name", "").startswith("ProfilerStep#")
    ]
    return sorted(names, key=lambda n: int(n.split("#")[1]))


def count_ops(doc: dict, name: str) -> int:
    return sum(1 for e in doc["traceEvents"] if e.get("cat") == "cpu_op" and e["name"] == name)


def test_block_with_marked_steps(tmp_path: Path) -> None:
    out = tmp_path / "block.trace.json.gz"
    a = torch.ones(16, 8)
    with profile(out, report=False) as run:
        assert run.trace_path == out and run.result is None
        for _ in range(3):
            a @ a.t()
            run.step()
        torch.relu(a)
    result = run.result
    assert isinstance(result, ProfileRun)
    assert (result.trace_path, result.steps, result.cuda, result.report_path) == (out, 4, False, None)
    doc = load(out)
    assert step_names(doc) == [f"ProfilerStep#{i}" for i in range(4)]
    assert count_ops(doc, "aten::mm") == 3 and count_ops(doc, "aten::relu") == 1
    assert doc["tracekit"]["mode"] == "api" and doc["tracekit"]["step_source"] == "explicit"


def test_block_without_steps_has_no_profiler_step(tmp_path: Path) -> None:
    out = tmp_path / "plain.trace.json.gz"
    with profile(out, report=False) as run:
        torch.ones(4).add(1)
    assert run.result is not None and run.result.steps == 0
    doc = load(out)
    assert step_names(doc) == [] and count_ops(doc, "aten::add") == 1


def test_step_outside_a_profile_is_a_no_op() -> None:
    step()  # nothing running: must not raise


def test_block_that_raises_still_writes_its_trace(tmp_path: Path) -> None:
    out = tmp_path / "raises.trace.json.gz"
    with pytest.raises(RuntimeError, match="inside the block"), profile(out, report=False) as run:
        torch.ones(3).exp()
        raise RuntimeError("inside the block")
    assert run.result is not None
    doc = load(out)
    assert count_ops(doc, "aten::exp") == 1 and doc["tracekit"]["exit_status"] == 1


def test_nested_profiles_are_refused(tmp_path: Path) -> None:
    with (
        profile(tmp_path / "outer.json.gz", report=False),
        pytest.raises(ProfileError, match="already running"),
    ):
        profile(tmp_path / "inner.json.gz", report=False).__enter__()
    assert (tmp_path / "outer.json.gz").is_file() and not (tmp_path / "inner.json.gz").exists()


def test_explicit_output_is_not_overwritten(tmp_path: Path) -> None:
    out = tmp_path / "x.trace.json.gz"
    out.write_text("old")
    with pytest.raises(OutputError, match="already exists"), profile(out, report=False):
        pass
    assert out.read_text() == "old"
    with profile(out, report=False, force=True):
        torch.ones(1).neg()
    assert count_ops(load(out), "aten::neg") == 1


def test_profile_callable_keeps_warmup_calls_out(tmp_path: Path) -> None:
    calls = []
    a = torch.ones(32, 32)

    def kernel(x: torch.Tensor, *, scale: float) -> torch.Tensor:
        calls.append(scale)
        return (x @ x) * scale

    out = tmp_path / "k.trace.json.gz"
    result = profile_callable(kernel, a, scale=2.0, warmup=2, iters=4, output=out, report=False)
    assert calls == [2.0] * 6
    assert (result.trace_path, result.steps) == (out, 4)
    doc = load(out)
    assert step_names(doc) == [f"ProfilerStep#{i}" for i in range(4)]
    assert count_ops(doc, "aten::mm") == 4  # the 2 warm-up calls are not in the trace
    meta = doc["tracekit"]
    assert (meta["mode"], meta["warmup_calls"], meta["steps_recorded"]) == ("callable", 2, 4)
    assert meta["target"].endswith("kernel")


def test_profile_callable_single_iteration_is_one_step(tmp_path: Path) -> None:
    result = profile_callable(torch.relu, torch.ones(4), warmup=0, iters=1,
                              output=tmp_path / "one.json.gz", report=False)  # fmt: skip
    assert result.steps == 1
    assert step_names(load(result.trace_path)) == ["ProfilerStep#0"]


def test_profile_callable_default_names_never_clobber(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    first = profile_callable(torch.neg, torch.ones(2), warmup=0, iters=1, report=False)
    second = profile_callable(torch.neg, torch.ones(2), warmup=0, iters=1, report=False)
    assert first.trace_path != second.trace_path
    for path in (first.trace_path, second.trace_path):
        assert path.parent == tmp_path
        assert re.fullmatch(r"neg-\d{8}-\d{6}(-\d+)?\.trace\.json\.gz", path.name)


def test_profile_callable_error_propagates_after_writing(tmp_path: Path) -> None:
    state = {"n": 0}

    def flaky() -> None:
        state["n"] += 1
        torch.ones(2).exp()
        if state["n"] == 3:  # warm-up call 1, recorded calls 2 and 3
            raise ValueError("third call fails")

    out = tmp_path / "flaky.json.gz"
    with pytest.raises(ValueError, match="third call fails"):
        profile_callable(flaky, warmup=1, iters=5, output=out, report=False)
    doc = load(out)
    assert count_ops(doc, "aten::exp") == 2 and doc["tracekit"]["exit_status"] == 1


def test_block_warmup_longer_than_its_steps(tmp_path: Path) -> None:
    out = tmp_path / "w.json.gz"
    expected = r"marked 1 step, but warmup=3 skips the first 3"
    with pytest.raises(ProfileError, match=expected), profile(out, warmup=3, report=False) as run:
        run.step()
    assert not out.exists()


def test_bad_iteration_counts_are_refused() -> None:
    with pytest.raises(ProfileError, match="iters must be >= 1"):
        profile_callable(torch.neg, torch.ones(1), iters=0)
    with pytest.raises(ProfileError, match="active must be >= 1"):
        profile(active=0)


def test_report_is_written_beside_the_trace_when_available(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = []

    def write_report(trace_path: Path, out_path: Path, *, force: bool) -> Path:
        seen.append((trace_path, out_path, force))
        written = out_path.with_name(out_path.stem + "-2.html") if out_path.exists() else out_path
        written.write_text("<html></html>")
        return written

    monkeypatch.setattr(record, "report_writer", lambda: write_report)
    out = tmp_path / "r.trace.json.gz"
    with profile(out) as run:
        torch.ones(1).abs()
    assert seen == [(out, tmp_path / "r.report.html", False)]  # the name `tracekit report` picks too
    assert run.result is not None and run.result.report_path == tmp_path / "r.report.html"
    # the report writer decides where an existing report leaves the new one: tracekit says where
    result = profile_callable(torch.neg, torch.ones(1), warmup=0, iters=1, output=out, force=True)
    assert seen[-1] == (out, tmp_path / "r.report.html", True)
    assert result.report_path == tmp_path / "r.report-2.html"


def test_failing_report_keeps_the_trace_and_warns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(trace_path: Path, out_path: Path, *, force: bool) -> None:
        raise RuntimeError("template missing")

    monkeypatch.setattr(record, "report_writer", lambda: broken)
    with pytest.warns(RuntimeWarning, match="report not written: RuntimeError: template missing"):
        result = profile_callable(torch.neg, torch.ones(1), warmup=0, iters=1,
                                  output=tmp_path / "t.json.gz")  # fmt: skip
    assert result.report_path is None and result.trace_path.is_file()
    assert result.report_error == "report not written: RuntimeError: template missing"


def test_analysis_of_the_written_trace(tmp_path: Path) -> None:
    result = profile_callable(torch.neg, torch.ones(1), warmup=0, iters=2,
                              output=tmp_path / "a.trace.json.gz", report=False)  # fmt: skip
    summary = result.analysis.summary_dict()
    assert summary["verdict"] == "cpu-only" and summary["steps_total"] == 2
    assert result.analysis is result.analysis  # computed once

