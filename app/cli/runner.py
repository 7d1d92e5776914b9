"""One generic runner: a click command for every registered analysis.

The options come from the declaration (:class:`probe.app.registry.Analysis`): its
``params`` (one option each, in the one notation of :mod:`.common`) and the common
options its ``needs`` imply (``--model``/``--device`` for a model, ``--text``/``--file``/
``--conllu``/``--limit`` for a corpus, ``--conllu``/``--limit`` for a treebank), plus
``--out`` (a directory; refused when non-empty unless ``--force``, checked before any
compute, written atomically), ``--quiet`` and ``--verbose``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

import click

if TYPE_CHECKING:
    from probe.app.registry import Analysis, Result

from .numbers import Number
from .common import (
    configure_progress,
    device_option,
    engine_option,
    force_option,
    input_options,
    limit_option,
    parse_heads,
    parse_int_list,
    quiet_option,
    setup_logging,
    skip_invalid_option,
    user_errors,
    verbose_option,
)


def _names(value, name: str = "--names"):
    """'a,b' -> ['a', 'b']; blank -> ``None``; separators only or a name twice: refused."""
    from probe.errors import InputError

    if value is None or str(value).strip() == "":
        return None
    out = [s.strip() for s in str(value).split(",") if s.strip()]
    if not out:
        raise InputError(f"{name}: {value!r} names nothing; give names separated by commas (or leave {name} out)")
    twice = sorted({s for s in out if out.count(s) > 1})
    if twice:
        raise InputError(f"{name}: {twice[0]!r} is given twice; name each one once")
    return out


def _once(p, values: tuple) -> tuple:
    """A repeatable option's values, refused when one is given twice (``-p 0 -p 0`` would
    score one position twice)."""
    from probe.errors import InputError

    seen = [v for k, v in enumerate(values) if v in values[:k]]
    if seen:
        shown = seen[0] if not isinstance(seen[0], list) else "+".join(f"L{a}H{b}" for a, b in seen[0])
        raise InputError(f"{p.option} {shown} is given twice; give each value once")
    return values


#: declared type -> (click type, converter applied after click parsed the string)
def _click_type(p):
    if p.type in ("heads", "ints", "names"):
        return str
    if p.choices:
        return click.Choice(list(p.choices))
    if p.type in (int, float):  # finite and in range (NaN and inf refused): the one numeric type
        return Number(p.type, p.min, p.max, p.min_open)
    return p.type


def convert(p: Any, value: Any) -> Any:
    """A parsed option's value in the declared type (heads, integer lists, names)."""
    conv = {
        "heads": lambda v: parse_heads(v, p.option),
        "ints": lambda v: parse_int_list(v, p.option),  # repeats refused
        "names": lambda v: _names(v, p.option),
    }.get(p.type)
    if conv is None or value is None:
        return _once(p, tuple(value)) if p.multiple and value is not None and p.type in _ONCE else value
    if p.multiple:
        converted = tuple(conv(v) for v in value)
        return _once(p, converted) if p.type in _ONCE else converted
    return conv(value)


#: repeatable options whose values must differ: a number or a head group given twice is
#: an error (texts such as --corrupted may repeat: two clean texts can share a corruption)
_ONCE = (int, float, "heads", "ints")


def _param_option(p):
    decls = [p.option] + ([p.short] if p.short else [])
    if p.type is bool:
        return click.option(*decls, p.name, is_flag=True, default=bool(p.default), help=p.help)
    default = p.default
    if p.type in ("heads", "ints", "names") and isinstance(default, (list, tuple)) and not p.multiple:
        default = ",".join(str(x) for x in default)
    opt = click.option(
        *decls,
        p.name,
        type=_click_type(p),
        default=default,
        multiple=p.multiple,
        required=p.required,
        show_default=default not in (None, (), ""),
        help=p.help,
    )
    return opt


def _hidden_alias(p, alias):
    """An old spelling of ``p`` kept working, hidden from ``--help``."""
    return click.option(alias, f"_alias_{p.name}", type=_click_type(p), default=None, hidden=True, expose_value=True)


#: the options every command shares, passed to :func:`run_analysis` by name
COMMON = ("model", "device", "text", "file_", "conllu", "limit", "engine", "address", "workers", "objective")


def build_command(analysis: Analysis) -> click.Command:
    """The click command ``probe <analysis.name>``: the declared parameters' options, the
    common options its ``needs`` imply, ``--engine`` for its ``engines`` and the one
    ``--objective`` for its ``objective`` use."""
    cmd = verbose_option(
        quiet_option(
            force_option(
                click.option(
                    "--out",
                    "-o",
                    required=True,
                    type=click.Path(),
                    help="output directory (created; must be empty unless --force)",
                )(user_errors(_callback(analysis)))
            )
        )
    )
    for p in reversed(analysis.params):
        for alias in p.aliases:
            cmd = _hidden_alias(p, alias)(cmd)
        cmd = _param_option(p)(cmd)
    cmd = _common_options(analysis, cmd)
    help_text = analysis.help or analysis.title
    return click.command(analysis.command_name or analysis.name, help=help_text, short_help=analysis.title)(cmd)


def _callback(analysis: Analysis) -> Callable[..., None]:
    """The command's body: the options split into the common ones and the declared
    parameters (old spellings noted), then :func:`run_analysis`."""

    def callback(**kw: Any) -> None:
        verbose = kw.pop("verbose", False)
        quiet = kw.pop("quiet", False)
        setup_logging(verbose)
        configure_progress()
        out, force = kw.pop("out"), kw.pop("force")
        declared = {p.name for p in analysis.params}
        common = {k: kw.pop(k) for k in COMMON if k in kw and k not in declared}
        for p in analysis.params:
            for alias in p.aliases:
                old = kw.pop(f"_alias_{p.name}", None)
                if old is not None:
                    click.echo(f"note: {alias} is deprecated; use {p.option}", err=True)
                    kw[p.name] = old
        params = {p.name: convert(p, kw[p.name]) for p in analysis.params}
        run_analysis(analysis, params, out=out, force=force, quiet=quiet, **common)

    return callback


def _common_options(analysis: Analysis, cmd: Callable) -> Callable:
    """``cmd`` with the common options of the analysis' ``needs``, ``engines`` and ``objective``."""
    needs = set(analysis.needs)
    if "treebank" in needs:
        cmd = skip_invalid_option(
            click.option(
                "--conllu", type=click.Path(dir_okay=False), default=None, help="CoNLL-U treebank with dependency heads"
            )(cmd)
        )
    elif needs & {"corpus", "maps"}:
        cmd = input_options(cmd)
    if needs & {"corpus", "maps", "treebank"} and "limit" not in {p.name for p in analysis.params}:
        cmd = limit_option(cmd)
    if analysis.engines:
        cmd = engine_option(analysis.engines)(cmd)
    if analysis.objective:
        from probe.analyses.common.objective_names import objective_help

        cmd = click.option(
            "--objective", default="auto", show_default=True, help=objective_help((analysis.objective,))
        )(cmd)
    if needs & {"model", "corpus", "maps", "zoo", "gradients", "treebank"}:
        cmd = click.option(
            "--model",
            "-m",
            default=analysis.model,
            show_default=True,
            help="minilm | smollm2 | hf:<id or path> | gguf:<file> | zoo:<task> | a model directory",
        )(device_option(cmd))
    return cmd


def run_analysis(
    analysis: Analysis,
    params: dict,
    *,
    out: str,
    force: bool = False,
    quiet: bool = False,
    model: str = "minilm",
    device: str = "cpu",
    text: Sequence[str] = (),
    file_: Optional[str] = None,
    conllu: Optional[str] = None,
    limit: Optional[int] = None,
    engine: Optional[str] = None,
    address: Optional[str] = None,
    workers: int = 2,
    objective: str = "auto",
) -> Result:
    """Check ``out``, run ``analysis`` inside a temporary sibling directory, write its
    result there and rename it to ``out``; print its notes and the files written. The
    engine is validated and the objective resolved (printed) when the run opens, before
    the analysis runs."""
    from probe.app.registry import Inputs, open_run
    from probe.app.registry.outdir import OutDir
    from probe.app.registry.runs import engine_of

    target = OutDir(out, force)  # refuses a bad --out before anything is computed
    run_engine = engine_of(engine, analysis.engines, analysis.name, address=address, workers=workers, device=device)
    t0 = time.perf_counter()
    with target as tmp:
        ctx = open_run(
            model,
            Inputs(text or (), file_, conllu),
            limit=limit,
            device=device,
            params=params,
            quiet=quiet,
            workdir=tmp,
            engine=run_engine,
            objective=objective,
        )
        if analysis.objective:
            ctx.objective(analysis.objective)  # resolved (a bad name refused) before any forward
        result = analysis.run(ctx)
        result.write(tmp)
        names = sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*") if p.is_file())
    if not quiet:
        for line in result.notes:
            click.echo(line)
    click.echo(
        f"wrote {len(names)} files to {target.out} in {time.perf_counter() - t0:.1f}s: "
        + ", ".join(names[:8])
        + (", …" if len(names) > 8 else "")
    )
    return result
