"""The click group of `tracekit`: subcommands are imported only when they run (fast --help/--version)."""

from __future__ import annotations

import importlib
from types import ModuleType

import click

from tracekit._version import __version__
from tracekit.cli import COMMANDS, SHORT_HELP


class LazyGroup(click.Group):
    """A click group that imports a subcommand's module only when that command runs; `--help`
    lists the commands from SHORT_HELP without importing them."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = self._module(cmd_name)
        return None if module is None else module.command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, SHORT_HELP.get(name, "")) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    @staticmethod
    def _module(name: str) -> ModuleType | None:
        if name not in COMMANDS:
            return None
        try:
            return importlib.import_module(f"tracekit.cli.{COMMANDS[name]}")
        except ModuleNotFoundError as exc:  # a command not built yet in this checkout
            if exc.name == f"tracekit.cli.{COMMANDS[name]}":
                return None
            raise


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tracekit")
def cli() -> None:
    """Find out why PyTorch / Triton code is slow on a GPU, and what to change."""
