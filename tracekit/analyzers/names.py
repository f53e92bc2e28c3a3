"""Pattern tests over name columns, evaluated once per distinct name (traces repeat names a lot)."""

from __future__ import annotations

import re
import weakref
from collections.abc import Sequence

import numpy as np
import pandas as pd

NAME_CAP = 1024  # a pattern never sees more of a name than this (names are untrusted input)
# codes and distinct values of the name arrays seen, by the array holding them: the analyzers test the
# same columns against many patterns; an entry goes when its array does
_FACTORIZED: dict[tuple, tuple[weakref.ref, np.ndarray, np.ndarray]] = {}


def _factorize(names: pd.Series | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """pd.factorize of the names (None and NaN kept as values), once per array while it lives."""
    arr = np.asarray(names, dtype=object)
    owner = arr
    while isinstance(owner.base, np.ndarray):
        owner = owner.base
    key = (id(owner), arr.__array_interface__["data"][0], arr.shape, arr.strides)
    hit = _FACTORIZED.get(key)
    if hit is not None and hit[0]() is owner:
        codes, uniques = hit[1], hit[2]
        probes = (0, len(arr) // 2, len(arr) - 1) if len(arr) else ()
        if all(uniques[codes[i]] is arr[i] or uniques[codes[i]] == arr[i] for i in probes):  # not rewritten since
            return codes, uniques
    codes, uniques = pd.factorize(arr, use_na_sentinel=False)
    def forget(_: object) -> None:
        _FACTORIZED.pop(key, None)

    try:
        ref = weakref.ref(owner, forget)
    except TypeError:  # not weak-referenceable: not kept
        return codes, uniques
    _FACTORIZED[key] = (ref, codes, uniques)
    return codes, uniques


def matches(names: pd.Series | np.ndarray, pattern: re.Pattern[str]) -> np.ndarray:
    """Bool per row: `pattern.search` finds something in the row's name."""
    if not len(names):
        return np.zeros(0, dtype=bool)
    codes, uniques = _factorize(names)
    hits = np.fromiter((bool(pattern.search(str(u)[:NAME_CAP])) for u in uniques), dtype=bool,
                       count=len(uniques))
    return hits[codes]


def labels(names: pd.Series | np.ndarray, table: Sequence[tuple[re.Pattern[str], str]]) -> np.ndarray:
    """Per row: the label of the first (pattern, label) whose pattern matches the name, else ''."""
    if not len(names):
        return np.empty(0, dtype=object)
    codes, uniques = _factorize(names)
    out = np.full(len(uniques), "", dtype=object)
    for i, u in enumerate(uniques.tolist()):
        text = str(u)[:NAME_CAP]
        out[i] = next((label for pattern, label in table if pattern.search(text)), "")
    return out[codes]
