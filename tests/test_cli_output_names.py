"""The lines naming what a command wrote (report, export, diff --html) show a file name's newline escaped."""

from __future__ import annotations

import re

import pytest
from tracebuilder import TraceBuilder

from tracekit.cli import main

NAME = "t\nforged: ok"


def _trace(folder):
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0.0, 100.0)
    ext = b.op("aten::mm", 10.0, 5.0)
    b.launch(11.0, 1.0, "ampere_sgemm_128x64_nn", 20.0, 30.0, ext=ext)
    return b.write(folder / f"{NAME}.json")


@pytest.mark.parametrize("command", ["report", "export", "diff"])
def test_written_and_exists_lines_escape_a_newline(tmp_path, capsys, command):
    trace = str(_trace(tmp_path))
    args = {"report": ["report", trace], "export": ["export", trace],
            "diff": ["diff", trace, trace, "--html", str(tmp_path / f"{NAME}.html")]}[command]
    for _ in range(2):  # the second run finds the first one's output: "exists; wrote ... instead"
        assert main(args) == 0
    got = capsys.readouterr()
    text = f"{got.out}\n{got.err}"
    assert not re.search(r"^forged", text, re.M), text[:400]
    assert "exists; wrote" in got.err
    written = [line for line in text.splitlines() if "wrote" in line or "written to" in line]
    assert len(written) >= 3 and all("t\\x0aforged: ok" in line for line in written), written
