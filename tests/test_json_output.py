"""`--json` output (analyze, diff, info) is json.dumps(doc, indent=2)'s text, printed in a few large
pieces once all of it is encoded: the same bytes, and nothing printed when encoding fails."""

from __future__ import annotations

import json
import math

import pytest

from tracekit.cli.common import echo_json
from tracekit.jsonsafe import indented_parts

# nested containers, escapes, a non-ASCII name and enough items to span several 4096-token pieces
DOC = {"steps": [{"id": k, "name": f"k\u202e\x1b[{k}", "ms": k / 7, "shape": [k, [1, 2]], "none": None,
                  "ok": k % 2 == 0, "tags": {}} for k in range(3000)], "empty": [], "ünï": "\u00e9"}


def test_the_same_text_as_json_dumps_in_several_pieces() -> None:
    parts = indented_parts(DOC)
    assert len(parts) > 1  # 3000 items of ~40 tokens: more than one piece of 4096 tokens
    assert "".join(parts) == json.dumps(DOC, indent=2, allow_nan=False)


def test_echo_json_prints_that_text_and_a_newline(capsys: pytest.CaptureFixture) -> None:
    echo_json(DOC)
    assert capsys.readouterr().out == json.dumps(DOC, indent=2) + "\n"


def test_nothing_printed_when_a_value_cannot_be_encoded(capsys: pytest.CaptureFixture) -> None:
    doc = {"steps": DOC["steps"], "bad": math.nan}  # the NaN comes after ~100,000 tokens
    with pytest.raises(ValueError, match="Out of range float"):
        echo_json(doc)
    assert capsys.readouterr().out == ""
    echo_json(doc, allow_nan=True)  # info's counts: as json.dumps(..., indent=2) wrote them
    assert capsys.readouterr().out.endswith('"bad": NaN\n}\n')
