"""trace.times: start times parsed from their JSON text equal float(Decimal(ts) - origin), the old way."""

from __future__ import annotations

import decimal
import random
from decimal import Decimal

import msgspec
import numpy as np
import pytest

from tracekit.trace.times import MAX_ABS_TS_US, ChunkTimes, NotANumber


def _reference(texts: list[bytes], origin: int) -> np.ndarray:
    """float(Decimal(ts) - origin) per text, NaN for null: what the loader computed before."""
    with decimal.localcontext(decimal.Context(traps=[])):
        return np.array([float(Decimal(t.decode()) - origin) if t != b"null" else np.nan for t in texts])


def _reference_origin(texts: list[bytes]) -> int | None:
    for t in texts:
        if t != b"null":
            d = Decimal(t.decode())
            if d.is_finite() and abs(d) <= MAX_ABS_TS_US:
                return int(d)
    return None


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.tobytes() == b.tobytes()  # bit for bit (NaN, -0.0 included)


def _random_texts(rng: random.Random, n: int) -> list[bytes]:
    out = []
    for _ in range(n):
        whole = rng.choice([rng.randrange(10**13), 5094699832641 + rng.randrange(10**7),
                            1764598744069934 + rng.randrange(10**6), rng.randrange(100)])
        digits = rng.choice([0, 1, 3, 3, 3, 6, 9])
        frac = f".{rng.randrange(10**digits):0{digits}d}" if digits else ""
        out.append(f"{whole}{frac}".encode())
    return out


@pytest.mark.parametrize("seed", range(5))
def test_plain_numbers_match_decimal_bit_for_bit(seed):
    rng = random.Random(seed)
    texts = _random_texts(rng, 3000)
    texts[::97] = [b"null"] * len(texts[::97])
    times = ChunkTimes(texts)
    rows = np.arange(len(texts))
    origin = _reference_origin(texts)
    assert times.origin_in(rows) == origin
    for base in (origin, 0, 5094699832641, 1764598744069934):
        assert _same(times.relative(rows, base), _reference(texts, base))
    assert times.has_ts.tolist() == [t != b"null" for t in texts]


ODD = [b"-0.0", b"-12.5", b"1e400", b"1E2", b"1.5e-3", b"123456789012345678.5", b"0.0000000001",
       b"12345678901234567", b"99999999999999999.999999999", b"NaN", b"Infinity", b"sNaN", b"0"]


@pytest.mark.parametrize("odd", ODD)
def test_other_numbers_go_through_decimal(odd):
    """Negative, exponent, too many digits, and the non-finite texts a Decimal gives: the old way."""
    texts = [b"null", b"5094699832641.993", odd, b"17.25"]
    times = ChunkTimes(texts)
    rows = np.arange(4)
    assert times.origin_in(rows) == _reference_origin(texts) == 5094699832641
    assert times.origin_in(rows[2:]) == _reference_origin(texts[2:])
    for base in (5094699832641, 0, 17):
        assert _same(times.relative(rows, base), _reference(texts, base))


def test_rows_past_2_pow_53_ticks_are_exact():
    """(ts - origin) * 10**digits at or past 2**53: those rows are computed with Decimal."""
    texts = [b"1764598744069934.123", b"5.123456789", b"99999999999999.5"]
    times = ChunkTimes(texts)
    rows = np.arange(3)
    assert _same(times.relative(rows, 0), _reference(texts, 0))
    assert _same(times.relative(rows, 1764598744069934), _reference(texts, 1764598744069934))


@pytest.mark.parametrize("value", [b'"12.5"', b"true", b"false", b"[1]", b'{"a": 1}'])
def test_a_ts_that_is_not_a_number_is_refused(value):
    with pytest.raises(NotANumber):
        ChunkTimes([b"1.5", value])


def test_a_chunk_from_the_decoder():
    """Raw texts straight from msgspec (the reader's Event.ts), spaces and all."""
    class E(msgspec.Struct):
        ts: msgspec.Raw = msgspec.Raw(b"null")

    events = msgspec.json.decode(b'[{"ts": 10.5}, {}, {"ts" :  3}, {"ts": null}, {"ts": 2.125}]', type=list[E])
    times = ChunkTimes([e.ts for e in events])
    assert times.has_ts.tolist() == [True, False, True, False, True]
    assert times.origin_in(np.arange(5)) == 10
    assert np.array_equal(times.relative(np.array([0, 2, 4]), 10), [0.5, -7.0, -7.875])  # by hand


def test_a_string_ts_is_read_as_the_typed_decoder_reads_it():
    """"ts": "12.5" counts as 12.5 (Decimal reads the string, as before); "ts": "soon" makes the
    event malformed, and the chunk is decoded event by event (the tolerant path)."""
    from tracekit.trace.reader import Document, decode_piece

    tolerant = Document(top={}, events_raw=memoryview(b""))._tolerant
    as_text = decode_piece(b'[{"ph": "X", "ts": "12.5", "dur": 1}, {"ph": "X", "ts": 10, "dur": 1}]', tolerant)
    as_number = decode_piece(b'[{"ph": "X", "ts": 12.5, "dur": 1}, {"ph": "X", "ts": 10, "dur": 1}]', tolerant)
    assert as_text is not None and as_number is not None
    rows = np.arange(2)
    assert as_text[1].relative(rows, 10).tolist() == as_number[1].relative(rows, 10).tolist() == [2.5, 0.0]
    bad = decode_piece(b'[{"ph": "X", "ts": "soon", "dur": 1}, {"ph": "X", "ts": 10, "dur": 1}]', tolerant)
    assert bad is not None
    events, times = bad
    assert len(events) == 1 and times.relative(np.arange(1), 0).tolist() == [10.0]
