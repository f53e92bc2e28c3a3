"""Names of the files tracekit reads and writes beside a trace: the trace suffixes, and one rule per output."""

from __future__ import annotations

from pathlib import Path

# `tracekit profile` writes NAME + PROFILE_SUFFIX; a trace's stem (for its outputs' names) is its
# name without the first of NAME_SUFFIXES it ends with (longest first).
PROFILE_SUFFIX = ".trace.json.gz"
NAME_SUFFIXES = (".pt.trace.json.gz", ".pt.trace.json", PROFILE_SUFFIX, ".trace.json", ".json.gz",
                 ".json", ".gz")


def trace_stem(name: str) -> str:
    """A trace file's name without its trace suffix: 'train.pt.trace.json.gz' -> 'train'
    (a name that is only a suffix, or has none, stays whole)."""
    for suffix in NAME_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def report_path(trace_path: str | Path) -> Path:
    """Where the HTML report of a trace goes by default (`profile` and `report` alike): STEM.report.html beside it."""
    p = Path(trace_path)
    return p.with_name(f"{trace_stem(p.name)}.report.html")


def export_path(trace_path: str | Path) -> Path:
    """Where `tracekit export` writes by default: STEM.annotated.json.gz beside the trace."""
    p = Path(trace_path)
    return p.with_name(f"{trace_stem(p.name)}.annotated.json.gz")
