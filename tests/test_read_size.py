"""trace.files.read_bytes allocates about the file's size, not the byte limit, and still reads a
FIFO (no size) to its end."""

from __future__ import annotations

import os
import threading
import tracemalloc
from pathlib import Path

import pytest

from tracekit.errors import TraceFormatError
from tracekit.trace.files import read_bytes


def test_small_file_costs_its_size_not_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(b'{"traceEvents": []}' + b" " * 10_000)
    tracemalloc.start()
    try:
        data = read_bytes(path, max_bytes=1 << 30)  # a 1 GB limit: asking read() for it allocates 1 GB
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(data) == 10_019  # 19 bytes of JSON + 10,000 blanks
    assert peak < 1 << 20, peak


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_fifo_is_read_to_its_end_and_against_the_limit(tmp_path: Path) -> None:
    fifo = tmp_path / "f.json"
    os.mkfifo(fifo)
    payload = b"[" + b" " * (3 << 20) + b"]"  # 3 MiB + 2 bytes: more than one read chunk of a pipe

    def feed() -> None:
        try:
            with open(fifo, "wb") as fh:
                fh.write(payload)
        except BrokenPipeError:  # the reader stopped at the limit
            pass

    writer = threading.Thread(target=feed)
    writer.start()
    assert read_bytes(fifo, max_bytes=1 << 30) == payload
    writer.join()
    writer = threading.Thread(target=feed)
    writer.start()
    with pytest.raises(TraceFormatError, match="larger than"):
        read_bytes(fifo, max_bytes=1 << 20)
    writer.join()


def test_gunzip_stops_at_the_limit_without_growing_past_it() -> None:
    """A gzip whose trailer claims the limit and whose text is longer: refused at the limit with at
    most the limit plus a few 4 MB pieces allocated (the buffer grew by half first: 1.5x the limit;
    `--max-trace-bytes 1G` on a 2 GB bomb peaked at 1.6 GB of RSS)."""
    import gzip

    from tracekit.errors import TraceTooLarge
    from tracekit.trace.files import gunzip

    limit = 48 << 20
    data = gzip.compress(b" " * (limit + (16 << 20)), compresslevel=1)
    data = data[:-4] + limit.to_bytes(4, "little")  # the size trailer says: exactly the limit
    tracemalloc.start()
    try:
        with pytest.raises(TraceTooLarge):
            gunzip(data, limit, bomb_guard=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < limit + (16 << 20), peak  # the buffer (48 MB) and a few 4 MB pieces, not 72 MB
