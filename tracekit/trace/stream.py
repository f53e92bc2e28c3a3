"""Decode a gzip trace while it inflates: the same event chunks as reader.Document, without the whole text.

Only the common form is streamed: a top-level object whose keys before `traceEvents` and after its
array decode on their own. Anything else (and every error) raises Fallback, and the caller loads
the whole text the usual way, which then gives the same results or the same error message."""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator
from typing import Any

import msgspec
import numpy as np

from tracekit.errors import TraceTooLarge
from tracekit.trace import reader
from tracekit.trace.reader import (
    _SPLIT,
    BadJSON,
    Chunk,
    Document,
    Event,
    TopLevel,
    _launch_op_args,
    decode_piece,
)
from tracekit.trace.times import ChunkTimes

_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
MAX_HEAD = 16 << 20  # no traceEvents key in this much text: not the common form
MAX_BUFFER = 256 << 20  # one event (or gap between two cuts) longer than this: load the whole text
_TAIL_PREFIX = b'{"traceEvents":['
_FIRST_EVENT = re.compile(rb"\[\s*\{")
_META = tuple(f for f in TopLevel.__struct_fields__ if f != "traceEvents")
_Tail = msgspec.defstruct("_Tail", [("traceEvents", msgspec.Raw, msgspec.Raw(b"null")),
                                    *((f, Any, msgspec.UNSET) for f in _META)], gc=False)
_TAIL = msgspec.json.Decoder(_Tail)
_HEAD = msgspec.json.Decoder(TopLevel)
_ERRORS = (TraceTooLarge, EOFError, OSError, zlib.error, msgspec.DecodeError, RecursionError, BadJSON)


class Fallback(Exception):
    """This file is not streamed: load its whole text instead."""


class StreamDocument:
    """Like reader.Document, over text that arrives in blocks: `top` is complete once `chunks()` ends."""

    def __init__(self, blocks: Iterator[bytes], size_hint: int = 0) -> None:
        """`size_hint`: the expected length of the text (the gzip trailer's), for `done` only."""
        self.top: dict[str, Any] = {}
        self.skipped = 0
        self.done = 0.0  # share of the text read so far (by size_hint)
        self._hint = size_hint
        self._blocks = blocks
        self._buf = bytearray()
        self._base = 0  # offset in the events array ('[' at 0) of _buf[0]
        self._tolerant = Document(top={}, events_raw=memoryview(b""))

    def chunks(self) -> Iterator[Chunk]:
        """(events, raw args of launch ops by position, start times), cut where reader.Document cuts."""
        try:
            yield from self._chunks()
        except _ERRORS:
            raise Fallback from None
        self.done = 1.0

    def _more(self) -> bool:
        block = next(self._blocks, None)
        if block is None:
            return False
        self._buf += block
        if self._hint:
            self.done = min((self._base + len(self._buf)) / self._hint, 0.99)
        if len(self._buf) > MAX_BUFFER:
            raise Fallback
        return True

    def _head(self) -> None:
        """Read up to the events array: the keys before it become `top`; _buf then starts at its '['."""
        while (match := _KEY.search(self._buf)) is None:
            if len(self._buf) > MAX_HEAD or not self._more():
                raise Fallback
        start = match.end() - 1
        head = _HEAD.decode(bytes(self._buf[:start]) + b"[]}")  # a key inside a string or nested: invalid
        if bytes(head.traceEvents) != b"[]":
            raise Fallback
        self.top = {f: getattr(head, f) for f in _META}
        del self._buf[:start]

    def _cut(self, target: int) -> int | None:
        """reader._next_cut on the stream (None: the text ended first, the end of the array is unknown)."""
        while self._base + len(self._buf) <= target:
            if not self._more():
                return None
        pos = target - self._base
        while (match := _SPLIT.search(self._buf, pos)) is None:
            scanned = len(self._buf)
            if not self._more():
                return None
            # on from the last '}' scanned (a match cut by the block's end starts there, and none
            # can start before it), so that a long stretch without a cut is scanned once
            last = self._buf.rfind(b"}", pos, scanned)
            pos = last if last >= 0 else scanned
        return self._base + match.start() + match.group().index(b",")

    def _chunks(self) -> Iterator[Chunk]:
        self._head()
        start = 1
        while True:
            cut = self._cut(start + reader.CHUNK_BYTES)
            decoded: tuple[list[Event], ChunkTimes] | None = None
            while cut is not None:
                # a cut past the end of the array leaves text after ']': never valid, so it widens
                piece = b"[" + bytes(self._buf[start - self._base:cut - self._base]) + b"]"
                decoded = decode_piece(piece, self._tolerant_decode)
                if decoded is not None:
                    break
                cut = self._cut(max(cut + 1, start + 2 * (cut - start)))
            if cut is None or decoded is None:
                yield from self._rest(start)
                return
            events, times = decoded
            yield events, _launch_op_args(piece, events), times
            start = cut + 1
            del self._buf[:start - self._base]
            self._base = start

    def _tolerant_decode(self, piece: bytes) -> list[Event] | None:
        before = self._tolerant.skipped
        events = self._tolerant._tolerant(piece)
        self.skipped += self._tolerant.skipped - before
        return events

    def _rest(self, start: int) -> Iterator[Chunk]:
        """The text ended: the events from `start` and the keys after the array, decoded whole."""
        while self._more():
            pass
        text = _TAIL_PREFIX + bytes(self._buf[start - self._base:])
        self._buf = bytearray()
        tail: Any = _TAIL.decode(text)
        events = tail.traceEvents
        if _address(events) != _address(text) + len(_TAIL_PREFIX) - 1:
            raise Fallback  # a second traceEvents key: the last one counts, as in the whole text
        for f in _META:
            value = getattr(tail, f)
            if value is not msgspec.UNSET:
                self.top[f] = value
        body = bytes(events)
        del text, tail, events
        if _FIRST_EVENT.match(body) is None:
            raise Fallback  # no events (or a trailing comma): the whole text gives the error
        rest = Document(top={}, events_raw=memoryview(body))
        for chunk in rest.chunks():
            self.done = 1.0 if rest.done >= 1 else max(self.done, min(rest.done, 0.99))
            yield chunk
        self.skipped += rest.skipped


def _address(buffer: bytes | msgspec.Raw) -> int:
    return int(np.frombuffer(buffer, dtype=np.uint8).ctypes.data) if len(buffer) else -1
