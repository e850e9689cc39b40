"""The ``landscape`` command line: a root click group whose subcommands are imported only when used.

Each subcommand lives in its own module ``landscape.cli.<name>`` exposing ``command`` (a click command)
that parses options and calls one library function. torch is never imported by ``landscape --help``.
"""

from __future__ import annotations

import importlib
import traceback
import warnings
from collections.abc import Callable

import click

from landscape.version import __version__

#: the commands that are not analyses: name -> (module, one-line help shown by ``landscape --help``)
TOOLS: dict[str, tuple[str, str]] = {
    "demo": ("landscape.cli.demo", "The main job: train three mini models on digits and analyse them."),
    "models": ("landscape.cli.models", "List the model zoo with parameter counts."),
    "train": ("landscape.cli.train", "Train a zoo model and save a checkpoint."),
    "convert": ("landscape.cli.convert", "Initialise a vit_rpe_* checkpoint from a trained convvit_* (Paper B)."),
    "plot": ("landscape.cli.plot", "Draw the figures of result files."),
    "info": ("landscape.cli.info", "Print the kind, summary, provenance and options of result files (--json)."),
    "report": ("landscape.cli.report", "Write one self-contained HTML page of every result file in a folder."),
}


def _commands() -> dict[str, tuple[str, str]]:
    """Every command: the tools, and one per registered analysis (``landscape.cli.<command>``, its description)."""
    from landscape.analyses.registry import analyses

    found = {a.command: (f"landscape.cli.{a.command}", a.description) for a in analyses() if a.command}
    return {**TOOLS, **found}


#: subcommand name -> (module, one-line help shown by ``landscape --help``)
COMMANDS: dict[str, tuple[str, str]] = _commands()


class LazyGroup(click.Group):
    """A click group that imports a subcommand's module only when that subcommand runs."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every registered subcommand name, sorted."""
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """Import ``landscape.cli.<name>`` and return its ``command``."""
        if cmd_name not in COMMANDS:
            return None
        return importlib.import_module(COMMANDS[cmd_name][0]).command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """List the subcommands with their one-line help without importing them."""
        with formatter.section("Commands"):
            formatter.write_dl([(name, COMMANDS[name][1]) for name in self.list_commands(ctx)])

    def invoke(self, ctx: click.Context) -> object:
        """Run the subcommand; a :class:`LandscapeError` or a bad option value becomes one line and exit status 2.

        A :class:`~landscape.errors.LandscapeWarning` is printed as one line ``Warning: ...``. With ``--traceback``
        (or ``LANDSCAPE_TRACEBACK=1``) the full trace of a :class:`LandscapeError` is printed before its line,
        with the trace of the exception it stands for (that of the user's code, for a ``ForeignError``).
        """
        from landscape.cli.terminal import safe_output

        with safe_output():
            return self._invoke(ctx)

    def _invoke(self, ctx: click.Context) -> object:
        """:meth:`invoke` inside :func:`~landscape.cli.terminal.safe_output`."""
        from landscape.errors import ForeignError, LandscapeError, LandscapeWarning, one_line

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("always", LandscapeWarning)
                warnings.showwarning = _one_line_warnings(warnings.showwarning)
                return super().invoke(ctx)
        except Exception as exc:
            if isinstance(exc, click.UsageError) and exc.ctx is not None and exc.ctx is not ctx:
                where = exc.ctx.command_path
                click.echo(f"Error: {one_line(exc.format_message())} ('{where} --help' lists the options)", err=True)
                ctx.exit(2)

            if isinstance(exc, LandscapeError):
                if ctx.params.get("traceback"):
                    traceback.print_exception(exc)
                elif isinstance(exc, ForeignError):
                    exc = f"{exc} ({TRACEBACK_HINT})"
                click.echo(f"Error: {one_line(str(exc))}", err=True)
                ctx.exit(2)
            if isinstance(exc, BrokenPipeError):  # the reader went away (`landscape models | head`): nothing to say
                ctx.exit(0)
            if isinstance(exc, OSError):  # an operating-system failure the library did not name: still one line
                from landscape.store.files import os_error

                click.echo(f"Error: {one_line(str(os_error(exc, exc.filename or 'a file', 'use')))}", err=True)
                ctx.exit(2)
            raise


def _one_line_warnings(show: Callable[..., None]) -> Callable[..., None]:
    """``warnings.showwarning`` that prints a :class:`~landscape.errors.LandscapeWarning` as ``Warning: ...``."""
    from landscape.errors import LandscapeWarning, one_line

    def shown(message: Warning | str, category: type[Warning], *args: object, **kwargs: object) -> None:
        if issubclass(category, LandscapeWarning):
            click.echo(f"Warning: {one_line(str(message))}", err=True)
        else:
            show(message, category, *args, **kwargs)

    return shown


#: how the one line of an error raised by the user's code (or a library's) says where to see its trace
TRACEBACK_HINT = "landscape --traceback ... shows its full trace"


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(version=__version__, prog_name="landscape", message="%(prog)s %(version)s")
@click.option(
    "--traceback",
    is_flag=True,
    envvar="LANDSCAPE_TRACEBACK",
    help="Print the full trace of an error before its one line (also: LANDSCAPE_TRACEBACK=1).",
)
def cli(traceback: bool) -> None:
    """Loss surfaces, Hessian spectra and Fourier spectra of feature maps of vision networks."""
    from landscape.runtime import clock
    from landscape.runtime.memory import keep_for_command

    clock.start()  # the command's set-up (imports, model, data, checks) counts in its time and its estimate
    keep_for_command()  # freed memory stays in the process for the next pass (LANDSCAPE_KEEP_MEMORY=0: off)


def main() -> None:
    """Console-script entry point."""
    cli()
