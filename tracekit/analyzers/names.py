"""Pattern tests over name columns, evaluated once per distinct name (traces repeat names a lot)."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pandas as pd

NAME_CAP = 1024  # a pattern never sees more of a name than this (names are untrusted input)


def matches(names: pd.Series | np.ndarray, pattern: re.Pattern[str]) -> np.ndarray:
    """Bool per row: `pattern.search` finds something in the row's name."""
    if not len(names):
        return np.zeros(0, dtype=bool)
    codes, uniques = pd.factorize(np.asarray(names, dtype=object), use_na_sentinel=False)
    hits = np.fromiter((bool(pattern.search(str(u)[:NAME_CAP])) for u in uniques), dtype=bool,
                       count=len(uniques))
    return hits[codes]


def labels(names: pd.Series | np.ndarray, table: Sequence[tuple[re.Pattern[str], str]]) -> np.ndarray:
    """Per row: the label of the first (pattern, label) whose pattern matches the name, else ''."""
    if not len(names):
        return np.empty(0, dtype=object)
    codes, uniques = pd.factorize(np.asarray(names, dtype=object), use_na_sentinel=False)
    out = np.full(len(uniques), "", dtype=object)
    for i, u in enumerate(uniques.tolist()):
        text = str(u)[:NAME_CAP]
        out[i] = next((label for pattern, label in table if pattern.search(text)), "")
    return out[codes]
