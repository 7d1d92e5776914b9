"""The report's sections are the registered analyses (:mod:`probe.app.registry`) that
declare ``section``; this module runs them on a report's context.

The runner (:func:`run_sections`) marks a section *skipped* with the reason when a module
is not importable, an input it needs is missing, a result it requires was not produced, or
the analysis found it does not apply (:class:`probe.errors.NotApplicable`), and *failed*
(with the error, logged with its traceback) when the analysis raised anything else — the
report is built in every case. Each section runs with its declared defaults overridden by
its ``report_params`` (smaller budgets than the command line).

Sections talk through types, not names: each declares what it ``produces`` and
``consumes`` (:mod:`probe.app.registry.results`); the runner puts producers before their
consumers, checks that each section returns what it declared, and keeps the results on
the run, where a consumer reads one with ``ctx.result_of(T)``.

A report-only section is one module in ``app/registry/analyses/`` (see the registry's
docstring); :func:`Section` builds the same declaration for tests and notebooks.
"""

from __future__ import annotations

from typing import Any

import importlib
import logging
import time
from dataclasses import dataclass, field
from typing import Optional

from probe.app.registry import Analysis, Result, registered as _registered
from probe.errors import InputError, NotApplicable

log = logging.getLogger(__name__)

#: inputs a section may need, and how to tell whether a report's context has them
NEEDS = {
    "treebank": (
        lambda ctx: bool(ctx.corpus.kept.sentences) and all(s.heads for s in ctx.corpus.kept.sentences),
        "no treebank input (give --conllu with dependency annotation)",
    ),
    "model": (lambda ctx: ctx.adapter is not None, "no live model (report built from stored maps)"),
    "gradients": (lambda ctx: ctx.adapter is not None, "no live model (report built from stored maps)"),
    "zoo": (lambda ctx: str(getattr(ctx.adapter, "name", "")).startswith("zoo:"), "not a zoo model"),
    "words": (lambda ctx: any(m.words for m in ctx.maps), "the examples have no word alignment"),
}


def Section(
    name: str,
    title: str,
    run: Any,
    modules: tuple = (),
    needs: tuple = (),
    default: bool = True,
    produces: Optional[type] = None,
    consumes: tuple = (),
    requires: tuple = (),
) -> Analysis:
    """A report-only analysis (no command): the declaration :func:`run_sections` runs."""
    return Analysis(
        name,
        title,
        run,
        needs=tuple(n for n in needs if n != "words"),
        command=False,
        section=True,
        report_default=default,
        modules=modules,
        produces=produces,
        consumes=consumes,
        requires=requires,
    )


@dataclass
class SectionOutcome:
    """The fate of one section in one report: ``status`` is ran | skipped | failed."""

    name: str
    title: str
    status: str
    reason: str = ""
    seconds: float = 0.0
    result: Result = field(default_factory=Result)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "title": self.title,
            "status": self.status,
            "reason": self.reason,
            "seconds": round(self.seconds, 3),
        }


def registered() -> list:
    """The report's sections (registered analyses with ``section``), in order."""
    return [a for a in _registered() if a.section]


def choose(names: Any = None) -> list:
    """The sections to run: the default ones, or those named (in registry order).

    Raises:
        InputError: an unknown section name (the message lists the known ones), an empty list.
    """
    sections = registered()
    if names is None:
        return [s for s in sections if s.report_default]
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",")]
    names = [n for n in names if n]
    if not names:  # an empty list is no section, not "every section"
        raise InputError("no section named: give sections like ablation,roles (or none at all: every default section)")
    known = {s.name for s in sections}
    bad = [n for n in names if n not in known]
    if bad:
        raise InputError(f"unknown report section(s) {bad}; known: {', '.join(sorted(known))}")
    return [s for s in sections if s.name in set(names)]


def produced(sec: Any) -> type[Result]:
    """The type of the result section ``sec`` returns (a plain :class:`Result` unless declared)."""
    return sec.produces or Result


def in_order(sections: Any) -> list:
    """``sections`` with every producer before the sections that consume or require its
    type, otherwise in the given order (a stable topological sort).

    Raises:
        ValueError: the declarations form a cycle.
    """
    left, out = list(sections), []
    while left:
        for sec in left:
            wants = set(sec.consumes) | set(sec.requires)
            if not any(produced(o) in wants for o in left if o is not sec):
                break
        else:
            raise RuntimeError(f"sections consume each other's results in a cycle: {[s.name for s in left]}")
        out.append(sec)
        left.remove(sec)
    return out


def _missing_module(names) -> Optional[str]:
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            return f"{name} is not available ({exc.__class__.__name__}: {exc})"
    return None


def _unmet(ctx, sec, producers: dict) -> Optional[str]:
    reason = _missing_module(sec.modules)
    if reason is not None:
        return reason
    for need in sec.needs:
        check = NEEDS.get(need)
        if check is not None and not check[0](ctx):
            return check[1]
    for kind in sec.requires:
        if ctx.result_of(kind) is None:
            by = producers.get(kind)
            return (
                f"needs the {by!r} section, which did not run"
                if by
                else f"needs a {kind.__name__}: no section makes one"
            )
    return None


def section_options(ctx: Any, sec: Any, sections: Any) -> dict:
    """What section ``sec``'s result depends on besides the model and the input: the
    report's options it receives (the ``overrides`` it declares as parameters), the
    ``--objective`` when it measures the model by one, and the same of each section among
    ``sections`` whose result it reads (``None`` where none makes it). A resumed report
    reruns a finished section whose options differ (:mod:`.resume`; issue 59, row 14)."""
    declared = {**sec.defaults(), **sec.report_params}  # the names; section_params gives the values
    opts: dict = {"params": {k: v for k, v in sorted(ctx.report.overrides.items()) if k in declared}}
    if sec.objective:
        opts["objective"] = str(getattr(ctx, "objective_spec", None))
    makers = {produced(s): s for s in sections if s is not sec}
    opts["reads"] = {
        kind.__name__: section_options(ctx, makers[kind], sections) if kind in makers else None
        for kind in (*sec.consumes, *sec.requires)
    }
    return opts


def params_with(sec: Any, overrides: dict) -> dict:
    """Section ``sec``'s parameters in a report: its defaults, its ``report_params`` and the
    report's own options ``overrides`` (``--max-model-examples``, ``--explained-examples``,
    ``--null``, ``--causal``) that it declares."""
    params = sec.defaults()
    params.update(sec.report_params)
    params.update({k: v for k, v in overrides.items() if k in params})
    return params


def section_params(ctx: Any, sec: Any) -> dict:
    """Section ``sec``'s parameters in the report ``ctx`` (:func:`params_with` its overrides)."""
    return params_with(sec, ctx.report.overrides)


def note_choices(ctx: Any) -> None:
    """Keep the lines the run said for people (``ctx.said``: the objective chosen and why,
    a default taken …) as the report's ``settings["choices"]`` (its index page and
    summary.json), where the report shows them."""
    if ctx.said:
        ctx.report.settings["choices"] = list(ctx.said)


def open_stages(ctx: Any, sec: Any, sections: list) -> None:
    """Compute, once per run, each stage ``sec`` reads (``Analysis.reads``,
    :mod:`probe.app.registry.stages`) that no earlier section made: from the asks of ``sec``
    and of the sections after it that read it too (a reader before it was resumed or
    skipped, else the stage would be made already)."""
    from probe.app.registry.stages import compute_stage, reads_of

    later = sections[sections.index(sec) :] if sec in sections else [sec]
    for read in sec.reads:
        readers = [(s, section_params(ctx, s)) for s in later if reads_of(s, read.stage) is not None]
        compute_stage(ctx, read.stage, readers)


def run_section(ctx: Any, sec: Any, sections: Optional[list] = None) -> Result:
    """Run one section on its own view of the run ``ctx`` (:meth:`Context.with_params`: the
    run with the section's report parameters, :func:`section_params`), after the stages it
    reads (computed here the first time, so their time counts in the first reader's)."""
    open_stages(ctx, sec, sections if sections is not None else [sec])
    fn = sec.section if callable(sec.section) else sec.run
    # the same on every engine: what it sums over the corpus, it reads from ctx.accumulated
    result = fn(ctx.with_params(section_params(ctx, sec)))
    if not isinstance(result, produced(sec)):  # a bug in the declaration or the analysis
        raise TypeError(
            f"section {sec.name} returned a {type(result).__name__}, not the {produced(sec).__name__} it declares"
        )
    return result


def run_sections(ctx: Any, sections: Any, strict: bool = False, progress: Any = None, partial: Any = None) -> list:
    """Run ``sections`` in order on ``ctx`` and store each result in ``ctx.report.results``.

    ``progress(i, n, name)`` is called before each section that runs. Returns a list of
    :class:`SectionOutcome`. With ``strict``, an analysis error is raised instead of
    being recorded as *failed* (tests use this). ``partial``
    (:class:`probe.app.report.resume.PartialReport`) saves each finished section and
    gives back those a previous run finished (not run again).
    """
    outcomes = []
    sections = in_order(sections)
    for i, sec in enumerate(sections):
        options = section_options(ctx, sec, sections) if partial is not None else None
        saved = partial.load(sec.name, produced(sec), options) if partial is not None else None
        if saved is not None:
            if progress:
                progress(i, len(sections), f"{sec.name} (resumed: finished by the previous run)")
            if saved.status == "ran":
                ctx.report.results[sec.name] = saved.result
            else:
                _note_skip(ctx, sec.name, saved.reason)
            for line in partial.said(sec.name):  # the choices it made for the user, said again
                ctx.say(line)
            note_choices(ctx)
            outcomes.append(saved)
            continue
        n_before = len(outcomes)
        said_before = len(ctx.said)
        _run_one(ctx, sec, i, sections, outcomes, strict, progress)
        note_choices(ctx)
        if partial is not None and len(outcomes) > n_before:
            partial.save(outcomes[-1], said=list(ctx.said[said_before:]), options=options)
    return outcomes


def _run_one(ctx, sec, i: int, sections: list, outcomes: list, strict: bool, progress) -> None:
    """Run one section, appending its :class:`SectionOutcome` to ``outcomes``."""
    t0 = time.perf_counter()
    reason = _unmet(ctx, sec, {produced(s): s.name for s in sections})
    if reason is not None:
        log.info("section %s skipped: %s", sec.name, reason)
        _note_skip(ctx, sec.name, reason)
        outcomes.append(SectionOutcome(sec.name, sec.title, "skipped", reason))
        return
    if progress:
        progress(i, len(sections), sec.name)
    try:
        result = run_section(ctx, sec, sections)
    except (NotApplicable, InputError) as exc:
        # the analysis does not apply to this input (too few sentences, no applicable
        # metric…), or refuses it as too little or wrong for it (one sentence for a
        # bootstrap): the report's input was checked when the run opened, so the section
        # is skipped with its own reason, never "failed" with exit 0 (issue 59, row 8)
        reason = exc.reason if isinstance(exc, NotApplicable) else f"not applicable to this input: {exc}"
        log.info("section %s skipped: %s", sec.name, reason)  # -v: SmolLM2's faithfulness went by unsaid
        _note_skip(ctx, sec.name, reason)
        outcomes.append(SectionOutcome(sec.name, sec.title, "skipped", reason, time.perf_counter() - t0))
        return
    except Exception as exc:  # anything else is a bug: the section failed, with its type
        if strict:
            raise
        # one line mid-run (the report lists the failure); the traceback with --verbose
        log.error("section %s failed: %s: %s", sec.name, type(exc).__name__, exc)
        log.debug("section %s traceback", sec.name, exc_info=True)
        _note_skip(ctx, sec.name, f"failed: {type(exc).__name__}: {exc}")
        outcomes.append(
            SectionOutcome(sec.name, sec.title, "failed", f"{type(exc).__name__}: {exc}", time.perf_counter() - t0)
        )
        return
    ctx.report.results[sec.name] = result
    outcomes.append(SectionOutcome(sec.name, sec.title, "ran", "", time.perf_counter() - t0, result))
    log.info("section %s ran in %.1fs", sec.name, outcomes[-1].seconds)


def _note_skip(ctx, name: str, reason: str) -> None:
    """Record why ``name`` was skipped (or failed), for later sections (``ctx.report.skipped``)."""
    ctx.report.skipped[name] = reason
