"""Exact event start times of a chunk, parsed from their JSON text in vectorised passes.

The decoder keeps each `ts` as its raw JSON text (reader.Event). A plain number (digits, at most
17 before the point and 9 after it) is split into integer part and fraction; its time after the
file's integer origin is then (whole - origin) * 10**digits + fraction, an integer, divided by
10**digits in float64: both exact below 2**53, so the quotient is the correctly rounded value, the
same float as `float(Decimal(ts) - origin)`. Any other number (negative, exponent, longer) and any
row past 2**53 goes through Decimal, as every row did before."""

from __future__ import annotations

import decimal
import itertools
import operator
from collections.abc import Sequence
from decimal import Decimal

import numpy as np

MAX_ABS_TS_US = 10**17  # |ts| beyond this (year ~5000 in epoch µs), NaN or infinite: malformed event
_QUIET = decimal.Context(traps=[])  # sNaN arithmetic gives NaN instead of raising
_EXACT = 1 << 53
_POW10 = np.array([float(10**k) for k in range(10)])
_PLAIN = np.zeros(256, dtype=bool)  # bytes of plain numbers, of `null` and of the separator
_PLAIN[list(b"0123456789. nul")] = True
_NOT_NUMBER = frozenset(b'"tf{[')  # first bytes of JSON values that are not numbers (nor null)
_NULL = ord("n")


class NotANumber(ValueError):
    """A ts that is not a JSON number or null: the old typed decoder decides (reader)."""


class ChunkTimes:
    """The start times of one chunk's events: which have one, the origin they give, the relative µs."""

    def __init__(self, texts: Sequence[bytes]) -> None:
        """`texts`: each event's raw ts (bytes-like: b'null' when absent). Raises NotANumber."""
        self._texts = texts
        n = len(texts)
        self._exact: list[Decimal | None] | None = None
        joined = b" ".join(texts)
        buf = np.frombuffer(joined, dtype=np.uint8)
        seps = np.flatnonzero(buf == 32)
        if len(seps) != max(n - 1, 0):
            raise NotANumber  # a space inside a value: a string, list or object (numbers have none)
        starts = np.empty(n, dtype=np.int64)
        starts[:1] = 0
        starts[1:] = seps + 1
        first = buf[starts] if n else buf[:0]
        if n and not _NOT_NUMBER.isdisjoint(np.unique(first).tolist()):
            raise NotANumber
        self.has_ts = first != _NULL
        parsed = _parse(buf, seps, starts, self.has_ts) if _PLAIN[buf].all() else None
        if parsed is None:
            self._exact = [Decimal(bytes(t).decode()) if h else None for t, h in zip(texts, self.has_ts.tolist(), strict=True)]
        else:
            self._whole, self._frac, self._digits = parsed

    def origin_in(self, rows: np.ndarray) -> int | None:
        """int() of the first finite start time of `rows` within MAX_ABS_TS_US, else None."""
        if self._exact is None:
            valid = rows[self.has_ts[rows]]
            return int(self._whole[valid[0]]) if len(valid) else None
        exact = self._exact
        return next((int(t) for t in (exact[i] for i in rows.tolist())
                     if t is not None and t.is_finite() and abs(t) <= MAX_ABS_TS_US), None)

    def relative(self, rows: np.ndarray, origin: int) -> np.ndarray:
        """Start times of `rows` as float µs after `origin` (NaN where absent, NaN or inf where the
        file wrote NaN, Infinity or a number out of range)."""
        if self._exact is not None:
            return _decimal_relative([self._exact[i] for i in rows.tolist()], origin)
        digits = self._digits[rows]
        whole = self._whole[rows] - origin
        far = np.flatnonzero(np.abs(whole) * _POW10[digits] >= _EXACT / 2)  # (float: no int64 overflow)
        if len(far):
            whole[far] = 0
        ticks = whole * (10 ** digits) + self._frac[rows]  # exact: below 2**53 where not far
        out = ticks.astype(np.float64) / _POW10[digits]
        out[~self.has_ts[rows]] = np.nan
        if len(far):
            texts = self._texts
            out[far] = _decimal_relative([Decimal(bytes(texts[i]).decode()) for i in rows[far].tolist()], origin)
        return out


def _parse(buf: np.ndarray, seps: np.ndarray, starts: np.ndarray, has_ts: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(integer part, fraction, fraction digits) of each plain number (0 for null), or None when
    one is not of that form."""
    n = len(starts)
    ends = np.empty(n, dtype=np.int64)
    ends[:-1] = seps
    ends[-1:] = len(buf)
    dots = np.flatnonzero(buf == ord("."))
    token = np.searchsorted(seps, dots)  # the event each point belongs to
    dotted = np.zeros(n, dtype=bool)
    dotted[token] = True
    if len(dots) and (np.diff(token) == 0).any():
        return None
    digits = np.zeros(n, dtype=np.int64)
    digits[token] = ends[token] - dots - 1
    int_len = ends - starts
    int_len[token] = dots - starts[token]
    if (digits > 9).any() or (int_len[has_ts] > 17).any() or ((int_len < 1) & has_ts).any() or (dotted & (digits < 1)).any():
        return None
    text = buf.copy()
    text[dots] = 32
    nulls = starts[~has_ts]
    text[nulls] = ord("0")
    for k in (1, 2, 3):
        text[nulls + k] = 32
    values = np.fromstring(text.tobytes(), dtype=np.int64, sep=" ")
    if len(values) != n + len(dots):
        return None
    at = np.zeros(n, dtype=np.int64)
    np.cumsum(1 + dotted[:-1], out=at[1:])
    frac = np.zeros(n, dtype=np.int64)
    frac[token] = values[at[token] + 1]
    return values[at], frac, digits


def _decimal_relative(times: list[Decimal | None], origin: int) -> np.ndarray:
    """float(t - origin) of each Decimal (NaN for None), in a context where sNaN gives NaN."""
    base = Decimal(origin)
    nan = Decimal("NaN")
    with decimal.localcontext(_QUIET):
        diffs = map(operator.sub, (nan if t is None else t for t in times), itertools.repeat(base))
        return np.fromiter(map(float, diffs), dtype=np.float64, count=len(times))
