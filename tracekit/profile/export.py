"""Write the recorded trace: Kineto JSON plus a top-level "tracekit" object, gzipped, atomically."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Protocol, cast

import msgspec

from tracekit.errors import OutputError, ProfileError
from tracekit.trace.files import trace_stem
from tracekit.trace.tables import TRACEKIT_KEY

META_KEY = TRACEKIT_KEY
STEP_PREFIX = "ProfilerStep#"
_CHUNK = 1 << 20
_TAIL = 4096
_TRACE_NAME = re.compile(rb'"traceName"\s*:\s*"(?:[^"\\]|\\.)*"')


def check_output(path: Path, force: bool) -> None:
    """Fail early (OutputError) if `path` exists without force, or its folder cannot take it."""
    if path.is_dir():
        raise OutputError(f"{path} is a directory")
    if path.exists() and not force:
        raise OutputError(f"{path} already exists (use --force to overwrite)")
    if not path.parent.is_dir():
        raise OutputError(f"{path.parent} does not exist")
    if not os.access(path.parent, os.W_OK):
        raise OutputError(f"{path.parent} is not writable")


def report_path_for(trace_path: Path) -> Path:
    """Where the HTML report of a trace goes: NAME.trace.json.gz -> NAME.report.html beside it, the
    name `tracekit report` picks too."""
    return trace_path.with_name(trace_stem(trace_path.name) + ".report.html")


class ChromeTraceExport(Protocol):
    """What write_trace needs of a torch.profiler.profile: its Chrome-trace export."""

    def export_chrome_trace(self, path: str) -> None: ...


def write_trace(
    prof: ChromeTraceExport, path: Path, meta: dict[str, Any], *, drop_steps: frozenset[int] = frozenset(), force: bool = True
) -> Path:
    """Export `prof` to `path` (.gz => gzip) with `meta` as the top-level "tracekit" object; return
    the path written.

    `drop_steps` names the ProfilerStep#N annotations to remove: #0 when it spans the whole run (the
    script marked no steps), or the pieces of a first step that several optimizer steps cut before
    the script's own marks took over (Session.dropped_steps). The file appears complete or not at all: temp files are created with O_EXCL
    beside it (tracekit.output, the package's one atomic writer), then published; without
    `force` a file that appeared meanwhile is kept and the trace goes to a numbered name.
    """
    from tracekit.output import make_temp, publish, signals_deferred

    made: list[Path] = []
    try:
        with signals_deferred():  # each temp file is created and registered for cleanup at once
            raw = make_temp(path, ".raw.json")
            made.append(raw)
            tmp = make_temp(path)
            made.append(tmp)
        try:
            prof.export_chrome_trace(str(raw))
        except OSError:
            raise
        except Exception as exc:
            raise ProfileError(
                f"{path}: torch.profiler could not export the trace: {exc}"
            ) from None
        with _open_out(tmp, gz=path.name.endswith(".gz")) as out:
            if drop_steps:
                _rewrite(raw, out, meta, path.name, {f"{STEP_PREFIX}{n}" for n in drop_steps})
            else:
                _splice(raw, out, meta, path.name)
        path = publish(tmp, path, force=force)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write the trace: {exc.strerror or exc}") from None
    finally:
        for leftover in made:
            with contextlib.suppress(OSError):
                leftover.unlink()
    return path


@contextlib.contextmanager
def _open_out(path: Path, *, gz: bool) -> Iterator[IO[bytes]]:
    with path.open("wb") as raw_out:
        if not gz:
            yield raw_out
            return
        # mtime=0 and no file name: the same trace gives the same bytes
        with gzip.GzipFile(
            filename="", mode="wb", fileobj=raw_out, compresslevel=6, mtime=0
        ) as out:
            yield cast(IO[bytes], out)  # GzipFile writes bytes; typeshed does not call it IO[bytes]


def _meta_bytes(meta: dict[str, Any]) -> bytes:
    return json.dumps(meta, sort_keys=True, default=str).encode()


def _splice(raw: Path, out: IO[bytes], meta: dict[str, Any], name: str) -> None:
    """Stream the Kineto JSON, inserting the metadata after its opening brace (no full parse)."""
    size = raw.stat().st_size
    with raw.open("rb") as src:
        head = src.read(min(_CHUNK, size))
        start = head.find(b"{")
        if start < 0 or head[:start].strip():
            raise ProfileError(f"{raw}: torch.profiler wrote something that is not a JSON object")
        out.write(head[: start + 1] + b'\n  "' + META_KEY.encode() + b'": ' + _meta_bytes(meta))
        rest = head[start + 1 :]
        if rest.strip()[:1] not in (b"}", b""):
            out.write(b",")
        # Copy the body, keeping the last few KiB back to fix "traceName" (it names the temp file).
        body_end = max(size - _TAIL, len(head))
        if len(head) < body_end:
            out.write(rest)
            remaining = body_end - len(head)
            while remaining > 0:
                chunk = src.read(min(_CHUNK, remaining))
                if not chunk:
                    break
                out.write(chunk)
                remaining -= len(chunk)
            rest = b""
        tail = rest + src.read()
        out.write(_TRACE_NAME.sub(b'"traceName": ' + json.dumps(name).encode(), tail, count=1))


def _rewrite(raw: Path, out: IO[bytes], meta: dict[str, Any], name: str, dropped: set[str]) -> None:
    """Parse, drop the step annotations named in `dropped`, add the metadata, write (rare)."""
    data = msgspec.json.decode(raw.read_bytes())
    encode = msgspec.json.encode
    if not isinstance(data, dict):
        raise ProfileError(f"{raw}: torch.profiler wrote something that is not a JSON object")
    events = data.get("traceEvents")
    if isinstance(events, list):
        data["traceEvents"] = [
            e
            for e in events
            if not (
                isinstance(e, dict)
                and e.get("name") in dropped
                and e.get("cat") in ("user_annotation", "gpu_user_annotation")
            )
        ]
    if "traceName" in data:
        data["traceName"] = name
    out.write(encode({META_KEY: meta, **data}))
