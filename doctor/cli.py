"""The `doctor` command line. Exit codes, for every command: 0 fine, 1 problems found,
2 doctor could not do its job. No path ends in a traceback."""
from __future__ import annotations

import importlib
import sys

import click

from doctor import __version__

# name -> module under doctor.commands; each module owns its command.
COMMANDS = {
    "check": "check",
    "explain": "explain",
    "rules": "explain",
    "train": "train",
    "plan": "plan",
    "report": "report",
}


class DoctorError(click.ClickException):
    """A clear one-line error: exit 2."""

    exit_code = 2

    def show(self, file=None) -> None:
        click.echo(f"doctor: {self.format_message()}", err=True)


class LazyGroup(click.Group):
    """Import a subcommand's module only when it runs: `doctor check` never pays for `train`."""

    def list_commands(self, ctx):
        return list(COMMANDS)

    def get_command(self, ctx, name):
        mod = COMMANDS.get(name)
        if mod is None:
            return None
        try:
            module = importlib.import_module(f"doctor.commands.{mod}")
        except ModuleNotFoundError as exc:
            if exc.name != f"doctor.commands.{mod}":
                raise
            return None  # a command not built yet
        return getattr(module, "commands", {}).get(name) or getattr(module, "command")


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="doctor")
def cli() -> None:
    """Find why a verl GRPO job will fail (check), why it failed (explain), and run it until it
    does not (train --auto-tune)."""


def main(argv: list[str] | None = None) -> None:
    try:
        rc = cli.main(args=argv, prog_name="doctor", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("doctor: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code if isinstance(exc, DoctorError) else 2)
    except KeyboardInterrupt:
        click.echo("doctor: interrupted", err=True)
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except Exception as exc:  # never a traceback: one line, exit 2
        click.echo(f"doctor: internal error: {type(exc).__name__}: {exc}", err=True)
        sys.exit(2)
    sys.exit(rc if isinstance(rc, int) else 0)
