"""The ``probe`` command line: a thin click layer over the public library functions.

The analysis commands are built from the registry (:mod:`probe.app.registry`, one
generic runner in :mod:`.runner`); the few commands that are not analyses (models,
capture, heatmap, report, train, evaluate, and those listed in ``COMMAND_MODULES``) live
in their own modules. Heavy imports happen inside the command bodies, so ``probe --help``
imports neither torch nor transformers.

Errors (one boundary, :class:`ProbeGroup`, kinds in :mod:`probe.errors`): bad input
(``InputError`` from the toolkit's validators, ``NotApplicable``, a missing file; click's
usage errors) prints one ``Error: …`` line and exits 1 (click's usage errors: 2);
anything else — a plain ``ValueError`` included, from numpy, pandas or the toolkit's own
code — is a bug: one line and
"rerun with --verbose for the traceback", exit 3; ``--verbose`` shows the traceback.
"""

from __future__ import annotations

from typing import Any

import importlib
import os
import sys
import traceback

import click

from probe.errors import InputError

from .common import UNEXPECTED_EXIT

# modules under probe.app.cli whose ``COMMANDS`` are added to the root group
COMMAND_MODULES = ["core", "report", "zoo", "store", "compare"]


class ProbeGroup(click.Group):
    """The root group: the CLI's one error boundary."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException, SystemExit):
            raise
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)
        except Exception as exc:
            from probe.errors import is_input_error

            if is_input_error(exc):  # InputError / NotApplicable / a file: one line, exit 1
                if ctx.meta.get("probe.verbose"):
                    traceback.print_exc()
                raise click.ClickException(str(exc) or type(exc).__name__) from None
            # a bug, not bad input
            if ctx.meta.get("probe.verbose"):
                traceback.print_exc()
                click.echo(f"Error: unexpected {type(exc).__name__}: {exc}", err=True)
            else:
                click.echo(
                    f"Error: unexpected {type(exc).__name__}: {exc} (rerun with --verbose for the traceback)", err=True
                )
            sys.exit(UNEXPECTED_EXIT)


@click.group(cls=ProbeGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="attention-probe")
def main() -> None:
    """Attention interpretability toolkit: capture, analyse and report attention heads."""
    # the command line speaks for itself: no transformers progress bars or advisories
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if "transformers" in sys.modules:  # already imported (notebooks, tests): tell it directly
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()


def _add_commands() -> None:
    for name in COMMAND_MODULES:
        try:
            mod = importlib.import_module(f"probe.app.cli.{name}")
        except ModuleNotFoundError as exc:  # only a command module absent from this checkout
            if exc.name != f"probe.app.cli.{name}":
                raise
            continue
        for cmd in getattr(mod, "COMMANDS", []):
            main.add_command(cmd)
    from probe.app.registry import registered

    from .runner import build_command

    for analysis in registered():
        if analysis.command_name and analysis.command_name not in main.commands:
            main.add_command(build_command(analysis), analysis.command_name)


_add_commands()


def command(name: str) -> click.Command:
    """The click command ``probe <name>`` (for tests and embedding: ``CliRunner().invoke(command("ablate"), …)``).

    Raises:
        ValueError: no such command.
    """
    if name not in main.commands:
        raise InputError(f"no command {name!r}; known: {', '.join(sorted(main.commands))}")
    return main.commands[name]
