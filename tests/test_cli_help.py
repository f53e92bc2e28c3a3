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


HEAVY = ("pandas", "numpy", "jinja2", "msgspec")  # what the analysis needs; a start-up needs none of it


def _heavy_modules_after(args: list[str]) -> tuple[int, list[str], str]:
    code = ("import sys\nfrom tracekit.cli import main\ncode = main(sys.argv[1:])\n"
            f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))\nsys.exit(code)")
    res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    return res.returncode, res.stdout.strip().splitlines()[-1:], res.stderr


def test_help_version_and_a_missing_trace_import_no_analysis(tmp_path):
    """The start-up paths that do no analysis answer without importing pandas or numpy."""
    for args in (["--help"], ["--version"], ["analyze", "--help"], ["report", "--help"], ["info", "--help"]):
        code, heavy, err = _heavy_modules_after(args)
        assert (code, heavy) == (0, ["[]"]), (args, heavy, err)
    missing = str(tmp_path / "no_such.trace.json.gz")
    for command in ("analyze", "report", "info"):
        code, heavy, err = _heavy_modules_after([command, missing])
        assert (code, heavy) == (2, ["[]"]), (command, heavy, err)
        assert err == f"tracekit: error: {missing}: no such file or directory\n"
