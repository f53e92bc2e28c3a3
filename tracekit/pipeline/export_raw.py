"""Byte-level copy of a trace's events for `tracekit export`: kernel events labelled, old labels replaced.

Events are copied as their original bytes; only a kernel event's `args` is touched (it gains
`tracekit_class`). Where a field sits is taken from msgspec's zero-copy `Raw` values, so keys are
found as the loader finds them: escaped spellings ("\\u0061rgs"), duplicates (the last one counts)
and nested look-alikes included.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

import msgspec
import numpy as np

from tracekit.trace.args import NULL
from tracekit.trace.reader import _next_cut as next_cut

PID = 0x7ACE0000  # tracekit's own process in the viewer (plus the rank)
PID_SPAN = 1 << 16  # pids PID .. PID + PID_SPAN - 1 are tracekit's (a real pid never gets this high)
_PID_DIGITS = b"20603"  # the decimal digits every such pid starts with (2060320768 .. 2060386303)
CLASS_KEY = "tracekit_class"
CHUNK_BYTES = 8 << 20  # original events decoded (as raw slices) a few MB at a time
KERNEL_CATS = (b'"kernel"', b'"Kernel"')  # a kernel event carries one of these as its category
_RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])
_RAW_DICT = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ENC = msgspec.json.Encoder()
# our own label as an earlier export wrote it, first in args: replaced in place
_OUR_LABEL = re.compile(rb'"tracekit_class":"[^"\\]*"\s*(,\s*)?')  # matched after the blanks (_SPACE)
_SPACE = re.compile(rb"\s*")


class _KernelArgs(msgspec.Struct):
    correlation: Any = None


class _EventView(msgspec.Struct):
    """The fields of an event that say whose it is, whether it is a kernel and which one; `args` as
    its raw bytes (a view into the event: its offset is where the loader's args value lies)."""

    cat: Any = None
    name: Any = None
    pid: Any = None
    args: msgspec.Raw = NULL


_VIEW = msgspec.json.Decoder(_EventView)
_ARGS = msgspec.json.Decoder(_KernelArgs)


def offset_in(buf: bytes | bytearray | memoryview, part: bytes | bytearray | memoryview | msgspec.Raw) -> int:
    """Where `part` (a zero-copy view into `buf`) starts in `buf`; -1 when it lies elsewhere."""
    if not len(part):
        return -1
    base = np.frombuffer(buf, dtype=np.uint8).ctypes.data
    at = np.frombuffer(part, dtype=np.uint8).ctypes.data - base
    return at if 0 <= at <= len(buf) - len(part) else -1


def is_ours(raw: bytes) -> bool:
    """An event an earlier export added (tracekit's process): dropped, the new ones replace it."""
    if _PID_DIGITS not in raw:
        return False
    try:
        pid = _VIEW.decode(raw).pid
    except (msgspec.DecodeError, msgspec.ValidationError):
        return False
    return isinstance(pid, int) and PID <= pid < PID + PID_SPAN


def annotated(raw: bytes, by_corr: Mapping[int, str], by_name: Mapping[str, str], default: str) -> bytes:
    """A kernel event with args.tracekit_class set (exactly one args, one label; every other field
    keeps its exact text); any other event unchanged."""
    if not any(cat in raw for cat in KERNEL_CATS):
        return raw
    try:
        view = _VIEW.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return raw
    if str(view.cat or "").lower() != "kernel":
        return raw
    args = bytes(view.args) if view.args is not NULL else b"null"
    if args[:1] not in (b"{", b"n"):
        return raw  # args of another type: the loader reads none, so no label either
    corr = _correlation(args)
    label = by_corr.get(corr) if isinstance(corr, int) else None
    field = b'"tracekit_class":' + _ENC.encode(label or by_name.get(str(view.name or ""), default))
    fast = b"\\u" not in raw and raw.count(b'"args"') <= 1 and raw.count(CLASS_KEY.encode()) <= 1
    if fast:
        spliced = _splice(raw, view.args, field)
        if spliced is not None:
            return spliced
    return _rebuilt(raw, field)


def _correlation(args: bytes) -> object:
    if args[:1] != b"{":
        return None
    try:
        return _ARGS.decode(args).correlation
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def _splice(raw: bytes, args: msgspec.Raw, field: bytes) -> bytes | None:
    """`field` spliced first into the event's one args object (or its null replaced, or an args
    added); None when the args value cannot be placed (then _rebuilt does it)."""
    if args is NULL:
        brace = raw.index(b"{") + 1
        return raw[:brace] + b'"args":{' + field + b"}," + raw[brace:]
    at = offset_in(raw, args)
    if at < 0:
        return None
    if raw[at:at + 1] == b"n":  # "args": null
        return raw[:at] + b"{" + field + b"}" + raw[at + 4:]
    blanks = _SPACE.match(raw, at + 1)  # the label goes after the brace and its blanks, as before
    inner = blanks.end() if blanks is not None else at + 1
    ours = _OUR_LABEL.match(raw, inner)
    if ours is not None:
        inner_end = ours.end()
    elif CLASS_KEY.encode() in bytes(args):
        return None  # a label somewhere else in args: rebuild
    else:
        inner_end = inner
    rest = raw[inner_end:]
    sep = b"" if rest.lstrip()[:1] == b"}" else b","
    return raw[:inner] + field + sep + rest


def _rebuilt(raw: bytes, field: bytes) -> bytes:
    """The event written again from its members (each value's exact bytes; one member per key, the
    last of duplicates, as the loader reads it) with args holding the label first and no other."""
    try:
        members = _RAW_DICT.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return raw
    old = members.get("args")
    inner: dict[str, msgspec.Raw] = {}
    if old is not None and bytes(old)[:1] == b"{":
        try:
            inner = _RAW_DICT.decode(old)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return raw
    inner.pop(CLASS_KEY, None)
    args = b"{" + b",".join([field, *(_ENC.encode(k) + b":" + bytes(v) for k, v in inner.items())]) + b"}"
    if "args" not in members:
        members = {"args": msgspec.Raw(args), **members}
    else:
        members["args"] = msgspec.Raw(args)
    return b"{" + b",".join(_ENC.encode(k) + b":" + bytes(v) for k, v in members.items()) + b"}"


class BadEvents(ValueError):
    """The events array could not be split into events (the message says why)."""


def raw_chunks(events: memoryview) -> Iterator[list[msgspec.Raw]]:
    """The events array a few MB at a time, each event as its raw JSON bytes."""
    start, end = 1, len(events) - 1  # inside the [ ]
    while start < end:
        cut = next_cut(events, start + CHUNK_BYTES, end)
        while True:
            try:
                items = _RAW_LIST.decode(b"[" + bytes(events[start:cut]) + b"]")
                break
            except msgspec.DecodeError:
                if cut >= end:
                    raise BadEvents("not valid JSON inside traceEvents") from None
                # the cut fell inside an event: widen, doubling (as the loader does), so that a long
                # event or a string full of "},{" costs linear time, not one decode per false cut
                cut = next_cut(events, max(cut + 1, start + 2 * (cut - start)), end)
        yield items
        start = cut + 1
