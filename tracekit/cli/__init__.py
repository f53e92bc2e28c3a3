"""The `tracekit` command: a click group whose subcommands live one per module, loaded lazily."""

from __future__ import annotations

import importlib
import sys

import click

from tracekit import __version__
from tracekit.errors import TracekitError

# command name -> module under tracekit.cli holding a click command named `command`
COMMANDS: dict[str, str] = {
    "info": "info",
    "analyze": "analyze",
    "report": "report",
    "profile": "profile",
    "export": "export",
}


class LazyGroup(click.Group):
    """A click group that imports a subcommand's module only when that command runs."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(name for name in COMMANDS if self._module(name) is not None)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = self._module(cmd_name)
        return None if module is None else module.command

    @staticmethod
    def _module(name: str):
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


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI, turning tracekit errors into one line on stderr and exit code 2."""
    try:
        rv = cli.main(args=argv, prog_name="tracekit", standalone_mode=False)
    except TracekitError as exc:
        click.echo(f"tracekit: error: {exc}", err=True)
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("tracekit: interrupted", err=True)
        return 130
    except KeyboardInterrupt:
        click.echo("tracekit: interrupted", err=True)
        return 130
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return 2
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
