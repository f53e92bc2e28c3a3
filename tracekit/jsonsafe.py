"""JSON-safe values: numpy scalars to Python, NaN/inf/pd.NA to None (the one cleaner for to_dict)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd


def plain(value: Any) -> Any:
    """`value` with numpy scalars made Python numbers and NaN/inf/NA made None; dicts, lists and
    tuples are cleaned item by item (tuples become lists)."""
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


def records(table: pd.DataFrame) -> list[dict[str, Any]]:
    """A table's rows as JSON-safe dicts, column name -> value."""
    return [{k: plain(v) for k, v in row.items()} for row in table.to_dict("records")]
