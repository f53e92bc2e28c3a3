"""`tracekit --help` lists every command with a one-line summary, without importing the commands."""

from __future__ import annotations

import importlib
import subprocess
import sys

from tracekit import cli


def test_every_command_has_a_summary_matching_its_own():
    assert set(cli.SHORT_HELP) == set(cli.COMMANDS)
    for name, module in cli.COMMANDS.items():
        command = importlib.import_module(f"tracekit.cli.{module}").command
        if command.short_help:  # the summary --help shows is the command's own
            assert cli.SHORT_HELP[name] == command.short_help, name


def test_help_shows_every_summary_untruncated():
    out = subprocess.run([sys.executable, "-m", "tracekit", "--help"], capture_output=True, text=True,
                         check=True).stdout
    flat = " ".join(out.split())
    for summary in cli.SHORT_HELP.values():
        assert summary in flat
