"""Options shared by several commands, defined once, and the error boundary of the CLI."""

from __future__ import annotations

import functools
import logging
import sys

import click

model_option = click.option("--model", "-m", default="minilm", show_default=True,
                            help="minilm | hf:<id or path> | zoo:<task>")
device_option = click.option("--device", default="cpu", show_default=True, help="cpu or cuda[:N]")
dtype_option = click.option("--dtype", default=None, type=click.Choice(["float32", "float16", "bfloat16"]),
                            help="forward dtype (maps are stored as float32 or float16)")
limit_option = click.option("--limit", type=click.IntRange(min=1), default=None, help="first N examples only")
out_dir_option = click.option("--out", "-o", required=True, type=click.Path(file_okay=False), help="output directory")
verbose_option = click.option("-v", "--verbose", is_flag=True)


def input_options(fn):
    """--text (repeatable), --file and --conllu: exactly one, or none for a zoo model."""
    fn = click.option("--conllu", type=click.Path(dir_okay=False), default=None,
                      help="CoNLL-U treebank (words taken from it)")(fn)
    fn = click.option("--file", "file_", type=click.Path(dir_okay=False), default=None,
                      help="UTF-8 text file, one example per line")(fn)
    fn = click.option("--text", "-t", multiple=True, help="input sentence (repeatable)")(fn)
    return fn


def user_errors(fn):
    """Turn the library's ``ValueError`` s into one clear line and exit status 1."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ValueError as exc:
            raise click.ClickException(str(exc)) from None
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)
    return wrapper


def parse_int_list(value, name: str):
    """'0,2,5' or '0-3' → [0, 2, 5] / [0, 1, 2, 3]; ``None`` stays ``None``."""
    if value is None or value == "":
        return None
    out = []
    try:
        for part in str(value).split(","):
            part = part.strip()
            if "-" in part[1:]:
                a, b = part.split("-", 1)
                out.extend(range(int(a), int(b) + 1))
            elif part:
                out.append(int(part))
    except ValueError:
        raise click.BadParameter(f"expected integers like 0,2,5 or 0-3, got {value!r}", param_hint=name) from None
    return out


def parse_head_group(value: str, name: str = "--group") -> list:
    """'1.0,1.1,1.3' → [(1, 0), (1, 1), (1, 3)]: heads as ``layer.head``."""
    out = []
    for part in str(value).split(","):
        part = part.strip()
        layer, dot, head = part.partition(".")
        if not (dot and layer.isdigit() and head.isdigit()):
            raise click.BadParameter(f"expected heads as layer.head separated by commas, like 1.0,1.3; "
                                     f"got {part!r}", param_hint=name)
        out.append((int(layer), int(head)))
    return out


def setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")


def engine_option(fn):
    """--engine local|stream|ray, --address and --workers (docs/scale.md).

    ``local``: today's single-process path; ``stream``: one process, attention streamed
    layer by layer into accumulators (peak memory: one layer of one batch); ``ray``:
    the same accumulators in a pool of Ray actors (``pip install -e ".[ray]"``).
    """
    fn = click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True,
                      help="Ray actors, each holding the model (--engine ray)")(fn)
    fn = click.option("--address", default=None,
                      help="existing Ray cluster (e.g. auto or ray://host:10001); default: start a local one")(fn)
    fn = click.option("--engine", type=click.Choice(["local", "stream", "ray"]), default="local", show_default=True,
                      help="local: one process; stream: one process, layer by layer; ray: a pool of Ray actors")(fn)
    return fn


def engine_settings(engine: str, address, workers: int, device: str):
    """Keyword arguments for :func:`probe.app.engine.run_job`, or ``None`` for ``local``.

    Raises:
        ValueError: ``--engine ray`` without Ray installed (says how to install it).
    """
    if engine == "local":
        return None
    if engine == "ray":
        from probe.app.engine import require_ray

        require_ray()
        return {"engine": "ray", "address": address, "workers": workers, "device": device}
    return {"engine": "local", "device": device}
