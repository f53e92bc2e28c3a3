"""`tracekit profile --try KNOB,...`: check the outputs, run the table, print it, write BASE.try.json."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from tracekit.errors import OutputError, ProfileError
from tracekit.profile.runner import Target
from tracekit.profile.tryrun import TryResult
from tracekit.terminal import visible, visible_lines


def run_try(target: Target, knobs_text: str, *, output: Path | None, force: bool, warmup: int,
            active: int | None, timeout: float | None, quiet: bool) -> None:
    """Run `--try`; exit 1 when the baseline run failed, 0 otherwise (knob failures are in the table)."""
    from tracekit.profile.knobs import parse_knobs
    from tracekit.profile.record import default_output
    from tracekit.profile.session import require_torch
    from tracekit.profile.tryrun import output_paths, render_text, try_knobs
    from tracekit.trace.files import PROFILE_SUFFIX

    try:
        knobs = parse_knobs(knobs_text)
    except ValueError as exc:
        raise ProfileError(str(exc)) from None
    require_torch()
    target.check()
    base = Path(output).expanduser().absolute() if output else default_output(target.name, unique=False)
    paths = output_paths(base, knobs)
    name = base.name[: -len(PROFILE_SUFFIX)] if base.name.endswith(PROFILE_SUFFIX) else base.stem
    table_path = base.with_name(f"{name}.try.json")
    if not force:
        existing = [p for p in (*paths.values(), table_path) if p.exists()]
        if existing:
            raise OutputError(f"{existing[0]} exists (use --force to overwrite)")
    if not base.parent.is_dir():
        raise OutputError(f"{base.parent}: no such directory")

    def say(message: str) -> None:
        if not quiet:
            click.echo(visible_lines(f"tracekit: --try {message}"), err=True)

    done: list[TryResult] = []

    def save(result: TryResult) -> None:
        done[:] = [result]
        tmp = table_path.with_name(table_path.name + ".tmp")
        tmp.write_text(json.dumps(result.to_dict(), indent=2, allow_nan=False), encoding="utf-8")
        os.replace(tmp, table_path)

    try:
        result = try_knobs(target, knobs, base, warmup=warmup, active=active, timeout=timeout, say=say,
                           on_row=save)
    except KeyboardInterrupt:  # stopped (Ctrl-C, a time limit): show the runs that finished
        if done:
            click.echo(visible_lines(render_text(done[0])))
        raise
    click.echo(visible_lines(render_text(result)))
    say(f"table written to {visible(table_path)}")
    if not result.baseline_ok:
        click.echo(visible_lines(f"tracekit: error: the baseline run failed: {result.rows[0].reason}"), err=True)
        sys.exit(1)
