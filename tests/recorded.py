"""The recorded sample traces the held-out tests read: a recording by set and name (skipped when absent), its raw events, its ProfilerStep windows, its bare steps, and the two checks every held-out set makes (the labelled fix first with a measured saving; the projection against the bare step)."""

from __future__ import annotations

import gzip
import json
import statistics
from collections.abc import Callable
from pathlib import Path

import pytest
from shared_analysis import analysed_file

from tracekit.pipeline.local import LocalResult

SAMPLE_TRACES = Path(__file__).resolve().parents[1] / "sample_traces"


def recording(folder: str, name: str) -> Path:
    """sample_traces/FOLDER/NAME.trace.json.gz, or skip the test when this checkout does not have it."""
    path = SAMPLE_TRACES / folder / f"{name}.trace.json.gz"
    if not path.exists():
        pytest.skip(f"sample_traces/{folder} is not in this checkout")
    return path


def analysed(path: Path) -> LocalResult:
    """analyse_file(path), once per test run (tests/shared_analysis.py): a set's checks read the same
    recordings' results again (the projection of every recording, the first suggestion of each pair),
    and test_invariants reads them too."""
    return analysed_file(path)


def raw_events(path: Path) -> list[dict]:
    """The trace's traceEvents, as json.load reads them."""
    with gzip.open(path) as f:
        return json.load(f)["traceEvents"]


def profiler_steps(events: list[dict]) -> list[tuple[float, float]]:
    """(start, end) of each ProfilerStep#N annotation, in time order."""
    return sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("ph") == "X"
                  and e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("ProfilerStep#"))


def bare_ms(path: Path) -> float:
    """Median of the unprofiled step times `tracekit profile` stored in the trace (raw JSON)."""
    with gzip.open(path) as f:
        steps = json.load(f)["tracekit"]["bare"]["step_us"]
    return statistics.median(steps.values()) / 1000


def check_first_and_within(folder: str, before: str, after: str, rule: str) -> None:
    """The labelled rule is first on the baseline, its what-if within ±35 % of the saving the two
    recordings' bare steps measured, and it is silent on the fixed variant."""
    before_path, after_path = recording(folder, before), recording(folder, after)
    saving = bare_ms(before_path) - bare_ms(after_path)
    found = analysed(before_path)
    assert found.suggestions[0].id == rule
    assert found.suggestions[0].per_step_us / 1000 == pytest.approx(saving, rel=0.35)
    assert rule not in {s.id for s in analysed(after_path).suggestions}


def check_projection(folder: str, name: str) -> None:
    """The recording's projected unprofiled step within ±15 % of the median of its own bare steps."""
    path = recording(folder, name)
    u = analysed(path).analysis.unprofiled
    assert u is not None and u.trusted
    assert u.step_us / 1000 == pytest.approx(bare_ms(path), rel=0.15)


def pairs_of(folder: str) -> dict[str, tuple[str, str]]:
    """sample_traces/FOLDER/pairs.txt as {before: (after, the labelled rule)} ({} without the file)."""
    path = SAMPLE_TRACES / folder / "pairs.txt"
    lines = path.read_text().splitlines() if path.exists() else []
    rows = [line.split() for line in lines if line.strip() and not line.startswith("#")]
    return {before: (after, rule) for before, after, rule in rows}


def set_tests(folder: str, first_and_within: list[str],
              projection_missed: tuple[str, ...] = ()) -> tuple[Callable[[str], None], Callable[[str], None]]:
    """The two checks every held-out set makes, as pytest tests over its pairs.txt: the labelled fix
    first with a measured saving on `first_and_within`, and every recording's projection but those whose
    miss the set's docs/validation.md section reports (`projection_missed`)."""
    pairs = pairs_of(folder)

    @pytest.mark.parametrize("before", first_and_within)
    def first_and_within_test(before: str) -> None:
        """The labelled rule first on the baseline, within ±35 % of the bare saving, silent after."""
        check_first_and_within(folder, before, *pairs[before])

    @pytest.mark.parametrize("name", [n for before, (after, _) in pairs.items() for n in (before, after)
                                      if n not in projection_missed])
    def projection_test(name: str) -> None:
        """Every recording's projected unprofiled step against the median of its own bare steps."""
        check_projection(folder, name)

    return first_and_within_test, projection_test
