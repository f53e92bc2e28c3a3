"""The one input set of a command: every file it reads (trace files, a rank directory's files,
capture traces given or found in capture_traces/), each file once by its real path."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tracekit.trace import files


@dataclass(frozen=True)
class InputSet:
    """What a command reads: the trace files (one rank task each), the capture traces, and a note
    per path dropped as the same file as an earlier one."""

    traces: tuple[Path, ...]
    captures: tuple[Path, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def files(self) -> tuple[Path, ...]:
        """Every file read: the outputs must resolve to none of them (tracekit.output.check_target)."""
        return (*self.traces, *self.captures)


def _keys(path: Path) -> list[object]:
    """The real path and, for a file that exists, its (st_dev, st_ino): two spellings, a symlink
    or a hard link of one file share one of them."""
    keys: list[object] = [os.path.realpath(path)]
    try:
        st = os.stat(path)
        keys.append((st.st_dev, st.st_ino))
    except (OSError, ValueError):
        pass
    return keys


def unique_files(paths: Iterable[Path]) -> tuple[list[Path], list[str]]:
    """`paths` in order, each file once (`d/x`, `d/../d/x`, a symlink or hard link to it are one:
    the file keeps its own name where it is given, else its first spelling), and a one-line note
    per path left out."""
    groups: dict[int, list[Path]] = {}
    owner: dict[object, int] = {}
    for p in paths:
        keys = _keys(p)
        group = next((owner[k] for k in keys if k in owner), len(groups))
        if p not in groups.setdefault(group, []):
            groups[group].append(p)
        owner.update(dict.fromkeys(keys, group))
    kept: list[Path] = []
    notes: list[str] = []
    for members in groups.values():
        own = [p for p in members if not os.path.islink(p) and os.path.abspath(p) == os.path.realpath(p)]
        first = (own or members)[0]
        kept.append(first)
        notes += [f"{p}: the same file as {first}; read once" for p in members if p != first]
    return kept, notes


def found_captures(trace: Path) -> list[Path]:
    """The capture_traces/ files beside `trace` (or inside it, for a directory); none when the
    folder cannot be listed (loading reports what it can read)."""
    try:
        return files.capture_files(trace)
    except OSError:
        return []


def collect_inputs(items: str | os.PathLike | Sequence[str | os.PathLike],
                   captures: Sequence[str | os.PathLike] = ()) -> InputSet:
    """The input set behind trace paths (files, rank directories, globs) and --capture paths:
    TraceFormatError (one line) for a path that names nothing, before anything is read or written."""
    given = [items] if isinstance(items, (str, os.PathLike)) else list(items)
    traces, notes = unique_files(files.expand_inputs([str(i) for i in given]))
    named = [p for c in captures for p in files.trace_files(c)]
    folders = dict.fromkeys(t.parent for t in traces)  # each rank file's folder, listed once
    found = [p for folder in folders for p in found_captures(folder)]
    capture_set, _ = unique_files([*named, *found])
    irregular = [n for item in dict.fromkeys([*given, *captures, *(files.capture_folder(f) for f in folders)])
                 for n in files.irregular_entries(item)]
    return InputSet(tuple(traces), tuple(capture_set), tuple(dict.fromkeys([*notes, *irregular])))
