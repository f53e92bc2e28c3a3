"""Find the trace files behind a path (file, per-rank directory, glob) and read their bytes (gzip aware,
streamed, within a byte budget)."""

from __future__ import annotations

import glob
import os
import re
import stat
import zlib
from collections.abc import Generator, Iterator
from pathlib import Path

from tracekit.errors import TraceFormatError, TraceTooLarge
from tracekit.paths import NAME_SUFFIXES, PROFILE_SUFFIX, trace_stem  # noqa: F401  (defined once, there)

# The one definition of trace file names. A directory's trace files end with TRACE_SUFFIXES;
TRACE_SUFFIXES = (".json", ".json.gz")
_RANK_IN_NAME = re.compile(r"rank[-_]?(\d{1,9})", re.IGNORECASE)

MAX_BYTES_ENV = "TRACEKIT_MAX_TRACE_BYTES"
LOAD_BYTES_PER_JSON_BYTE = 6  # load_trace peaks near 5.7x the JSON size (benchmarks/bench_load.py)
FALLBACK_AVAILABLE = 4 << 30  # when the platform does not say how much memory is free
# Without an explicit limit, a gzip stream that has inflated past BOMB_FLOOR bytes at more than
# BOMB_RATIO times its compressed size is refused: Kineto JSON compresses 10-20x, a bomb ~1000x.
BOMB_FLOOR = 64 << 20
BOMB_RATIO = 200
_IN_CHUNK = 8 << 20
_READ_CHUNK = 16 << 20  # a file that grew (or a device) is read on this much at a time
_OUT_CHUNK = 4 << 20  # inflated at most this much per call, into the one output buffer


def is_trace_name(path: Path) -> bool:
    return path.name.endswith(TRACE_SUFFIXES)


def trace_files(path: str | os.PathLike) -> list[Path]:
    """The trace files `path` names: itself, or the .json/.json.gz files directly inside a directory."""
    p = Path(path)
    try:
        if not p.exists():
            raise TraceFormatError(f"{p}: no such file or directory")
        if p.is_dir():
            files = sorted(f for f in p.iterdir() if is_trace_name(f) and f.is_file())
            if not files:
                raise TraceFormatError(f"{p}: directory holds no trace files (*.json, *.json.gz)")
            return files
        if not p.is_file():  # a FIFO or device would block or never end
            raise TraceFormatError(f"{p}: not a regular file")
    except OSError as exc:
        raise TraceFormatError(f"{p}: cannot read directory ({exc.strerror or type(exc).__name__})") from None
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


CAPTURE_DIR = "capture_traces"


def capture_folder(path: str | os.PathLike) -> Path:
    """The capture_traces/ folder inside directory `path`, or beside file `path` (it may not exist)."""
    p = Path(path)
    return (p if p.is_dir() else p.parent) / CAPTURE_DIR


def capture_files(path: str | os.PathLike) -> list[Path]:
    """Trace files of the capture_traces/ folder inside directory `path`, or beside file `path`."""
    folder = capture_folder(path)
    if not folder.is_dir():
        return []
    return sorted(f for f in folder.iterdir() if f.is_file() and is_trace_name(f))


def irregular_entries(folder: str | os.PathLike) -> list[str]:
    """One note per entry of `folder` named like a trace file that is not a regular file (a directory,
    FIFO, socket or device: reading it would fail or block), which the listings above leave out; none
    when `folder` is not a directory that can be listed."""
    try:
        found = sorted(f for f in Path(folder).iterdir() if is_trace_name(f) and not f.is_file())
    except OSError:
        return []
    return [f"{f}: not a regular file; skipped" for f in found]


def rank_from_name(path: Path) -> int | None:
    """The rank a file name states (`rank-3`, `rank_3`, `sampled_rank-1`), if any."""
    match = _RANK_IN_NAME.search(path.name)
    return int(match.group(1)) if match else None


def available_memory() -> int:
    """Bytes of memory this process may still use (MemAvailable, else free pages, else 4 GiB)."""
    try:
        with open("/proc/meminfo", "rb") as fh:
            for line in fh:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return FALLBACK_AVAILABLE


def parse_size(text: str) -> int:
    """'500M', '2G', '1000000' -> bytes (K/M/G/T are powers of 1024); ValueError when not a size."""
    s = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = 1
    if s and s[-1] in "KMGT":
        scale = 1 << (10 * ("KMGT".index(s[-1]) + 1))
        s = s[:-1]
    value = float(s)
    if not value > 0 or value * scale > 1 << 62:
        raise ValueError(f"not a positive size: {text!r}")
    return int(value * scale)


def byte_budget(explicit: int | None = None) -> tuple[int, bool]:
    """(most bytes of JSON one trace file may hold, whether the limit was given by the user):
    `explicit`, else $TRACEKIT_MAX_TRACE_BYTES, else available memory / LOAD_BYTES_PER_JSON_BYTE."""
    if explicit is not None:
        return explicit, True
    env = os.environ.get(MAX_BYTES_ENV)
    if env:
        try:
            return parse_size(env), True
        except ValueError:
            raise TraceFormatError(f"{MAX_BYTES_ENV}={env!r}: not a size (e.g. 2G, 500M)") from None
    return max(available_memory() // LOAD_BYTES_PER_JSON_BYTE, 64 << 20), False


_BLANK = re.compile(rb"[ \t\n\r\x0b\x0c]*")  # what bytes.strip removes


def read_bytes(path: Path, max_bytes: int | None = None) -> bytes | bytearray:
    """The decompressed bytes of a trace file; one-line TraceFormatError when unreadable or larger
    than the budget (see byte_budget)."""
    raw, limit, explicit = read_raw(path, max_bytes)
    return decompressed(path, raw, limit, explicit)


def read_raw(path: Path, max_bytes: int | None = None) -> tuple[bytes, int, bool]:
    """(the file's bytes as stored, the byte budget, whether the user gave it): read_bytes' first half."""
    limit, explicit = byte_budget(max_bytes)
    try:
        raw = _read_whole(path, limit)
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot read file ({exc.strerror or type(exc).__name__})") from None
    if not raw:
        raise TraceFormatError(f"{path}: file is empty")
    return raw, limit, explicit


def plain_blocks(path: Path, max_bytes: int | None = None) -> tuple[Generator[bytes, None, None], int] | None:
    """(the text of an uncompressed trace file in blocks, its size) when it is a regular, non-empty
    file within the budget that is not gzip; None otherwise (read_raw then decides, with its errors).
    A read error or growth past the budget raises from the iterator (the caller reads it again)."""
    limit, _ = byte_budget(max_bytes)
    try:
        with open(path, "rb", buffering=0) as fh:
            info = os.fstat(fh.fileno())
            if not (stat.S_ISREG(info.st_mode) and 0 < info.st_size <= limit) or is_gzip(fh.read(2)):
                return None
    except OSError:
        return None

    def blocks() -> Generator[bytes, None, None]:
        with open(path, "rb", buffering=0) as fh:
            total = 0
            while chunk := fh.read(_OUT_CHUNK):
                total += len(chunk)
                if total > limit:
                    raise TraceTooLarge(_too_large(limit, True))
                yield chunk

    return blocks(), info.st_size


def is_gzip(raw: bytes) -> bool:
    return raw[:2] == b"\x1f\x8b"


def decompressed(path: Path, raw: bytes, limit: int, explicit: bool) -> bytes | bytearray:
    """read_bytes' second half: `raw` (from read_raw) inflated when it is gzip, with its errors."""
    if is_gzip(raw):
        try:
            text = gunzip(raw, limit, bomb_guard=not explicit)
        except TraceTooLarge as exc:
            raise TraceTooLarge(f"{path}: {exc}") from None
        except (OSError, EOFError, zlib.error) as exc:
            reason = "truncated gzip data" if isinstance(exc, EOFError) else f"bad gzip data ({exc})"
            raise TraceFormatError(f"{path}: {reason}") from None
        if _BLANK.fullmatch(text):  # (text.strip() would copy the whole text to find out)
            raise TraceFormatError(f"{path}: file is empty (after decompression)")
        return text
    return raw


def _read_whole(path: Path, limit: int) -> bytes:
    """The file's bytes (an unbuffered read allocates them once, at the file's size: asking for the
    limit would allocate the whole limit, gigabytes, for a small file)."""
    with open(path, "rb", buffering=0) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > limit:
            raise TraceTooLarge(f"{path}: {_too_large(limit, True)}")
        data = fh.read(size + 1) if size else b""
        if len(data) > size or not size:  # a file that grew, or a device or FIFO: on in chunks
            parts, total = [data], len(data)
            while total <= limit:
                chunk = fh.read(min(_READ_CHUNK, limit + 1 - total))
                if not chunk:
                    break
                parts.append(chunk)
                total += len(chunk)
            data = b"".join(parts)
    if len(data) > limit:  # a file that grew, or a device
        raise TraceTooLarge(f"{path}: {_too_large(limit, True)}")
    return data


def _too_large(limit: int, explicit: bool) -> str:
    return (f"trace is larger than the {limit / 1e6:,.0f} MB limit (raise it with --max-trace-bytes "
            f"or {MAX_BYTES_ENV})")


def gunzip(data: bytes, limit: int, *, bomb_guard: bool = True) -> bytes | bytearray:
    """Decompress a (possibly multi-member) gzip stream chunk by chunk, never trusting its size
    trailer: TraceTooLarge past `limit` bytes (or, with `bomb_guard`, at an inflation ratio no
    trace has), EOFError on truncation, zlib.error on corruption. Trailing NUL padding is ignored.

    The text is written into one buffer sized from the trailer (only a hint, capped by the limits):
    when the hint is right, the peak memory is the text plus one chunk, with no copy of the whole."""
    out = bytearray(size_hint(data, limit, bomb_guard))
    size = 0
    for chunk in inflate(data, limit, bomb_guard=bomb_guard):
        if size + len(chunk) > len(out):  # the hint was short: grow by half, up to the limit
            out += bytes(max(size + len(chunk) - len(out), min(len(out) // 2, limit - len(out)), _OUT_CHUNK))
        out[size:size + len(chunk)] = chunk
        size += len(chunk)
    del out[size:]
    return out


def inflate(data: bytes, limit: int, *, bomb_guard: bool = True) -> Iterator[bytes]:
    """The decompressed text of a gzip stream, one chunk (at most _OUT_CHUNK bytes) at a time, with
    the checks and errors gunzip documents (each chunk is checked before it is yielded)."""
    size = 0
    view = memoryview(data)
    pos, end = 0, len(data)
    while pos < end:
        d = zlib.decompressobj(wbits=31)
        while not d.eof:
            piece: bytes | memoryview
            if d.unconsumed_tail:
                piece = d.unconsumed_tail
            else:
                piece = view[pos:pos + _IN_CHUNK]
                pos += len(piece)
            chunk = d.decompress(piece, _OUT_CHUNK)
            if not chunk and not piece:
                raise EOFError("truncated gzip data")
            if chunk:
                # past the limit: refused before the buffer grows (by half, it went to 1.5x the limit)
                _check(size + len(chunk), pos - len(d.unconsumed_tail), limit, bomb_guard)
                size += len(chunk)
                yield chunk
            _check(size, pos - len(d.unconsumed_tail), limit, bomb_guard)
        pos -= len(d.unused_data)
        while pos < end and data[pos] == 0:
            pos += 1
        if data[pos:pos + 2] != b"\x1f\x8b":
            break  # trailing garbage after the last member: ignored, as gzip does


def size_hint(data: bytes, limit: int, bomb_guard: bool) -> int:
    """The gzip trailer's size of the (last) member, within what gunzip would accept."""
    hint = int.from_bytes(data[-4:], "little") if len(data) >= 4 else 0  # ISIZE (mod 2**32)
    cap = min(limit, max(BOMB_FLOOR, BOMB_RATIO * len(data))) if bomb_guard else limit
    return min(hint, cap)


def _check(inflated: int, consumed: int, limit: int, bomb_guard: bool) -> None:
    if inflated > limit:
        raise TraceTooLarge(_too_large(limit, not bomb_guard))
    if bomb_guard and inflated >= BOMB_FLOOR and inflated > BOMB_RATIO * consumed:
        raise TraceTooLarge(f"gzip data inflates more than {BOMB_RATIO}x (a gzip bomb?); if the trace is "
                            f"genuine, allow it with --max-trace-bytes or {MAX_BYTES_ENV}")


__all__ = ["byte_budget", "capture_files", "expand_inputs", "gunzip", "inflate", "is_trace_name", "parse_size", "plain_blocks", "rank_from_name", "read_bytes", "size_hint", "trace_files"]
