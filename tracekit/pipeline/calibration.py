"""Read a `tracekit calibrate` file into the ProfilerOverhead the execution model projects with."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from tracekit.errors import CalibrationError
from tracekit.model.calibration import overhead_from_calibration
from tracekit.model.projection import SOURCE_CALIBRATION, ProfilerOverhead
from tracekit.terminal import visible

SCHEMA = "tracekit-calibration/1"  # the "schema" of the file tracekit/profile/calibrate.py writes
MAX_BYTES = 1 << 20  # a calibration is a few hundred bytes
MAX_US = 1e4  # a cost per event or launch call above 10 ms is not a reading
_SHOWN = 60


def load_calibration(path: str | os.PathLike[str]) -> ProfilerOverhead:
    """The ProfilerOverhead of the calibration file at `path` (model.calibration.overhead_from_calibration
    of its per_event_us, launch_p10_us and bare_launch_us); CalibrationError, one line naming the file
    and the problem, when it is missing, unreadable, not JSON, not a calibration or holds bad numbers."""
    path = Path(path)
    data = _read(path)
    if not isinstance(data, dict):
        raise CalibrationError(f"{path}: not a tracekit calibration (a JSON {type(data).__name__}, not an object)")
    schema = data.get("schema")
    if schema != SCHEMA:
        raise CalibrationError(f"{path}: not a tracekit calibration (schema {_shown(schema)}, expected {SCHEMA!r}; "
                               "write one with tracekit calibrate)")
    per_event = _number(path, data, "per_event_us", zero=True)
    fast = _optional(path, data, "launch_p10_us")
    floor = _optional(path, data, "bare_launch_us")
    slowdown = _optional(path, data, "python_slowdown")
    device, date = _label(data.get("device")), _label(data.get("date"))
    source = f"{SOURCE_CALIBRATION}: {path.name}" + (f" ({', '.join(x for x in (device, date) if x)})"
                                                    if device or date else "")
    return overhead_from_calibration(per_event, fast, floor, source, slowdown)


def _read(path: Path) -> Any:
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise CalibrationError(f"{path}: cannot read the calibration file ({exc.strerror or exc})") from None
    if len(raw) > MAX_BYTES:
        raise CalibrationError(f"{path}: not a tracekit calibration (larger than {MAX_BYTES >> 20} MB)")
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CalibrationError(f"{path}: not a tracekit calibration (not JSON: {visible(_one_line(exc))})") from None


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number")


def _number(path: Path, data: dict[str, Any], key: str, *, zero: bool = False) -> float:
    """data[key] as a number of µs in [0, MAX_US] (with `zero`) or (0, MAX_US], else CalibrationError."""
    value = data.get(key)
    if (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and (value >= 0 if zero else value > 0) and value <= MAX_US):
        return float(value)
    want = f"a number of µs in {'[0' if zero else '(0'}, {MAX_US:g}]"
    got = "missing" if key not in data else _shown(value)
    raise CalibrationError(f"{path}: {key} is {got}, not {want}")


def _optional(path: Path, data: dict[str, Any], key: str) -> float | None:
    """data[key] as for _number, None when it is null or absent (not measured on that machine)."""
    return None if data.get(key) is None else _number(path, data, key)


def _label(value: object) -> str:
    return visible(value[:_SHOWN]) if isinstance(value, str) else ""


def _shown(value: object) -> str:
    text = visible(repr(value))
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200]
