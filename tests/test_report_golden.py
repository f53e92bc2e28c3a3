"""The whole report HTML of two sample traces against gold files (tests/golden/), volatile parts
scrubbed: a change to the page shows up here as a diff to review, not as a silently different report.

The gold files are tracekit's own output, reviewed when written: they guard against unintended
changes, they do not prove the numbers (the view and analyzer tests do). After an intended change,
regenerate them with `TRACEKIT_UPDATE_GOLDEN=1 python -m pytest tests/test_report_golden.py` and
review the diff before committing."""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path

import pytest
from conftest import SAMPLE_TRACES

import tracekit
from tracekit._version import __version__
from tracekit.analyzers.analysis import analyze
from tracekit.pipeline.reports import render_html
from tracekit.suggestions import suggest

GOLDEN = Path(__file__).resolve().parent / "golden"
# a small GPU-bound trace and a host-bound one with an excluded set-up step and a suggestion
SAMPLES = ("linear_bf16", "train_sync")


def scrub(html: str, source: str) -> str:
    """The page without what changes between machines and versions: version and source path."""
    html = html.replace(f"tracekit {__version__}", "tracekit VERSION")
    html = html.replace(source, "SOURCE")
    # the inlined stylesheet and script are templates/report.css and report.js as they are (the
    # browser tests check them); only the page's content is compared, and the CSP hash follows the script
    html = re.sub(r"<style>.*?</style>", "<style>STYLE</style>", html, flags=re.S)
    html = re.sub(r"<script>.*?</script>", "<script>SCRIPT</script>", html, flags=re.S)
    html = re.sub(r"'sha256-[A-Za-z0-9+/=]+'", "'sha256-HASH'", html)
    return re.sub(r"[ \t]+\n", "\n", html)


@pytest.mark.parametrize("name", SAMPLES)
def test_report_matches_gold_file(name: str) -> None:
    path = SAMPLE_TRACES / f"{name}.trace.json.gz"
    if not path.exists():
        pytest.skip(f"sample_traces/{path.name} is not in this checkout")
    trace = tracekit.load_trace(path)
    analysis = analyze(trace)
    html = scrub(render_html(analysis, trace, suggestions=suggest(analysis)), str(trace.path))
    gold = GOLDEN / f"{name}.gold.html"
    if os.environ.get("TRACEKIT_UPDATE_GOLDEN"):
        gold.parent.mkdir(exist_ok=True)
        gold.write_text(html, encoding="utf-8")
    expected = gold.read_text(encoding="utf-8")
    if html != expected:
        diff = "".join(list(difflib.unified_diff(expected.splitlines(True), html.splitlines(True),
                                                 "gold", "now", n=1))[:60])
        pytest.fail(f"the report of {name} differs from {gold.name}:\n{diff}")
