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
    return skip_invalid_option(fn)


def skip_invalid_option(fn):
    """--skip-invalid: skip CoNLL-U sentences that break UD's rules instead of refusing the
    file; each is listed in ``skipped.csv`` in the --out directory (beside a --out file) and
    their number is said on stderr."""
    @functools.wraps(fn)
    def wrapper(*args, skip_invalid=False, **kwargs):
        from pathlib import Path

        from probe.corpus import skipping_invalid, write_skipped_csv

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
            click.echo(f"skipped {len(invalid)} invalid CoNLL-U sentence(s), the first: {invalid[0]}{where}",
                       err=True)
        return result
    return click.option("--skip-invalid", is_flag=True,
                        help="skip CoNLL-U sentences that break UD's rules (listed in skipped.csv) "
                             "instead of refusing the file")(wrapper)


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
