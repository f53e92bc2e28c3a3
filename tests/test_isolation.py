"""A tracekit bug in one part of the analysis leaves that part out and says so (tracekit.analyzers.isolate):
the pattern detectors of a rank (no suggestions), one rule (its suggestion), the what-if pricing (the traced
savings); the report is still written, the exit status is 0. TRACEKIT_DEBUG=1 (the suite's default) raises."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from conftest import tracekit_in_process

from tracekit.analyzers.detectors import foreach
from tracekit.suggestions import rules

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"
LOOP = SAMPLES / "small_matmul_loop.trace.json.gz"  # launch-bound: suggestions fire (cuda_graphs, batch_bmm)


def _broken(*args: object, **kwargs: object) -> object:
    raise ValueError("max() iterable argument is empty")


def _analyze(*args: str | Path) -> tuple[dict, str]:
    done = tracekit_in_process("analyze", "--json", *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done.stderr


def test_a_detector_bug_leaves_the_suggestions_out_and_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("TRACEKIT_DEBUG", raising=False)
    whole, _ = _analyze(LOOP)
    assert whole["suggestions"]  # the control: this trace has suggestions
    monkeypatch.setattr(foreach, "find_foreach_loops", _broken)
    doc, err = _analyze(LOOP)
    assert doc["suggestions"] == []
    note = next(w for w in doc["warnings"] if w.startswith("tracekit bug: the pattern detectors failed"))
    assert "ValueError: max() iterable argument is empty at tracekit/analyzers/detectors/find_all.py:" in note
    assert "rank 0 gets no suggestions" in note and "Traceback" not in err and note in err
    assert doc["summary"]["verdict"] == whole["summary"]["verdict"]  # the rest of the analysis stands
    out = tmp_path / "r.html"
    done = tracekit_in_process("report", LOOP, "-o", out)
    assert done.returncode == 0 and out.stat().st_size > 10_000
    assert "the pattern detectors failed" in out.read_text()


def test_a_rule_bug_leaves_only_that_rule_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRACEKIT_DEBUG", raising=False)
    whole, _ = _analyze(LOOP)
    ids = [s["id"] for s in whole["suggestions"]]
    assert len(ids) >= 2
    broken = tuple(dataclasses.replace(r, check=_broken) if r.id == ids[0] else r for r in rules.RULES)
    monkeypatch.setattr(rules, "RULES", broken)  # Rule.run calls its check
    doc, err = _analyze(LOOP)
    assert [s["id"] for s in doc["suggestions"]][:1] != ids[:1] and ids[1] in [s["id"] for s in doc["suggestions"]]
    assert any(w.startswith(f"tracekit bug: rule `{ids[0]}` failed (ValueError") for w in doc["warnings"])
    assert "its suggestion is left out" in err


def test_debug_raises_instead(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEKIT_DEBUG", "1")
    monkeypatch.setattr(foreach, "find_foreach_loops", _broken)
    from tracekit.cli import main

    with pytest.raises(ValueError, match="iterable argument is empty"):
        main(["analyze", str(LOOP)])
