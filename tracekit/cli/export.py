"""`tracekit export TRACE -o annotated.json.gz`: the trace plus tracekit's results, for Perfetto."""

from __future__ import annotations

from pathlib import Path

import click

from tracekit.cli.common import echo_warning, quiet_option, say
from tracekit.terminal import visible


@click.command("export", short_help="Write TRACE with tracekit's results added, for Perfetto.")
@click.argument("trace", type=click.Path())
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="File to write; gzip when it ends in .gz (default: TRACE_STEM.annotated.json.gz beside the trace).",
)
@click.option("--force", is_flag=True, help="Replace the output file if it exists.")
@quiet_option
def command(trace: str, output: Path | None, force: bool, quiet: bool) -> None:
    """Write TRACE (one trace file, or a directory of rank files: one annotated file per rank, into
    -o or DIR.annotated/) with tracekit's results added as Chrome-trace events.

    The output keeps every original event (kernel events gain args.tracekit_class) and adds a
    "tracekit" process: the verdict of each step, counters for the GPU busy share and the launch
    queue depth, the top suggestion over the slowest steady step, and the critical path of each
    steady step the execution model replays (a "tracekit: critical path" track). Open it at
    https://ui.perfetto.dev or in chrome://tracing.
    """
    from tracekit.paths import export_path
    from tracekit.pipeline.export import export, export_ranks, rank_files

    if len(rank_files(trace)) > 1:  # a directory of ranks: one annotated file per rank, into a directory
        for written, added, note, warnings in export_ranks(trace, output, force=force):
            _report(written, written, added, note, warnings, quiet)
        return
    wanted = output if output is not None else export_path(trace)
    written, added, note, warnings = export(trace, wanted, force=force)
    _report(wanted, written, added, note, warnings, quiet)


def _report(wanted: Path, written: Path, added: int, note: str, warnings: tuple[str, ...], quiet: bool) -> None:
    from tracekit.units import fmt_bytes

    if not quiet:
        for warning in warnings:
            echo_warning(warning)
    if written != wanted:
        say(f"tracekit: {visible(wanted)} exists; wrote {visible(written)} instead (--force replaces it)", err=True)
    if not quiet:
        size = f"{fmt_bytes(written.stat().st_size)}, " if written.is_file() else ""
        say(f"wrote {visible(written)} ({size}{added:,} tracekit events); open it at https://ui.perfetto.dev")
        if note:
            say(f"  {note}")
