"""Find the trace files behind a path (file, per-rank directory, glob) and read their bytes (gzip aware)."""

from __future__ import annotations

import glob
import os
import re
import zlib
from pathlib import Path

from tracekit.errors import TraceFormatError

TRACE_SUFFIXES = (".json", ".json.gz")
_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


def is_trace_name(path: Path) -> bool:
    return path.name.endswith(TRACE_SUFFIXES)


def trace_files(path: str | os.PathLike) -> list[Path]:
    """The trace files `path` names: itself, or the .json/.json.gz files directly inside a directory."""
    p = Path(path)
    if not p.exists():
        raise TraceFormatError(f"{p}: no such file or directory")
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.is_file() and is_trace_name(f))
        if not files:
            raise TraceFormatError(f"{p}: directory holds no trace files (*.json, *.json.gz)")
        return files
    return [p]


def expand_inputs(inputs: list[str]) -> list[Path]:
    """The trace files behind several inputs, each a file, a directory of rank traces, or a glob
    ('run/*.json.gz'); in order, without duplicates. TraceFormatError (one line) for an input that
    names nothing."""
    out: dict[Path, None] = {}
    for item in inputs:
        if not Path(item).exists() and glob.has_magic(item):
            matches = sorted(glob.glob(os.path.expanduser(item)))
            if not matches:
                raise TraceFormatError(f"{item}: no file matches this pattern")
            for m in matches:
                out.update(dict.fromkeys(trace_files(m) if Path(m).is_dir() else [Path(m)]))
        else:
            out.update(dict.fromkeys(trace_files(item)))
    return list(out)


def rank_from_name(path: Path) -> int | None:
    """The rank a file name states (`rank-3`, `rank_3`, `sampled_rank-1`), if any."""
    match = _RANK_IN_NAME.search(path.name)
    return int(match.group(1)) if match else None


def read_bytes(path: Path) -> bytes:
    """The decompressed bytes of a trace file; one-line TraceFormatError when unreadable."""
    try:
        raw = _read_whole(path)
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot read file ({exc.strerror or exc})") from None
    if not raw:
        raise TraceFormatError(f"{path}: file is empty")
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = _gunzip(raw)
        except (OSError, EOFError, zlib.error) as exc:
            reason = "truncated gzip data" if isinstance(exc, EOFError) else f"bad gzip data ({exc})"
            raise TraceFormatError(f"{path}: {reason}") from None
        if not raw.strip():
            raise TraceFormatError(f"{path}: file is empty (after decompression)")
    return raw


def _read_whole(path: Path) -> bytes:
    """The file's bytes (an unbuffered read allocates them once, at the file's size)."""
    with open(path, "rb", buffering=0) as fh:
        return fh.read()


def _gunzip(data: bytes) -> bytes:
    """Decompress a (possibly multi-member) gzip stream, failing loudly on truncation."""
    isize = int.from_bytes(data[-4:], "little")  # the last member's size mod 2**32
    try:
        whole = zlib.decompress(data, wbits=31, bufsize=max(isize, 1 << 16))
    except zlib.error as exc:
        if "incomplete" in str(exc) or "truncated" in str(exc):
            raise EOFError("truncated gzip data") from None
        raise
    if len(whole) % (1 << 32) == isize:  # one member: decompressed into one buffer of the right size
        return whole
    del whole
    out = []
    while data:
        d = zlib.decompressobj(wbits=31)
        out.append(d.decompress(data))
        if not d.eof:
            raise EOFError("truncated gzip data")
        data = d.unused_data.lstrip(b"\x00")
        if data and data[:2] != b"\x1f\x8b":
            break
    return out[0] if len(out) == 1 else b"".join(out)  # one member: no second copy


__all__ = ["expand_inputs", "is_trace_name", "rank_from_name", "read_bytes", "trace_files"]
