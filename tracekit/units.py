"""The one number formatter of tracekit: times (ms above 1 ms), bytes, FLOPs, rates and shares, for text and HTML."""

from __future__ import annotations

import math

DASH = "–"  # shown where a value is unknown

# (threshold, divisor, unit), largest first; a value uses the first row whose threshold it reaches
_TIME_UNITS = ((1e6, 1e6, "s"), (1e3, 1e3, "ms"), (0.0, 1.0, "µs"))
_SI_UNITS = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (0.0, ""))


def is_num(value: object) -> bool:
    """True for a finite int/float (bools and NaN excluded)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return math.isfinite(value)


def num(value: object) -> float | None:
    """The value as a float, or None when unknown/NaN/not a number."""
    if is_num(value):
        return float(value)  # type: ignore[arg-type]
    try:  # numpy scalars
        f = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _sig(value: float) -> str:
    """Three significant figures without scientific notation (12.3, 1.23, 123)."""
    a = abs(value)
    if a >= 100:
        return f"{value:.0f}"
    if a >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def fmt_time(us: object) -> str:
    """Microseconds as '812 µs', '3.41 ms', '1.20 s'."""
    v = num(us)
    if v is None:
        return DASH
    if v == 0:
        return "0 µs"
    for threshold, div, unit in _TIME_UNITS:
        if abs(v) >= threshold:
            return f"{_sig(v / div)} {unit}"
    return f"{_sig(v)} µs"  # pragma: no cover


def _si(value: object, unit: str) -> str:
    v = num(value)
    if v is None:
        return DASH
    if v == 0:
        return f"0 {unit}"
    for threshold, prefix in _SI_UNITS:
        if abs(v) >= threshold:
            div = threshold or 1.0
            return f"{_sig(v / div)} {prefix}{unit}"
    return f"{_sig(v)} {unit}"  # pragma: no cover


def fmt_bytes(b: object) -> str:
    """Bytes in decimal units: '512 B', '1.23 MB', '4.10 GB'."""
    return _si(b, "B")


def fmt_flops(f: object) -> str:
    """A FLOP count: '137 GFLOP'."""
    return _si(f, "FLOP")


def fmt_si(value: object) -> str:
    """A count with an SI prefix and no unit: '618 M', '1.23 G' (the column header names the unit)."""
    return _si(value, "").rstrip()


def fmt_tflops(t: object) -> str:
    """A rate already in TFLOP/s: '312 TFLOP/s', '0.41 TFLOP/s'."""
    v = num(t)
    return DASH if v is None else f"{_sig(v)} TFLOP/s"


def fmt_gbps(g: object) -> str:
    """A bandwidth already in GB/s: '3.35 TB/s' above 1000 GB/s."""
    v = num(g)
    if v is None:
        return DASH
    return f"{_sig(v / 1000)} TB/s" if abs(v) >= 1000 else f"{_sig(v)} GB/s"


def fmt_pct(share: object, *, fraction: bool = True) -> str:
    """A share as '42.1%'; fraction=True means 0.421 -> 42.1%, else the value is already percent."""
    v = num(share)
    if v is None:
        return DASH
    p = v * 100 if fraction else v
    if p != 0 and abs(p) < 0.1:
        return "<0.1%"
    return f"{p:.1f}%" if abs(p) < 100 else f"{p:.0f}%"


def fmt_int(n: object) -> str:
    """An integer with thousands separators: '12,345'."""
    v = num(n)
    return DASH if v is None else f"{round(v):,}"


def fmt_ratio(x: object) -> str:
    """A plain number with 3 significant figures ('0.0031' below 0.1, '0' for zero)."""
    v = num(x)
    if v is None:
        return DASH
    if v == 0:
        return "0"
    return f"{v:.2g}" if abs(v) < 0.1 else _sig(v)


def fmt_us(us: object) -> str:
    """A duration in µs for text output: the same text as fmt_time ('812 µs', '3.41 ms', '1.20 s')."""
    return fmt_time(us)


def plural(n: object, noun: str, plural_form: str | None = None) -> str:
    """'1 call', '1,234 calls': a count with its noun in the right number."""
    v = num(n)
    if v is None:
        return DASH
    word = noun if round(v) == 1 else (plural_form or noun + "s")
    return f"{round(v):,} {word}"
