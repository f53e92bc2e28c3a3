"""The rule tables: every row is complete (snippet, diff target, --try knobs, what it reads), and a row's
snippet is what its fired suggestions show."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from pathlib import Path

import pytest

from tracekit import pipeline
from tracekit.analyzers import analyze, step_parts
from tracekit.analyzers.analysis import Analysis, RankAnalysis
from tracekit.analyzers.ranks import CrossRank
from tracekit.compare import diff as compare_diff
from tracekit.profile.knobs import KNOBS
from tracekit.suggestions import rules
from tracekit.suggestions.rules import CROSS_RANK_RULES, RULES, Rule
from tracekit.trace.load import load_trace

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def _field_type(owner: type, name: str) -> type | None:
    """The class of dataclass field `name` of `owner` (None | X unwrapped); None when there is no such field."""
    if name not in {f.name for f in dataclasses.fields(owner)}:
        return None
    hint = typing.get_type_hints(owner)[name]
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    return typing.get_origin(hint) or hint


def unknown_reads(reads: tuple[str, ...], owners: tuple[type, ...]) -> list[str]:
    """The names in `reads` that are no field of any of `owners` ("a.b": field b of field a's class)."""
    bad = []
    for name in reads:
        first, _, rest = name.partition(".")
        kinds = [k for k in (_field_type(o, first) for o in owners) if k is not None]
        if not kinds or (rest and not any(dataclasses.is_dataclass(k) and _field_type(k, rest) is not None
                                          for k in kinds)):
            bad.append(name)
    return bad


def test_ids_are_unique_across_both_tables():
    ids = [r.id for r in RULES] + [r.id for r in CROSS_RANK_RULES]
    assert len(ids) == len(set(ids))
    assert {r.id: r for r in RULES} == rules.RULES_BY_ID


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_every_rule_row_is_complete(rule: Rule):
    assert rule.snippet.strip() and rule.snippet.endswith("\n")
    assert rule.target.label and callable(rule.target.measure)
    assert rule.reads and unknown_reads(rule.reads, (Analysis, RankAnalysis)) == []
    assert all(k in KNOBS for k in rule.knobs)


def test_every_cross_rank_row_is_complete():
    for rule in CROSS_RANK_RULES:
        assert rule.snippet.strip()
        assert rule.reads and unknown_reads(rule.reads, (CrossRank,)) == []


def test_the_reads_check_catches_a_misspelled_field():
    assert unknown_reads(("patterns.loops", "launch", "graphs"), (Analysis, RankAnalysis)) == []
    assert unknown_reads(("patterns.loop", "lunch", "totals.nope", "device.x"), (Analysis, RankAnalysis)) \
        == ["patterns.loop", "lunch", "totals.nope", "device.x"]


def test_knobs_answer_the_rules_they_answered_before():
    answered = {k: [r.id for r in rules.knob_rules(k)] for k in KNOBS}
    assert answered == {"tf32": ["lower_precision"], "bf16": ["lower_precision"],
                        "dataloader": ["dataloader_workers", "pinned_memory"], "cudnn_benchmark": [],
                        "compile": ["fuse_elementwise"], "cudagraphs": ["cuda_graphs"]}


def test_diff_targets_come_from_the_rows():
    assert compare_diff.target("avoid_sync") is rules.RULES_BY_ID["avoid_sync"].target
    assert compare_diff.target("rank_imbalance") is step_parts.WHOLE_STEP  # no row: the whole step
    assert step_parts.WHOLE_STEP.label == "the step span"


@pytest.fixture(scope="module")
def train_sync() -> Analysis:
    return analyze(load_trace(SAMPLES / "train_sync.trace.json.gz"))


def test_targets_measure_the_step(train_sync: Analysis):
    sel = step_parts.steady(train_sync)
    span = train_sync.totals.span_us / train_sync.totals.steps
    for rule in RULES:
        value = rule.target.measure(train_sync, sel)
        assert isinstance(value, float) and math.isfinite(value) and 0.0 <= value <= span * 1.0001, rule.id
    sync_wait = train_sync.totals.sync_wait_us / train_sync.totals.steps
    assert rules.RULES_BY_ID["avoid_sync"].target.measure(train_sync, sel) == pytest.approx(sync_wait)
    assert step_parts.WHOLE_STEP.measure(train_sync, sel) == pytest.approx(span)


def test_a_fired_suggestion_shows_its_rows_snippet(train_sync: Analysis):
    found = rules.suggest(train_sync)
    assert {"avoid_sync", "lower_precision", "pinned_memory"} <= {s.id for s in found}
    for s in found:
        assert s.snippet == rules.RULES_BY_ID[s.id].snippet != ""
    for rule in RULES:  # each row's check answers under the row's own id
        fired = rule.run(train_sync)
        assert fired is None or (fired.id, fired.snippet) == (rule.id, rule.snippet)
    check_only = rules.RULES_BY_ID["avoid_sync"].check(train_sync)
    assert check_only is not None and check_only.snippet == ""  # the row, not the check, gives it


def test_a_cross_rank_suggestion_shows_its_rows_snippet():
    result = pipeline.run(SAMPLES / "ddp_slow_rank1", jobs=1)
    assert [s.id for s in result.cross_suggestions] == ["rank_imbalance"]
    assert result.cross_suggestions[0].snippet == CROSS_RANK_RULES[0].snippet
    assert "num_workers=4" in CROSS_RANK_RULES[0].snippet
