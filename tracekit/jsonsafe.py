"""JSON-safe values: numpy scalars to Python, NaN/inf/pd.NA to None (the one cleaner for to_dict)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

_ATOMS = (str, int, bool, type(None))  # already JSON-safe as they are (exact types: no subclasses)


def plain(value: object) -> Any:
    """`value` with numpy scalars made Python numbers and NaN/inf/NA made None; dicts, lists and
    tuples are cleaned item by item (tuples become lists)."""
    if type(value) is float:
        return value if math.isfinite(value) else None
    if type(value) in _ATOMS:
        return value
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is pd.NA or value is pd.NaT:
        return None
    return value


def records(table: pd.DataFrame,
            text: Mapping[str, Callable[[Any], Any]] | None = None) -> list[dict[str, Any]]:
    """A table's rows as JSON-safe dicts, column name -> value; `text` maps a column to the
    function that writes its values for JSON (e.g. shapes tuples -> their text)."""
    columns = list(table.columns)
    return [plain_row(dict(zip(columns, row, strict=True)), text)
            for row in table.to_numpy(dtype=object).tolist()]


def plain_row(row: Mapping[str, Any],
              text: Mapping[str, Callable[[Any], Any]] | None = None) -> dict[str, Any]:
    """One row (mapping) made JSON-safe, with the `text` converters of records() applied."""
    text = text or {}
    return {k: plain(text[k](v) if k in text else v) for k, v in row.items()}


def indented_parts(doc: object, *, allow_nan: bool = False) -> list[str]:
    """The text of json.dumps(doc, indent=2, allow_nan=allow_nan) as a few large pieces, in order:
    json.dumps with indent joins one list of every token (~10x the text's size in string objects);
    here they are joined every few thousand. Raises (ValueError, TypeError) before any piece is
    returned, so that a caller prints all of it or nothing."""
    encoder = json.JSONEncoder(indent=2, allow_nan=allow_nan)
    parts: list[str] = []
    batch: list[str] = []
    for token in encoder.iterencode(doc):
        batch.append(token)
        if len(batch) >= 4096:
            parts.append("".join(batch))
            batch.clear()
    parts.append("".join(batch))
    return parts
