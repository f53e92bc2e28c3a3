"""Decoding a gzip trace while it inflates (trace.stream) gives exactly the chunks of the whole text."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator

import numpy as np
import pytest
from tracebuilder import TraceBuilder

from tracekit.errors import TraceFormatError
from tracekit.trace import files, load, reader
from tracekit.trace.reader import BadJSON, NotATrace, open_document
from tracekit.trace.stream import Fallback, StreamDocument


def _events() -> list[dict]:
    b = TraceBuilder()
    for i in range(40):
        ext = b.op(f"aten::op{i % 3}", 100.0 * i, 50.0)
        b.launch(100.0 * i + 5, 5, "kernel},{7" if i == 7 else "gemm", 100.0 * i + 20, 10.5, ext=ext)
    b.annotation("ProfilerStep#1", 0, 4000)
    b.raw({"ph": "X", "cat": "cpu_op", "name": "bad", "ts": [1], "dur": 1})  # malformed: skipped
    return b.document()["traceEvents"]


def _text(events: list[dict], before: str = '"schemaVersion": 1, ', after: str = "") -> bytes:
    body = ",\n".join(json.dumps(e) for e in events)
    return f'{{{before}"traceEvents": [\n{body}\n]{after}}}'.encode()


def _blocks(text: bytes, size: int) -> Iterator[bytes]:
    return (text[i:i + size] for i in range(0, len(text), size))


def _comparable(chunks: list) -> list:
    """The chunks with their start times as bytes (ChunkTimes has no ==; NaN bytes compare equal)."""
    rows = [np.arange(len(events)) for events, _, _ in chunks]
    return [(events, launch, times.has_ts.tobytes(), times.relative(r, 1).tobytes())
            for (events, launch, times), r in zip(chunks, rows, strict=True)]


def _whole(text: bytes) -> tuple:
    try:
        doc = open_document(text)
        chunks = list(doc.chunks())
    except (BadJSON, NotATrace) as exc:
        return ("error", str(exc))
    return _comparable(chunks), doc.top, doc.skipped


def _streamed(text: bytes, size: int) -> tuple:
    doc = StreamDocument(_blocks(text, size))
    chunks = list(doc.chunks())
    return _comparable(chunks), doc.top, doc.skipped


EVENTS = _events()
STREAMED = {
    "keys before": _text(EVENTS),
    "keys after": _text(EVENTS, before="", after=', "distributedInfo": {"rank": 3}, "schemaVersion": 2'),
    "a key on both sides (the last counts)": _text(EVENTS, after=', "schemaVersion": 5'),
    "the key's name in a string before it": _text(EVENTS, before='"tracekit": {"note": "\\"traceEvents\\": ["}, '),
    "cut-like text after the array": _text(EVENTS, after=', "tracekit": [{"a": 1},{"b": 2}, {"c": [3]}]'),
    "one event": _text(EVENTS[:1]),
}
WHOLE_ONLY = {
    "a second traceEvents key": _text(EVENTS, after=', "traceEvents": [{"ph": "X"}]'),
    "the key nested before the real one": _text(EVENTS, before='"tracekit": {"traceEvents": [1]}, '),
    "empty array": _text([]),
    "trailing comma": _text(EVENTS).replace(b"\n]", b",\n]"),
    "text after the object": _text(EVENTS) + b" x",
    "truncated": _text(EVENTS)[:-40],
    "bare array": json.dumps(EVENTS).encode(),
    "no traceEvents": b'{"schemaVersion": 1}',
}


@pytest.fixture(autouse=True)
def _small_chunks(monkeypatch):
    monkeypatch.setattr(reader, "CHUNK_BYTES", 700)  # many chunks of a few events each


@pytest.mark.parametrize("name", sorted(STREAMED))
@pytest.mark.parametrize("size", [13, 512, 1 << 20])
def test_streamed_chunks_are_those_of_the_whole_text(name, size):
    text = STREAMED[name]
    whole = _whole(text)
    assert len(whole[0]) > 1 or name == "one event"  # several chunks: their cuts are compared
    assert _streamed(text, size) == whole


def test_the_streamed_top_level_keys_merge_as_one_object_would():
    _, top, skipped = _streamed(STREAMED["a key on both sides (the last counts)"], 100)
    assert top["schemaVersion"] == 5  # written 1 before the events and 5 after: the last wins
    assert skipped == 1  # the event with a list for ts


@pytest.mark.parametrize("name", sorted(WHOLE_ONLY))
def test_other_forms_fall_back_to_the_whole_text(name):
    with pytest.raises(Fallback):
        _streamed(WHOLE_ONLY[name], 256)


def _loaded(path):
    try:
        r = load.load_file(path)
    except TraceFormatError as exc:
        return str(exc).replace(str(path), "PATH")
    return (tuple(getattr(r, t) for t in ("gpu", "ops", "runtime", "annotations", "memory")), r.skipped, repr(r.meta))


def _same_load(a, b) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return a[1:] == b[1:] and all(x.equals(y) for x, y in zip(a[0], b[0], strict=True))  # (NaN = NaN here)


@pytest.mark.parametrize("name", ["a second traceEvents key", "trailing comma", "keys after", "truncated"])
def test_load_file_gives_the_whole_text_result(name, tmp_path, monkeypatch):
    """The loader streams plain and gzip files and falls back by itself: the same tables or error."""
    text = {**STREAMED, **WHOLE_ONLY}[name]
    plain, packed = tmp_path / "t.json", tmp_path / "t.json.gz"
    plain.write_bytes(text)
    packed.write_bytes(gzip.compress(text))
    streamed = [_loaded(plain), _loaded(packed)]
    monkeypatch.setattr(files, "plain_blocks", lambda *_: None)  # the whole-text path alone
    whole = _loaded(plain)
    assert _same_load(streamed[0], whole)
    assert _same_load(streamed[1], whole)
