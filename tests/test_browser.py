"""The report in headless Chromium from file://: no errors, no network, charts drawn, sorting and filtering work.

Needs Debian's chromium (/usr/bin/chromium; .ci/install-browser.sh) and the `playwright` Python package
(never `playwright install`: it downloads a browser). Skipped when either is missing, except under CI=true.
Screenshots go to tests/artifacts/ (git-ignored).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from tracebuilder import TraceBuilder

from tracekit.pipeline.reports import write_report

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "tests" / "artifacts"
SHARED = ROOT / ".." / "shared" / "traces"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
LOAD_BUDGET_MS = 2000  # issue 5: the GPT-2 decode report renders in under 2 s


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def browser():
    exe = _chromium()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    if exe is None or sync_playwright is None:
        missing = "chromium" if exe is None else "the playwright package"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{missing} is not installed (run .ci/install-browser.sh; pip install playwright)")
        pytest.skip(f"{missing} is not installed")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
        yield b
        b.close()


def decode_like_trace(tmp_path: Path, steps: int = 6, layers: int = 12) -> Path:
    """A decode-loop-shaped trace: per step and layer a GEMM, an add and a layer norm, tiny and launch-bound."""
    b = TraceBuilder()
    t = 0.0
    for s in range(steps):
        b.annotation(f"ProfilerStep#{s}", t, 60.0 * layers)
        for layer in range(layers):
            ext = b.op("aten::addmm", t + 1, 25, **{"Input Dims": [[2304], [1, 768], [768, 2304]],
                                                   "Input type": ["c10::BFloat16"] * 3})
            b.launch(t + 3, 6, "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT", t + 12, 6.5, ext=ext)
            ext = b.op("aten::add", t + 28, 12, **{"Input Dims": [[1, 1, 768], [1, 1, 768]],
                                                  "Input type": ["c10::BFloat16"] * 2})
            b.launch(t + 30, 5, "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16> >(int)", t + 38, 2.0, ext=ext)
            ext = b.op("aten::native_layer_norm", t + 42, 14, **{"Input Dims": [[1, 1, 768], [768], [768]],
                                                                "Input type": ["c10::BFloat16"] * 3})
            b.launch(t + 44, 5, "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int)", t + 52, 3.0, ext=ext, stream=7 + layer % 2)
            t += 60.0
    return b.write(tmp_path / "decode_like.json")


def report_source(tmp_path: Path) -> tuple[str, Path]:
    """(label, trace) for the browser test: the recorded GPT-2 decode sample when present, else a synthetic one."""
    sample = ROOT / "sample_traces" / "gpt2_decode.trace.json.gz"
    if sample.exists():
        return "gpt2-decode", sample
    return "decode-like", decode_like_trace(tmp_path)


def open_report(browser, html: Path):
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    errors, requests = [], []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(html.resolve().as_uri())
    page.wait_for_load_state("load")
    return page, errors, requests


def column_values(page, table: str, index: int) -> list[float]:
    return page.eval_on_selector_all(
        f"{table} tbody tr:not([hidden])",
        f"rows => rows.map(r => parseFloat(r.cells[{index}].getAttribute('data-v')))",
    )


def test_report_in_chromium(browser, tmp_path):
    label, trace = report_source(tmp_path)
    html = write_report(trace, tmp_path / f"{label}.html")
    page, errors, requests = open_report(browser, html)
    try:
        assert errors == []
        assert requests == [html.resolve().as_uri()]  # the file itself, nothing else
        load_ms = page.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd")
        assert load_ms < LOAD_BUDGET_MS, f"report took {load_ms:.0f} ms to load"
        # the roofline chart: an SVG with the roofs and one circle per kernel row with known FLOPs/bytes
        assert page.locator("section.rank:not([data-hidden]) [data-chart=roofline] svg line.roof").count() >= 1
        assert page.locator("[data-chart=roofline] svg circle.pt").count() >= 1
        assert page.locator("[data-chart=timeline] svg rect").count() > 3
        # the kernel table, sorted by time descending to start with
        table = "section.rank:not([data-hidden]) table.kernels"
        n_rows = page.locator(f"{table} tbody tr").count()
        assert n_rows >= 3
        heads = page.eval_on_selector_all(f"{table} thead th", "hs => hs.map(h => h.dataset.key)")
        t_col, calls_col = heads.index("time_us"), heads.index("count")
        times = column_values(page, table, t_col)
        assert times == sorted(times, reverse=True)
        # clicking a header sorts by that column (numbers: largest first), clicking again reverses
        page.click(f"{table} thead th[data-key=count]")
        calls = column_values(page, table, calls_col)
        assert calls == sorted(calls, reverse=True)
        assert page.get_attribute(f"{table} thead th[data-key=count]", "aria-sort") == "descending"
        page.click(f"{table} thead th[data-key=count]")
        assert column_values(page, table, calls_col) == sorted(calls)
        # filtering hides rows that do not match
        page.fill("section.rank:not([data-hidden]) .k-filter", "layer_norm")
        shown = page.locator(f"{table} tbody tr:not([hidden])").count()
        assert 1 <= shown < n_rows
        page.fill("section.rank:not([data-hidden]) .k-filter", "")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"report-{label}.png"), full_page=True)
        page.screenshot(path=str(ARTIFACTS / f"report-{label}-first-screen.png"))
        assert errors == []
    finally:
        page.close()


def test_rank_selector_in_chromium(browser, tmp_path):
    path = SHARED / "hta" / "trace_filter"
    if not path.is_dir():
        pytest.skip("../shared/traces is absent")
    html = write_report(path, tmp_path / "ranks.html")
    page, errors, requests = open_report(browser, html)
    try:
        assert errors == [] and requests == [html.resolve().as_uri()]
        assert page.is_visible("#r0") and not page.is_visible("#r1")
        page.click(".rank-btn[data-rank=r1]")
        assert page.is_visible("#r1") and not page.is_visible("#r0")
        assert page.locator("#r1 [data-chart=timeline] svg").count() == 1  # drawn when shown
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "report-two-ranks.png"))
        assert errors == []
    finally:
        page.close()
