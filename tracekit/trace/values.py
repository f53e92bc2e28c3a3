"""Event field values as the tables store them: ids, ints within int64, streams, grid/block sizes.

Everything in a trace is untrusted text: a value of the wrong type or out of range becomes the
column's "unknown" (-1, NaN, an object) instead of an error."""

from __future__ import annotations

import itertools
import math
import operator
import re
from collections.abc import Sequence
from typing import cast

import numpy as np

from tracekit.trace.args import Args

_DIGITS = re.compile(r"([0-9]{1,18})")
INT64_MAX = (1 << 63) - 1
NAN = math.nan


def _digits(value: str) -> bool:
    """An ASCII decimal that fits in int64 (str.isdigit also accepts '²' and 5000-digit strings)."""
    return 0 < len(value) <= 18 and value.isascii() and value.isdigit()


def norm_id(value: int | str | None) -> int | str | None:
    """pid/tid as int when the file wrote a number (some schemas write "1234"), else as given."""
    if isinstance(value, str) and _digits(value):
        return int(value)
    return value


def id_array(values: list[int | str | None]) -> np.ndarray:
    """pid/tid values: an int64 array when all are numbers (the common case), else objects."""
    if values and all_ints(values):
        try:
            return np.fromiter(values, dtype=np.int64, count=len(values))
        except OverflowError:
            pass
    values = [v if v.__class__ is int else norm_id(v) for v in values]
    try:
        return np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        return object_array(values)


def object_array(values: Sequence[object]) -> np.ndarray:
    """An object array holding `values` as they are (numpy would unpack lists and buffers)."""
    return np.fromiter(values, dtype=object, count=len(values))


def int_or(value: int | str | None, default: int = -1) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, str) and _digits(value):
        return int(value)
    return default


def in_int64(values: list[int], default: int = -1) -> list[int]:
    """`values` with every int outside int64 replaced by `default`."""
    return [v if -INT64_MAX <= v <= INT64_MAX else default for v in values]


def float_or_nan(value: float | None) -> float:
    return float(value) if value is not None else NAN


def stream_of(args: Args, tid: int | str | None) -> int:
    if args.stream is not None:
        if isinstance(args.stream, int):
            return args.stream
        try:
            return int(args.stream, 0)
        except ValueError:
            pass
    if isinstance(tid, int):
        return tid
    match = _DIGITS.search(str(tid))
    return int(match.group(1)) if match else -1


_NO_DIM3 = (-1, -1, -1)


def _dim3(value: list[int] | str | None) -> Sequence[int]:
    """A grid/block [x, y, z] as a 3-tuple of ints, or (-1, -1, -1)."""
    if value.__class__ is list and len(value) == 3 and all(v.__class__ is int for v in value):
        return value
    return _NO_DIM3


def dim3_columns(values: list[list[int] | str | None]) -> np.ndarray:
    """(n, 3) int64 array of grid or block sizes."""
    if not values:
        return np.zeros((0, 3), dtype=np.int64)
    is_list = np.fromiter(map(operator.is_, map(type, values), itertools.repeat(list)), dtype=bool,
                          count=len(values))
    lists = list(itertools.compress(values, is_list))
    if set(map(type, itertools.chain.from_iterable(cast("list[list[int]]", lists)))) <= {int}:
        # the common case: the lists of three ints become one array (checked by its shape); every
        # other value (None on memcpy/memset, a string) is unknown
        try:
            fast = np.array(lists, dtype=np.int64)
        except (ValueError, TypeError, OverflowError):
            fast = None
        if fast is not None and fast.shape == (len(lists), 3):
            out = np.full((len(values), 3), -1, dtype=np.int64)
            out[is_list] = fast
            return out
    dims = [_dim3(v) for v in values]
    try:
        return np.array(dims, dtype=np.int64).reshape(-1, 3)
    except OverflowError:  # a size past int64: that event's sizes are unknown
        dims = [d if all(0 <= x <= INT64_MAX for x in d) else _NO_DIM3 for d in dims]
        return np.array(dims, dtype=np.int64).reshape(-1, 3)


def ints_or_none(values: list) -> np.ndarray | None:
    """Values typed `int | None` by the decoder (never str or bool) as int64 with None as -1, as
    `int_or` gives them; None when one is past int64 (the caller's slow path decides)."""
    try:
        return np.fromiter(values, dtype=np.int64, count=len(values))
    except TypeError:  # a None: numpy would parse a str, which is why this is for int | None only
        values = [-1 if v is None else v for v in values]
    except OverflowError:
        return None
    try:
        return np.fromiter(values, dtype=np.int64, count=len(values))
    except OverflowError:
        return None


def all_ints(values: list) -> bool:
    """Whether every value is exactly an int (not a bool, str or None)."""
    return set(map(type, values)) == {int}


def durations(values: list) -> np.ndarray:
    """Decoded durations (float >= 0 or None) as float64, `dur or 0.0` of each (None and -0.0 -> 0.0)."""
    dur = np.fromiter(values, dtype=np.float64, count=len(values))  # None -> NaN
    return np.where(dur > 0, dur, 0.0)


def byte_count(value: object) -> float:
    """A byte count of a [memory] event as float (ints and digit strings), NaN otherwise."""
    if isinstance(value, bool):
        return NAN
    if isinstance(value, (int, float)):
        return float(value) if abs(value) < 1e18 else NAN
    if isinstance(value, str) and value.lstrip("-").isdigit() and len(value) < 19:
        return float(value)
    return NAN
