"""Every table fits its card at 1280 and 1920 px, in every report of the sample traces and two diff pages.

Pages: the report of each top-level sample trace (sample_traces/*.trace.json.gz; graph traces among
them), the multi-rank sample_traces/ddp_balanced, a profile_memory trace (memory card), a launch-bound
one from ../shared/traces where present (the larger_batch suggestion) and two `tracekit diff --html` pages. Every <details>
is opened and every rank section shown before measuring, so that tables hidden at first count too.
Needs chromium and playwright like tests/test_browser.py (same fixture).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_browser import browser  # noqa: F401  (a fixture)

from tracekit.pipeline.compare import compare_files
from tracekit.pipeline.reports import write_report
from tracekit.report.diff_view import write_diff_html

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces"
WIDTHS = (1280, 1920)
DIFFS = {"diff-graph": ("gpt2_decode.trace.json.gz", "gpt2_decode_graph.trace.json.gz"),
         "diff-sync": ("train_sync.trace.json.gz", "train_sync_fixed.trace.json.gz")}
REPORTS = [*sorted(p.name for p in SAMPLES.glob("*.trace.json.gz")), "ddp_balanced"]
# a profile_memory trace (the memory card) with Python stacks off (the operator card's op grouping)
# and, where ../shared/traces is present, a launch-bound profile_memory trace (the larger_batch suggestion)
EXTRA = {"memory-b256": ROOT / "tests" / "data" / "memory" / "train_memory_b256.trace.json.gz",
         "larger-batch-mi300": ROOT.parent / "shared" / "traces" / "tracelens" / "mi300_gaunernst_bert-small-uncased__1016001.json.gz"}

# [table's first header, table width, card content width] of each table wider than its card (1 px slack:
# sub-pixel rounding); the card is the nearest .card, else the page's <main>
TOO_WIDE = """() => [...document.querySelectorAll('table')].map(t => {
  const card = t.closest('.card') || t.closest('main');
  const cs = getComputedStyle(card);
  const inner = card.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
  const head = t.querySelector('th');
  return [head ? head.textContent.trim() : '', Math.round(t.getBoundingClientRect().width), Math.round(inner)];
}).filter(x => x[1] > x[2] + 1)"""


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, Path]:
    """Every page, rendered once (label -> HTML file)."""
    out = tmp_path_factory.mktemp("tables")
    found: dict[str, Path] = {}
    for name in REPORTS:
        if (SAMPLES / name).exists():
            found[name] = write_report(SAMPLES / name, out / f"{name}.html", jobs=1)
    for label, path in EXTRA.items():
        if path.exists():
            found[label] = write_report(path, out / f"{label}.html", jobs=1)
    for label, (before, after) in DIFFS.items():
        if (SAMPLES / before).exists() and (SAMPLES / after).exists():
            d = compare_files(SAMPLES / before, SAMPLES / after)
            found[label] = write_diff_html(d, out / f"{label}.html")
    return found


def _check(browser, html: Path) -> dict[int, list]:  # noqa: F811
    page = browser.new_page(viewport={"width": WIDTHS[0], "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(html.resolve().as_uri())
        page.wait_for_load_state("load")
        page.eval_on_selector_all("details", "ds => ds.forEach(d => d.open = true)")
        page.eval_on_selector_all("section.rank", "ss => ss.forEach(s => s.removeAttribute('data-hidden'))")
        found = {}
        for w in WIDTHS:
            page.set_viewport_size({"width": w, "height": 900})
            page.evaluate("window.dispatchEvent(new Event('resize'))")
            found[w] = page.evaluate(TOO_WIDE)
            assert page.evaluate("document.documentElement.scrollWidth") <= w
        assert errors == []
        return found
    finally:
        page.close()


@pytest.mark.parametrize("label", [*REPORTS, *EXTRA, *DIFFS])
def test_every_table_fits_its_card(browser, pages, label):  # noqa: F811
    if label not in pages:
        pytest.skip(f"{label}: its sample trace is not in this checkout")
    html = pages[label]
    if "cpu_" not in label:  # a CPU-only trace has no kernel, step or launch table
        assert html.read_text(encoding="utf-8").count("<table") >= 2
    too_wide = _check(browser, html)
    assert too_wide == {w: [] for w in WIDTHS}, too_wide
