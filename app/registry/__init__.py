"""The analysis registry: each analysis is declared once, and the command line, the
report and the Python API are views of it.

An :class:`Analysis` names itself, says what it needs (``model``, ``corpus``,
``treebank``, ``maps``, ``zoo``, ``gradients``), declares its parameters
(:class:`Param`: type, default, help) and has ``run(ctx) -> Result``. ``ctx`` is a
:class:`Context`: the model, corpus, treebank and maps, built lazily from the common
options (``--model``, ``--text/--file/--conllu``, ``--limit``, ``--device``), plus
``ctx.params`` (the declared parameters, defaults filled in). A :class:`Result` holds
tidy tables, per-head facts (``layer``, ``head`` columns), notes, a summary, and
writes itself into a directory.

Adding an analysis is one new module, in ``app/registry/analyses/`` (found by name), in an
installed package that names it under the entry-point group ``attention_probe.analyses``
(:data:`PLUGIN_GROUP`: it then appears in ``probe --help``, ``probe.run`` and the report),
or anywhere that calls :func:`register` before the CLI or the report starts::

    from probe.app.registry import Analysis, Param, Result
    from probe.app.registry.presentation import Presentation, TableView

    def run(ctx):
        from probe.analyses.patterns.role_features import head_features   # heavy imports inside
        table = head_features(ctx.maps).head(ctx.params["top"])            # layer, head, …
        return Result(tables={"features": table}, per_head=table,
                      notes=[f"{len(table)} heads"], summary={"examples": len(ctx.maps)})

    ANALYSIS = Analysis("features", "Per-head attention features", run, needs=("maps",),
                        params=(Param("top", int, 5, "heads listed"),), section=True,
                        shows=Presentation(tables={"features": TableView("entropy")}))

That module gives ``probe features --out DIR [--top N]`` (plus the common options its
needs imply), a report section (``section=True``; ``report_params`` override defaults
there) and ``probe.run("features", model="minilm", text=[...])``. What the report shows of
it (its per-head evidence, head-page block, index tables, verdict hint) is its ``shows``
(:mod:`probe.app.registry.presentation`); the report names no section.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from probe.errors import InputError, NotApplicable

from .presentation import Presentation

__all__ = [
    "Param",
    "jsonable",
    "Analysis",
    "Result",
    "Presentation",
    "Context",
    "open_run",
    "Inputs",
    "SkipAnalysis",
    "NotApplicable",
    "InputError",
    "register",
    "registered",
    "get",
    "run",
    "analyses_registered",
    "NEEDS",
    "ENGINES",
    "STREAMING",
    "PLUGIN_GROUP",
]

#: what an analysis may need, with the common CLI options each one brings
NEEDS = {
    "model": "a live model beyond its captured maps (interventions, gradients): --model, --device",
    "corpus": "input examples (--text, --file or --conllu; a zoo model's own set when none)",
    "treebank": "a CoNLL-U treebank with dependency heads (--conllu)",
    "maps": "captured attention maps of the corpus (the report passes them; a command captures them "
    "from its input: --text, --file or --conllu)",
    "zoo": "a zoo model (--model zoo:<task>)",
    "gradients": "a differentiable live model",
}

from probe.app.engine.kind import ENGINES  # noqa: E402  (the one engine vocabulary, docs/scale.md)

#: the engines of an analysis that streams its corpus through ``ctx.runner`` (it holds no maps)
STREAMING = ("stream", "ray")


class SkipAnalysis(NotApplicable):
    """Raised by ``run`` when its input does not allow it; the message is the reason (a
    :class:`probe.errors.NotApplicable`: the report's *skipped*, the CLI's one-line exit 1)."""


@dataclass(frozen=True)
class Param:
    """One parameter of an analysis; the CLI option is ``--<name with dashes>``.

    Attributes:
        name: Python name (``n_boot`` -> ``--n-boot``).
        type: ``str``, ``int``, ``float``, ``bool`` (a flag), ``"heads"`` (``L2H8,2.9``
            -> ``[(2, 8), (2, 9)]``), ``"ints"`` (``0,2-4`` -> ``[0, 2, 3, 4]``) or
            ``"names"`` (``a,b`` -> ``["a", "b"]``).
        default: used when the option is not given (``None``: unset).
        help: one line for ``--help``.
        choices: allowed values of a ``str`` parameter.
        min: smallest allowed value of an ``int``/``float`` parameter.
        max: largest allowed value of an ``int``/``float`` parameter.
        min_open: ``min`` itself is not allowed (``(min, max]``).
        multiple: repeatable option (a tuple of values).
        required: the option must be given.
        aliases: extra spellings kept for old command lines (hidden in ``--help``).
        short: a one-letter alias such as ``-p``.
    """

    name: str
    type: Any = str
    default: Any = None
    help: str = ""
    choices: tuple = ()
    min: Optional[float] = None
    multiple: bool = False
    max: Optional[float] = None
    min_open: bool = False
    required: bool = False
    aliases: tuple = ()
    short: Optional[str] = None

    @property
    def option(self) -> str:
        return "--" + self.name.replace("_", "-")


@dataclass(frozen=True)
class Analysis:
    """One analysis, declared once.

    Attributes:
        name: the command name (``probe <name>``) and the report section name.
        title: one line: the heading in the report and the command's short help.
        run: ``run(ctx: Context) -> Result``; raise :class:`SkipAnalysis` (a
            :class:`probe.errors.NotApplicable`) when the input does not allow it, with
            the reason as its message.
        needs: keys of :data:`NEEDS`.
        params: the :class:`Param` s of ``run`` (read as ``ctx.params[name]``).
        help: the longer ``--help`` text (default: ``title``).
        command: offered as ``probe <name>`` (``True``), under another command name
            (a string, e.g. ``"ablate"`` for the ``ablation`` section), or not (``False``).
        section: a report section; ``True`` runs ``run`` on the report's context, a
            callable is the report's own variant ``section(ctx) -> Result``.
        report_default: the section runs when the user names no sections.
        report_params: parameter values used in the report (smaller budgets).
        produces: the type of the :class:`Result` ``run`` returns (a
            :mod:`probe.app.registry.results` class that later analyses read by type);
            ``None``: a plain :class:`Result` no other analysis reads.
        consumes: result types ``run`` reads with ``ctx.result_of(T)`` when the analysis
            producing them ran (``None`` otherwise); the report runs the producers first.
        requires: result types without which the section is skipped (with the reason).
        modules: modules that must import for the analysis to run (else skipped).
        order: position in listings (report order, README table).
        model: the default of ``--model`` for this command (a model its defaults work with).
        example: one command line that runs in seconds (the README tour shows it and
            tests/test_cli_contract.py runs it).
        engines: the ``--engine`` choices of the command (:class:`probe.app.engine.kind.Engine`
            names; :data:`STREAMING` for one that streams its corpus and holds no maps); non-empty adds ``--engine``/``--address``/``--workers``, and
            ``run`` hands its jobs to ``ctx.runner`` (this process, or Ray's actors)
            without asking which engine it is.
        accumulators: ``accumulators(ctx, corpus) -> {key: accumulator}``: the corpus statistics
            the analysis reads as sums over examples (the protocol of
            :mod:`probe.analyses.common.accumulate`). The run fills them: an engine
            streams the whole corpus through them (``probe report --engine``), a local
            run feeds them its held maps; ``run`` reads them with
            ``ctx.accumulated(name)`` and never branches on the engine.
        shows: what the report shows of it (:class:`probe.app.registry.presentation.Presentation`:
            its per-head evidence and kinds, head-page block, index-table columns, verdict
            hint, grid mark and what an engine streams of it); the report reads only this.
        objective: the use (:data:`probe.analyses.common.objective.USES`) whose objective
            ``run`` measures the model by, read as ``ctx.objective(use)`` (resolved once
            per run); non-empty adds the one ``--objective`` option to the command.
        reads: the named stages of the run ``run`` reads with ``ctx.stage(STAGE)``
            (:class:`probe.app.registry.stages.Read` s, e.g. ``DECIDED("necessity")`` of
            :mod:`probe.app.registry.removal_stages`): the report computes each once, before
            the first section that reads it.
        settings: ``settings(n, heads, params) -> {name: line}``: what the report states among
            its settings about this section before any runs (``n`` examples, ``heads`` of the
            model, ``params`` the section's report parameters with the report's options in),
            e.g. how many examples it runs the model on; ``None``: nothing.
    """

    name: str
    title: str
    run: Callable
    needs: tuple = ()
    params: tuple = ()
    help: str = ""
    command: Any = True
    section: Any = False
    report_default: bool = True
    report_params: dict = field(default_factory=dict)
    produces: Optional[type] = None
    consumes: tuple = ()
    requires: tuple = ()
    modules: tuple = ()
    order: int = 100
    model: str = "minilm"
    example: str = ""
    engines: tuple = ()
    accumulators: Optional[Callable] = None
    shows: Presentation = field(default_factory=Presentation)
    objective: Optional[str] = None
    reads: tuple = ()
    settings: Optional[Callable[[int, int, dict], dict]] = None

    @property
    def command_name(self) -> Optional[str]:
        """``probe <command_name>``, or ``None`` when the analysis is not a command."""
        if not self.command:
            return None
        return self.command if isinstance(self.command, str) else self.name

    def defaults(self, **given: Any) -> dict:
        """The parameters with defaults filled in; unknown names raise ``ValueError``."""
        known = {p.name: p for p in self.params}
        bad = sorted(set(given) - set(known))
        if bad:
            raise InputError(f"{self.name} has no parameter(s) {bad}; known: {', '.join(known) or 'none'}")
        out = {p.name: ((() if p.default is None else p.default) if p.multiple else p.default) for p in self.params}
        from .validate import check_param

        out.update({k: check_param(known[k], v) for k, v in given.items()})  # NaN, ranges, repeats refused
        return out


@dataclass
class Result:
    """What an analysis returns.

    Attributes:
        tables: name -> tidy DataFrame, written as ``<name>.csv``.
        per_head: DataFrame with ``layer``, ``head`` and fact columns, or ``None``.
        notes: lines for people (printed by the CLI, shown in the report).
        summary: JSON-able numbers; written as ``<summary_name>.json`` when non-empty.
        summary_name: file stem of the summary (default ``summary``).
        writers: ``fn(directory) -> paths`` for figures and other files.
        data: in-memory objects (never written) that a typed result of
            :mod:`probe.app.registry.results` gives to later analyses as properties, e.g.
            the ablation sweep's per-example scores or the claims.
    """

    tables: dict = field(default_factory=dict)
    per_head: Any = None
    notes: list = field(default_factory=list)
    summary: dict = field(default_factory=dict)
    summary_name: str = "summary"
    writers: list = field(default_factory=list)
    data: dict = field(default_factory=dict)

    def write(self, directory: Any) -> list:
        """Write tables (CSV), the summary (JSON) and the writers' files into
        ``directory`` (created); returns the paths written."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        paths = []
        for name, frame in self.tables.items():
            path = d / f"{name}.csv"
            frame.to_csv(path, index=False)
            paths.append(path)
        if self.summary:
            path = d / f"{self.summary_name}.json"
            path.write_text(json.dumps(self.summary, indent=2, default=jsonable) + "\n")
            paths.append(path)
        for writer in self.writers:
            paths.extend(Path(p) for p in (writer(d) or ()))
        return paths


def jsonable(value: Any) -> Any:
    """A numpy/torch scalar or array as JSON (``json.dumps(default=jsonable)``); anything else as text."""
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


from .context import Context  # noqa: E402  (after Result: context imports nothing from here)
from .runs import Inputs, open_run  # noqa: E402

_REGISTRY: dict = {}
_LOADED = False


def register(analysis: Analysis, replace: bool = False) -> Analysis:
    """Add ``analysis`` to the registry.

    Raises:
        ValueError: the name is taken and ``replace`` is false, or a need is unknown.
    """
    unknown = [n for n in analysis.needs if n not in NEEDS]
    if unknown:
        raise ValueError(f"{analysis.name}: unknown needs {unknown}; known: {', '.join(NEEDS)}")
    if analysis.name in _REGISTRY and not replace:
        raise ValueError(f"an analysis named {analysis.name!r} is already registered")
    _REGISTRY[analysis.name] = analysis
    return analysis


def _load_builtin() -> None:
    """Import every module of :mod:`probe.app.registry.analyses` and register its
    ``ANALYSIS`` (or ``ANALYSES``): these modules are light (imports inside ``run``)."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    from . import analyses as pkg

    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{pkg.__name__}.{info.name}")
        for a in getattr(mod, "ANALYSES", ()) or ((mod.ANALYSIS,) if hasattr(mod, "ANALYSIS") else ()):
            if a.name not in _REGISTRY:
                register(a)
    _load_plugins()


#: the entry-point group an installed package declares its analyses in (pyproject:
#: ``[project.entry-points."attention_probe.analyses"] name = "pkg.module"``)
PLUGIN_GROUP = "attention_probe.analyses"


def _load_plugins() -> None:
    """Register the analyses installed packages declare under :data:`PLUGIN_GROUP`: each
    entry point names a module with ``ANALYSIS``/``ANALYSES`` (as a built-in one) or an
    :class:`Analysis` itself. A plugin that fails to import, or whose name a built-in
    analysis already has, is left out with one logged line naming it and why; it never
    stops the command line."""
    import logging
    from importlib.metadata import entry_points

    log = logging.getLogger(__name__)
    for ep in sorted(entry_points(group=PLUGIN_GROUP), key=lambda e: e.name):
        try:
            obj = ep.load()
        except Exception as exc:  # a third party's import error: the plugin is left out, said once
            log.warning("analysis plugin %r (%s) left out: %s: %s", ep.name, ep.value, type(exc).__name__, exc)
            continue
        found = obj if isinstance(obj, Analysis) else None
        analyses = (found,) if found else tuple(getattr(obj, "ANALYSES", ()) or ())
        if not analyses and hasattr(obj, "ANALYSIS"):
            analyses = (obj.ANALYSIS,)
        if not analyses:
            log.warning(
                "analysis plugin %r (%s) left out: it names no Analysis, ANALYSIS or ANALYSES", ep.name, ep.value
            )
        for a in analyses:
            if a.name in _REGISTRY:
                log.warning("analysis plugin %r left out: the name %r is taken", ep.name, a.name)
                continue
            register(a)


def registered() -> list:
    """Every registered analysis, by ``order`` then name: the built-in ones, those
    registered by :func:`register`, and installed plugins (:data:`PLUGIN_GROUP`)."""
    _load_builtin()
    return sorted(_REGISTRY.values(), key=lambda a: (a.order, a.name))


def get(name: str) -> Analysis:
    """The analysis called ``name`` (or whose command is ``name``).

    Raises:
        ValueError: unknown name (the message lists the known ones).
    """
    _load_builtin()
    by_command = {a.command_name: a for a in _REGISTRY.values() if a.command_name}
    if name not in _REGISTRY and name in by_command:
        return by_command[name]
    if name not in _REGISTRY:
        raise InputError(f"unknown analysis {name!r}; known: {', '.join(a.name for a in registered())}")
    return _REGISTRY[name]


def analyses_registered() -> list:
    """The names of the registered analyses (``probe.run`` accepts these and the command names)."""
    return [a.name for a in registered()]


def run(
    name: str,
    *,
    model: Optional[str] = None,
    text: Any = None,
    file: Any = None,
    conllu: Any = None,
    limit: Any = None,
    device: Any = "cpu",
    adapter: Any = None,
    quiet: bool = True,
    out: Any = None,
    force: bool = False,
    engine: Optional[str] = None,
    address: Optional[str] = None,
    workers: int = 2,
    objective: Any = "auto",
    **params: Any,
) -> Result:
    """Run the analysis ``name`` from Python and return its :class:`Result`.

    Args:
        model, text, file, conllu, limit, device: the same as the CLI's common options
            (``model`` defaults to ``minilm``, or to the given ``adapter``'s own name).
        adapter: an already loaded model (instead of ``model``): the run, its notes and
            an engine's workers name this model, never the default spec.
        out: also write the result into this directory (refused when non-empty unless
            ``force``), as the CLI does.
        engine, address, workers: ``--engine`` and its settings, for analyses that
            declare ``engines`` (docs/scale.md; default: the first it declares, else ``local``).
        objective: what an analysis that declares ``objective`` measures the model by (a
            name, ``auto``, an :class:`probe.analyses.common.objective.Objective` or a
            callable), resolved once when the run asks.
        params: the analysis' parameters (see ``probe <name> --help``).

    Raises:
        ValueError: unknown analysis or parameter, or input the analysis cannot use.
    """
    from .outdir import OutDir
    from .runs import engine_of

    analysis = get(name)
    values = analysis.defaults(**params)
    run_engine = engine_of(engine, analysis.engines, analysis.name, address=address, workers=workers, device=device)
    target = OutDir(out, force) if out is not None else None
    if model is None and adapter is None:
        model = "minilm"
    ctx = open_run(
        model,
        Inputs(text or (), file, conllu),
        limit=limit,
        device=device,
        adapter=adapter,
        params=values,
        quiet=quiet,
        engine=run_engine,
        objective=objective,
    )
    from probe.app.registry.validate import check_heads_in_model

    check_heads_in_model(analysis, ctx)  # every named head in range before any forward
    result = analysis.run(ctx)
    if target is not None:
        with target as tmp:
            result.write(tmp)
    return result
