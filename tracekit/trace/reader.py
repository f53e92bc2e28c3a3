"""Decode trace bytes into light event structs (msgspec), chunk by chunk, tolerating bad events."""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Annotated, Any

import msgspec

from tracekit.trace.args import NULL, Args, loose_args
from tracekit.trace.times import ChunkTimes, NotANumber

CHUNK_BYTES = 1 << 20  # events are decoded about 1 MB at a time: peak memory stays near the file size
MAX_DUR_US = 1e15  # 31 years: a longer (or negative, NaN, infinite) duration makes the event malformed
Duration = Annotated[float, msgspec.Meta(ge=0.0, le=MAX_DUR_US)]
TOO_DEEP = "JSON nested too deeply (more than about 1000 levels)"


class Event(msgspec.Struct, gc=False):
    """One Chrome-trace event with the fields tracekit reads."""

    ph: str = ""
    cat: str | None = None
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    ts: msgspec.Raw = NULL  # the JSON text, a number or null (trace.times reads it exactly)
    dur: Duration | None = None
    id: int | str | None = None
    args: Args | None = None


# Event with `ts` decoded as a Decimal: decides about a ts that is not a number (a string)
_TypedEvent = msgspec.defstruct("_TypedEvent", [(f.name, Decimal | None, None) if f.name == "ts" else (f.name, f.type, f.default)
                                                for f in msgspec.structs.fields(Event)], gc=False)


Chunk = tuple[list[Event], dict[int, bytes], ChunkTimes]  # events, raw args of launch ops, start times


class _RawArgsEvent(msgspec.Struct, gc=False):
    args: msgspec.Raw = NULL


class TopLevel(msgspec.Struct, gc=False):
    """The top-level object form of a trace file; the events array is left undecoded."""

    traceEvents: msgspec.Raw = NULL
    deviceProperties: Any = None
    distributedInfo: Any = None
    schemaVersion: Any = None
    baseTimeNanoseconds: Any = None
    cuda_runtime_version: Any = None
    cuda_driver_version: Any = None
    cupti_version: Any = None
    hip_runtime_version: Any = None
    hip_driver_version: Any = None
    roctracer_version: Any = None
    record_shapes: Any = None
    tracekit: Any = None


_TOP = msgspec.json.Decoder(TopLevel | list[msgspec.Raw])
_EVENTS = msgspec.json.Decoder(list[Event])
_TYPED_EVENTS: msgspec.json.Decoder = msgspec.json.Decoder(list[_TypedEvent])  # type: ignore[valid-type]
_TS = operator.attrgetter("ts")
_ARGS = operator.attrgetter("args")
_LAUNCH_MARKS = operator.attrgetter("kernel_file", "kernel_backend", "kernel_hash")
_NO_MARKS = (None, None, None)
_RAW_ARGS = msgspec.json.Decoder(list[_RawArgsEvent])
_SPLIT = re.compile(rb"\}\s*,\s*\{")


class NotATrace(ValueError):
    """The JSON parsed but is not a profiler trace; the message says why."""


class BadJSON(ValueError):
    """The bytes are not valid JSON; the message says where."""


@dataclass
class Document:
    """Top-level metadata of one file and its events, delivered in chunks by `chunks()`."""

    top: dict[str, Any]
    events_raw: memoryview
    skipped: int = 0
    done: float = 0.0  # share of the events array decoded so far

    def chunks(self) -> Iterator[Chunk]:
        """(events, raw args of launch ops by position, start times) a few MB of JSON at a time;
        malformed events are counted in `skipped`."""
        body = self.events_raw
        start, end = 1, len(body) - 1  # inside the [ ]
        while start < end:
            cut = _next_cut(body, start + CHUNK_BYTES, end)
            while True:
                piece = b"[" + bytes(body[start:cut]) + b"]"
                try:
                    decoded = decode_piece(piece, self._tolerant)
                except RecursionError:
                    raise BadJSON(f"{TOO_DEEP} inside traceEvents") from None
                if decoded is not None:
                    break
                if cut >= end:
                    raise BadJSON("not valid JSON inside traceEvents")
                # the cut fell inside an event: widen, doubling, so that a long event (or a
                # string full of "},{") costs linear time, not one decode per false cut
                cut = _next_cut(body, max(cut + 1, start + 2 * (cut - start)), end)
            self.done = (cut + 1) / len(body)
            events, times = decoded
            yield events, _launch_op_args(piece, events), times
            start = cut + 1  # past the comma

    def _tolerant(self, piece: bytes) -> list[Event] | None:
        try:
            items = msgspec.json.decode(piece)
        except msgspec.DecodeError:
            return None
        except RecursionError:
            raise BadJSON(f"{TOO_DEEP} inside traceEvents") from None
        events = []
        for item in items:
            event = _event_from(item)
            if event is None:
                self.skipped += 1
            else:
                events.append(event)
        return events



def decode_piece(piece: bytes, tolerant: Callable[[bytes], list[Event] | None]
                 ) -> tuple[list[Event], ChunkTimes] | None:
    """The events of `piece` (a JSON array) and their start times; None when it is not valid JSON
    (the cut fell inside an event). `tolerant` decodes event by event when one has a field of the
    wrong type. A ts that is not a number is decided by the typed decoder, as before: a string that
    Decimal reads counts, anything else makes the event malformed."""
    events: list[Event] | None
    try:
        events = _EVENTS.decode(piece)
    except msgspec.ValidationError:
        events = tolerant(piece)
    except msgspec.DecodeError:
        return None
    if events is None:
        return None
    try:
        return events, ChunkTimes(list(map(_TS, events)))
    except NotANumber:
        pass
    try:
        events = [_with_text_ts(e) for e in _TYPED_EVENTS.decode(piece)]
    except msgspec.ValidationError:
        events = tolerant(piece)
    if events is None:
        return None
    return events, ChunkTimes(list(map(_TS, events)))


def _with_text_ts(typed: msgspec.Struct) -> Event:
    """The Event of a _TypedEvent: its Decimal ts as text (str of a Decimal reads back as the same)."""
    fields = msgspec.structs.asdict(typed)
    ts = fields["ts"]
    fields["ts"] = NULL if ts is None else msgspec.Raw(str(ts).encode())
    return Event(**fields)


def _launch_op_args(piece: bytes, events: list[Event]) -> dict[int, bytes]:
    """Inductor / Triton launch ops keep all their args: decode those once more, raw."""
    marks = list(map(_LAUNCH_MARKS, filter(None, map(_ARGS, events))))  # (file, backend, hash) per args
    if marks.count(_NO_MARKS) == len(marks):  # no launch op in the piece (most pieces): no per-event loop
        return {}
    wanted = [i for i, e in enumerate(events) if e.args is not None and (
        e.args.kernel_file is not None or e.args.kernel_backend is not None or e.args.kernel_hash is not None)]
    if not wanted:
        return {}
    try:
        raw = _RAW_ARGS.decode(piece)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return {}
    if len(raw) != len(events):
        return {}
    return {i: bytes(raw[i].args) for i in wanted}


def _next_cut(body: memoryview, target: int, end: int) -> int:
    """Offset of the comma between two events at or after `target` (or `end`)."""
    if target >= end:
        return end
    match = _SPLIT.search(body, target, end)
    if match is None:
        return end
    return match.start() + match.group().index(b",")


def open_document(raw: bytes | bytearray) -> Document:
    """Parse the top level of a trace (object or bare-array form) without decoding its events."""
    try:
        top = _TOP.decode(raw)
    except msgspec.ValidationError:  # a subclass of DecodeError: valid JSON of the wrong shape
        raise NotATrace("not a PyTorch profiler trace (top level is neither an object nor a list)") from None
    except msgspec.DecodeError as exc:
        raise BadJSON(_json_reason(exc, len(raw))) from None
    except RecursionError:
        raise BadJSON(TOO_DEEP) from None
    if isinstance(top, list):
        if not top:
            raise NotATrace("trace has no events (empty array)")
        events_raw = memoryview(raw)[raw.index(b"["):raw.rindex(b"]") + 1]
        meta: dict[str, Any] = {}
    else:
        if top.traceEvents is NULL or bytes(memoryview(top.traceEvents)[:4]) == b"null":
            raise NotATrace("not a PyTorch profiler trace (no traceEvents list)")
        events_raw = memoryview(top.traceEvents)
        if events_raw[:1] != b"[":
            raise NotATrace("not a PyTorch profiler trace (traceEvents is not a list)")
        if bytes(events_raw[1:64]).strip().startswith(b"]"):
            raise NotATrace("trace has no events (empty traceEvents)")
        meta = {f: getattr(top, f) for f in TopLevel.__struct_fields__ if f != "traceEvents"}
    return Document(top=meta, events_raw=events_raw)


def _json_reason(exc: Exception, size: int) -> str:
    text = str(exc)
    if "truncated" in text.lower():
        return f"truncated JSON (file ends after {size} bytes)"
    return f"not valid JSON ({text})"


def _event_from(item: object) -> Event | None:
    """An Event from a generic decoded value, or None when it is not a usable event."""
    if not isinstance(item, dict):
        return None
    fields = {k: item[k] for k in ("ph", "cat", "name", "pid", "tid", "ts", "dur", "id") if k in item}
    try:
        event = _with_text_ts(msgspec.convert(fields, _TypedEvent, strict=False))
    except msgspec.ValidationError:
        return None
    if "args" in item:
        event.args = loose_args(item["args"])
    return event
