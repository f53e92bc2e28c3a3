"""One unit per screen: every number the text or the report labels "per step" is the JSON's per-step value.

The JSON's `per_step` is checked against numbers derived by hand on a synthetic trace; then, on three
sample traces, every "per step" line of `tracekit analyze` and every "per step" tile of the report is
read back and compared with the JSON of the same trace.
"""

from __future__ import annotations

import html as htmllib
import json
import re
from pathlib import Path

import pytest
from tracebuilder import TraceBuilder

from tracekit.cli import main
from tracekit.pipeline.reports import write_report
from tracekit.units import fmt_time

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ("gpt2_decode.trace.json.gz", "train_sync.trace.json.gz", "ddp_balanced")
NUM = r"([\d,.]+(?: [µm]?s)?)"  # a shown number: '779 µs', '3.29 ms', '341', '317.9'

# (pattern over one text line, the per_step key of each group): every "per step" of the numbers block
TEXT_PATTERNS = (
    (rf"^GPU +busy {NUM} of {NUM} per step \([\d.]+%\), idle {NUM} per step$", ("gpu_busy_us", "span_us", "gpu_idle_us")),
    (rf"^CPU +{NUM} launch(?:es)? per step, {NUM} in launch calls per step; {NUM} syncs?, {NUM} per step$",
     ("launches", "cpu_launch_us", "syncs", "sync_us")),
    (rf"^kernels +{NUM} per step \(.*\), {NUM} per step shorter than their launch call$", ("kernels", "short_kernels")),
    (rf"^idle +{NUM} per step with no GPU activity on any stream: waiting for launches {NUM}, ", ("gpu_idle_us", "launch_gap_us")),
)
# report tiles labelled per step -> per_step key
TILE_KEYS = {"GPU busy per step": "gpu_busy_us", "CPU launch time per step": "cpu_launch_us",
             "GPU idle per step": "gpu_idle_us", "Kernels per step": "kernels"}
TILE = re.compile(r'<dt>([^<]+)</dt>\s*<dd class="tile-v[^"]*"[^>]*>([^<]+)</dd>')


def shown(key: str, value: float) -> str:
    """How the text and report write a per-step value: a time, or a count (integer when whole)."""
    if key.endswith("_us"):
        return fmt_time(value)
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"


def _json(path: str, capsys) -> dict:
    assert main(["analyze", path, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_per_step_json_by_hand(tmp_path, capsys):
    # 4 steps of 100 µs from t=0; each: one op launching one 10 µs kernel and one 4 µs kernel (launch
    # calls of 5 µs and 3 µs). By hand, per step: span 100, busy 14, idle 86, CPU launch 8, 2 launches,
    # 2 kernels.
    b = TraceBuilder()
    for s in range(4):
        t = 100.0 * s
        b.annotation(f"ProfilerStep#{s}", t, 100.0)
        ext = b.op("aten::mm", t + 2, 20)
        b.launch(t + 3, 5, "gemm_kernel", t + 30, 10.0, ext=ext)
        b.launch(t + 10, 3, "add_kernel", t + 50, 4.0, ext=ext)
    doc = _json(str(b.write(tmp_path / "t.json")), capsys)
    per, steps = doc["per_step"], doc["summary"]["steps"]
    assert steps in (3, 4)  # the steady steps the analysis keeps (a first step may count as warm-up)
    assert per["span_us"] == pytest.approx(100.0) and per["gpu_busy_us"] == pytest.approx(14.0)
    assert per["gpu_idle_us"] == pytest.approx(86.0) and per["cpu_launch_us"] == pytest.approx(8.0)
    assert (per["launches"], per["kernels"]) == (2.0, 2.0)
    # and it is the summary's totals over its steps
    assert per["gpu_busy_us"] == pytest.approx(doc["summary"]["gpu_busy_us"] / steps)


def _sample(name: str) -> str:
    path = ROOT / "sample_traces" / name
    if not path.exists():
        pytest.skip(f"sample_traces/{name} is not in this checkout")
    return str(path)


@pytest.mark.parametrize("name", SAMPLES)
def test_text_per_step_numbers_equal_json(name, capsys):
    path = _sample(name)
    per = _json(path, capsys)["per_step"]
    assert main(["analyze", path]) == 0
    text = capsys.readouterr().out
    block = [line for line in text.splitlines() if re.match(r"^(GPU|CPU|kernels|idle) ", line)]
    assert len(block) == len(TEXT_PATTERNS)
    checked = 0
    for line in block:
        assert "per step" in line, line  # each line of the numbers block says its unit
        for pattern, keys in TEXT_PATTERNS:
            m = re.match(pattern, line)
            if m:
                assert [g for g in m.groups()] == [shown(k, per[k]) for k in keys], line
                checked += len(keys)
                break
        else:
            pytest.fail(f"no pattern reads: {line}")
    assert checked == 11
    # the tables of totals say so
    assert re.search(r"time by class \(total over the \d+ steady steps\)", text)
    assert re.search(r"top kernel rows .*totals over the \d+ steady steps", text)


@pytest.mark.parametrize("name", SAMPLES)
def test_report_per_step_tiles_equal_json(name, tmp_path, capsys):
    path = _sample(name)
    doc = _json(path, capsys)
    html = write_report(path, tmp_path / "r.html", jobs=1).read_text(encoding="utf-8")
    tiles = [(htmllib.unescape(label), htmllib.unescape(value)) for label, value in TILE.findall(html)]
    if "ranks" in doc and len(doc["ranks"]) > 1:
        return _per_rank_tiles(path, tiles, capsys)
    per = doc["per_step"]
    labelled = [(label, value) for label, value in tiles if "per step" in label.lower()]
    assert {label for label, _ in labelled} == set(TILE_KEYS)
    for label, value in labelled:
        assert value == shown(TILE_KEYS[label], per[TILE_KEYS[label]]), label
    return None


def _per_rank_tiles(path: str, tiles: list[tuple[str, str]], capsys) -> None:
    """A multi-rank report shows each rank's tiles: compare them with each rank's own JSON."""
    ranks = sorted({int(r["rank"]) for r in _json(path, capsys)["ranks"]})
    per_rank = [_json_rank(path, r, capsys) for r in ranks]
    labelled = [(label, value) for label, value in tiles if "per step" in label.lower()]
    assert len(labelled) == len(TILE_KEYS) * len(ranks)
    for i, (label, value) in enumerate(labelled):
        per = per_rank[i // len(TILE_KEYS)]
        assert value == shown(TILE_KEYS[label], per[TILE_KEYS[label]]), (i, label)


def _json_rank(path: str, rank: int, capsys) -> dict:
    assert main(["analyze", path, "--json", "--rank", str(rank)]) == 0
    return json.loads(capsys.readouterr().out)["per_step"]
