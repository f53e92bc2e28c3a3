"""Open tracekit reports in headless Chromium and print their size and load time (issue 5: < 5 MB, < 2 s).

Usage: python benchmarks/report_browser.py TRACE [TRACE...] [--screenshot OUT.png]
Each TRACE (file or directory) is reported to a temporary HTML file, opened from file:// three times;
the median DOMContentLoaded / load times and the time of the report's own script are printed.
--screenshot saves the first screen (--width x 900, default 1440) of the first report, e.g. docs/report.png;
--timeline-screenshot the first report's timeline card, zoomed (a brush) on its first four steps.
Needs Debian's chromium and the playwright package (.ci/install-browser.sh).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

from tracekit.pipeline.reports import write_report

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
NAV = "(() => { const n = performance.getEntriesByType('navigation')[0]; return [n.domContentLoadedEventEnd, n.loadEventEnd]; })()"


def zoomed_timeline(page, out: Path) -> None:
    """Brush the timeline over its first four steps (the set-up step among them), then screenshot the card."""
    card = page.locator("section.rank:not([data-hidden]) [id$=-timeline]").first
    card.scroll_into_view_if_needed()
    node = card.locator("[data-chart=timeline]")
    steps = page.evaluate("JSON.parse(document.querySelector('[id$=-tl-data]').textContent).steps")
    svg = node.locator("svg")
    left, width = float(svg.get_attribute("data-left")), float(svg.get_attribute("data-width"))
    span = float(node.get_attribute("data-view").split(",")[1])
    box = svg.bounding_box()
    a, b = (steps[0]["start"], steps[3]["end"]) if len(steps) > 3 else (0.0, 0.25 * span)
    y = box["y"] + 30
    page.mouse.move(box["x"] + left + width * a / span, y)
    page.mouse.down()
    page.mouse.move(box["x"] + left + width * b / span, y, steps=6)
    page.mouse.up()
    card.screenshot(path=str(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--screenshot", type=Path)
    ap.add_argument("--timeline-screenshot", type=Path)
    ap.add_argument("--width", type=int, default=1440)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        for i, trace in enumerate(args.traces):
            t0 = time.perf_counter()
            html = write_report(trace, Path(tmp) / f"r{i}.html")
            build_s = time.perf_counter() - t0
            loads = []
            for _ in range(3):
                page = browser.new_page(viewport={"width": args.width, "height": 900})
                page.goto(html.resolve().as_uri())
                page.wait_for_load_state("load")
                dcl, load = page.evaluate(NAV)
                js = page.evaluate("window.tracekitReport.renderMs")
                loads.append((dcl, load, js))
                if i == 0 and args.screenshot and len(loads) == 1:
                    page.screenshot(path=str(args.screenshot))
                if i == 0 and args.timeline_screenshot and len(loads) == 1:
                    zoomed_timeline(page, args.timeline_screenshot)
                page.close()
            dcl, load, js = (statistics.median(x) for x in zip(*loads, strict=True))
            print(f"{trace}: html {html.stat().st_size / 1e6:.2f} MB, build {build_s:.2f} s, "
                  f"Chromium DOMContentLoaded {dcl:.0f} ms, load {load:.0f} ms, report script {js:.0f} ms")
        browser.close()


if __name__ == "__main__":
    main()
