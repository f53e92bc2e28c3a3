"""Human-readable durations and sizes for text output (CLI lines, suggestion formulas)."""

from __future__ import annotations

import math


def fmt_us(us: float | None) -> str:
    """1234.5 -> '1.23 ms'; 12.345 -> '12.3 µs'; 2.5e6 -> '2.50 s'."""
    if us is None or (isinstance(us, float) and math.isnan(us)):
        return "?"
    a = abs(us)
    if a >= 1e6:
        return f"{us / 1e6:.2f} s"
    if a >= 1e3:
        return f"{us / 1e3:.2f} ms"
    if a >= 100:
        return f"{us:.0f} µs"
    return f"{us:.1f} µs"


def fmt_bytes(b: float) -> str:
    """12_345_678 -> '12.35 MB'."""
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(b) >= div:
            return f"{b / div:.2f} {unit}"
    return f"{b:.0f} B"
