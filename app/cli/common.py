"""Options shared by several commands, defined once; the one head notation; the error
boundary and progress settings of the CLI.

Heads are printed ``L2H8`` (layer 2, head 8) and accepted as ``L2H8``, ``2.8``, ``2:8``
or ``2-8`` (:func:`parse_heads`); tables carry ``layer`` and ``head`` columns.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from typing import Callable, Optional, Sequence, TextIO

import click

from probe.errors import InputError

from .numbers import integer

model_option = click.option(
    "--model",
    "-m",
    default="minilm",
    show_default=True,
    help="minilm | smollm2 | hf:<id or path> | gguf:<file> | zoo:<task> | a model directory",
)
device_option = click.option("--device", default="cpu", show_default=True, help="cpu or cuda[:N]")
dtype_option = click.option(
    "--dtype",
    default=None,
    type=click.Choice(["float32", "float16", "bfloat16"]),
    help="forward dtype (maps are stored as float32 or float16)",
)
limit_option = click.option("--limit", type=integer(min=1), default=None, help="first N examples only")
force_option = click.option("--force", is_flag=True, help="replace a non-empty --out")


def _remember_verbose(ctx, param, value):
    if value:
        ctx.find_root().meta["probe.verbose"] = True
    return value


def _remember_quiet(ctx, param, value):
    if value:
        ctx.find_root().meta["probe.quiet"] = True
        os.environ["TQDM_DISABLE"] = "1"
    return value


out_dir_option = click.option("--out", "-o", required=True, type=click.Path(), help="output directory")
verbose_option = click.option(
    "-v",
    "--verbose",
    is_flag=True,
    callback=_remember_verbose,
    expose_value=True,
    help="log details; show the traceback of an unexpected error",
)
quiet_option = click.option(
    "-q", "--quiet", is_flag=True, callback=_remember_quiet, help="no progress and no notes (errors still print)"
)


def input_options(fn: Callable) -> Callable:
    """--text (repeatable), --file and --conllu: exactly one, or none for a zoo model."""
    fn = click.option(
        "--conllu", type=click.Path(dir_okay=False), default=None, help="CoNLL-U treebank (words taken from it)"
    )(fn)
    fn = click.option(
        "--file", "file_", type=click.Path(dir_okay=False), default=None, help="UTF-8 text file, one example per line"
    )(fn)
    fn = click.option("--text", "-t", multiple=True, help="input sentence (repeatable)")(fn)
    return skip_invalid_option(fn)


def skip_invalid_option(fn: Callable) -> Callable:
    """--skip-invalid: skip CoNLL-U sentences that break UD's rules instead of refusing the
    file; each is listed in ``skipped.csv`` in the --out directory (beside a --out file) and
    their number is said on stderr."""

    @functools.wraps(fn)
    def wrapper(*args, skip_invalid=False, **kwargs):
        from pathlib import Path

        from probe.inputs.readers import skipping_invalid, write_skipped_csv

        with skipping_invalid(skip_invalid) as invalid:
            result = fn(*args, **kwargs)
        if invalid:
            out = kwargs.get("out")
            where = ""
            if out:
                out = Path(out)
                path = out / "skipped.csv" if out.is_dir() else out.with_name(out.stem + "-skipped.csv")
                if path.parent.is_dir():
                    where = f"; listed in {write_skipped_csv(invalid, path)}"
            click.echo(f"skipped {len(invalid)} invalid CoNLL-U sentence(s), the first: {invalid[0]}{where}", err=True)
        return result

    return click.option(
        "--skip-invalid",
        is_flag=True,
        help="skip CoNLL-U sentences that break UD's rules (listed in skipped.csv) instead of refusing the file",
    )(wrapper)


# ---- the one head notation (parsers in probe.app.registry.notation) -------------------
def parse_heads(value: Optional[str], name: str = "--heads") -> Optional[list]:
    """Heads in any accepted notation (``L2H8``, ``2.8``, ``2:8``, ``2-8``) -> ``[(l, h), …]``.

    Raises:
        click.BadParameter: naming the option.
    """
    from probe.app.registry.notation import parse_heads as parse

    try:
        return parse(value, name)
    except InputError as exc:
        raise click.BadParameter(str(exc).removeprefix(f"{name}: "), param_hint=name) from None


def parse_int_list(value: Optional[str], name: str) -> Optional[list]:
    """'0,2,5' or '0-3' → [0, 2, 5] / [0, 1, 2, 3]; ``None`` stays ``None``."""
    from probe.app.registry.notation import parse_int_list as parse

    try:
        return parse(value, name)
    except InputError as exc:
        raise click.BadParameter(str(exc).removeprefix(f"{name}: "), param_hint=name) from None


def parse_head(value: str, name: str = "--head") -> tuple:
    """One head in any accepted notation -> ``(layer, head)``."""
    heads = parse_heads(value, name)
    if not heads or len(heads) != 1:
        raise click.BadParameter(f"give one head, like L2H8; got {value!r}", param_hint=name)
    return heads[0]


def parse_head_group(value: str, name: str = "--group") -> list:
    """A group of heads in any accepted notation (see :func:`parse_heads`)."""
    heads = parse_heads(value, name)
    if not heads:
        raise click.BadParameter("give at least one head, like L1H0,L1H3", param_hint=name)
    return heads


# ---- errors -------------------------------------------------------------------------------
#: exit status of an unexpected error (a bug, not bad input); bad input exits with 1
UNEXPECTED_EXIT = 3


def user_errors(fn: Callable) -> Callable:
    """Kept for command modules written before the boundary moved to the root group:
    bad input (:func:`probe.errors.is_input_error`) becomes one ``Error:`` line and exit
    status 1; anything else goes on to the root group (exit 3)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from probe.errors import is_input_error

        try:
            return fn(*args, **kwargs)
        except click.ClickException:
            raise
        except Exception as exc:
            if not is_input_error(exc):
                raise
            raise click.ClickException(str(exc)) from None

    return wrapper


def setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )


class _LineStream:
    """stderr for logs: a progress bar's carriage returns become newlines, so each update
    is one line instead of a redrawn bar."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(text.replace("\r", "\n") if "\r" in text else text)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def configure_progress() -> None:
    """tqdm bars when stderr is a terminal; otherwise (logs, CI) one line per update, at
    most one every 30 s per bar; none under ``--quiet`` (``TQDM_DISABLE``). Call before
    tqdm is imported (tqdm reads its ``TQDM_*`` settings at import)."""
    if not sys.stderr.isatty():
        os.environ.setdefault("TQDM_MININTERVAL", "30")
        if not isinstance(sys.stderr, _LineStream):
            sys.stderr = _LineStream(sys.stderr)


def engine_option(engines: Sequence[str] = ("local", "stream", "ray"), default: Optional[str] = None) -> Callable:
    """Decorator adding ``--engine`` (the :class:`probe.app.engine.kind.Engine` names
    ``engines``, default the first), and ``--address`` and ``--workers`` when ``ray`` is
    one of them (docs/scale.md). The names and their help come from one place,
    :mod:`probe.app.engine.kind`.
    """
    from probe.app.engine.kind import ENGINE_HELP

    def add(fn: Callable) -> Callable:
        if "ray" in engines:
            fn = click.option(
                "--workers",
                type=integer(min=1),
                default=2,
                show_default=True,
                help="Ray actors, each holding the model (--engine ray)",
            )(fn)
            fn = click.option(
                "--address",
                default=None,
                help="existing Ray cluster (e.g. auto or ray://host:10001); default: start a local one (--engine ray)",
            )(fn)
        return click.option(
            "--engine",
            type=click.Choice(list(engines)),
            default=default or engines[0],
            show_default=True,
            help="; ".join(f"{e}: {ENGINE_HELP[e]}" for e in engines),
        )(fn)

    return add
