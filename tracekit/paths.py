"""Names of the files tracekit writes beside a trace: one list of trace suffixes, one rule for each output."""

from __future__ import annotations

from pathlib import Path

# longest first: 'run.pt.trace.json.gz' loses '.pt.trace.json.gz', not only '.gz'
TRACE_SUFFIXES = (".pt.trace.json.gz", ".pt.trace.json", ".trace.json.gz", ".trace.json", ".json.gz", ".json", ".gz")


def trace_stem(path: str | Path) -> str:
    """'train' for 'train.trace.json.gz' or 'train.pt.trace.json'; a directory's own name."""
    name = Path(path).name
    for suffix in TRACE_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def report_path(trace_path: str | Path) -> Path:
    """Where the HTML report of a trace goes by default (`profile` and `report` alike): STEM.report.html beside it."""
    p = Path(trace_path)
    return p.with_name(f"{trace_stem(p)}.report.html")


def export_path(trace_path: str | Path) -> Path:
    """Where `tracekit export` writes by default: STEM.annotated.json.gz beside the trace."""
    p = Path(trace_path)
    return p.with_name(f"{trace_stem(p)}.annotated.json.gz")
