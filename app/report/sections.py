"""The section registry: each analysis adds a section to the report in a few lines.

A :class:`Section` names the analysis modules it imports and the inputs it needs; the
runner (:func:`run_sections`) marks it *skipped* with the reason when a module is not
importable, an input is missing or the analysis refused its input (``ValueError``, the
project's bad-input error), and *failed* (with the error, logged with its traceback)
when the analysis raised anything else — the report is built in every case. A section's
``run`` returns a :class:`SectionResult`: tidy tables (written as CSV) and, optionally,
one row per ``(layer, head)`` of facts shown on the head pages and used by the verdict.

Wiring a new analysis::

    def _run_mine(ctx):
        from analyses.mine import mine_table
        t = mine_table(ctx.maps)
        return SectionResult(tables={"mine": t}, per_head=t[["layer", "head", "score"]])

    register_section(Section("mine", "My analysis", _run_mine, modules=("analyses.mine",)))
"""

from __future__ import annotations

import importlib
import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

log = logging.getLogger(__name__)

#: inputs a section may need, and how to tell whether the context has them
NEEDS = {
    "treebank": (lambda ctx: bool(ctx.corpus.sentences) and all(s.heads for s in ctx.corpus.sentences),
                 "no treebank input (give --conllu with dependency annotation)"),
    "model": (lambda ctx: ctx.adapter is not None, "no live model (report built from stored maps)"),
    "words": (lambda ctx: any(m.words for m in ctx.maps), "the examples have no word alignment"),
}


class SkipSection(Exception):
    """Raised by a section's ``run`` when its input does not allow it to run; the
    message is the reason shown in the report."""


@dataclass
class SectionResult:
    """What a section contributes.

    Attributes:
        tables: name -> tidy DataFrame, written to ``tables/<section>_<name>.csv``.
        per_head: DataFrame with ``layer``, ``head`` and fact columns (one row per
            head), or ``None``.
        notes: corpus-level lines shown on the index page.
        summary: JSON-able corpus-level numbers for ``summary.json``.
    """

    tables: dict = field(default_factory=dict)
    per_head: Optional[object] = None
    notes: list = field(default_factory=list)
    summary: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Section:
    """One report section.

    Attributes:
        name: short identifier (file names, JSON keys).
        title: heading shown in the report.
        run: ``run(ctx) -> SectionResult``; may raise :class:`SkipSection`.
        modules: modules that must import for the section to run.
        needs: keys of :data:`NEEDS` the context must satisfy.
        after: names of sections whose results ``run`` reads from ``ctx.results``
            (the section is skipped when one of them did not run).
        default: run when the user names no sections.
    """

    name: str
    title: str
    run: Callable
    modules: tuple = ()
    needs: tuple = ()
    after: tuple = ()
    default: bool = True


@dataclass
class SectionOutcome:
    """The fate of one section in one report: ``status`` is ran | skipped | failed."""

    name: str
    title: str
    status: str
    reason: str = ""
    seconds: float = 0.0
    result: SectionResult = field(default_factory=SectionResult)

    def to_dict(self) -> dict:
        return {"name": self.name, "title": self.title, "status": self.status,
                "reason": self.reason, "seconds": round(self.seconds, 3)}


_REGISTRY: dict = {}


def register_section(section: Section, replace: bool = False) -> Section:
    """Add ``section`` to the registry (in order of registration).

    Raises:
        ValueError: a section of that name exists and ``replace`` is false.
    """
    if section.name in _REGISTRY and not replace:
        raise ValueError(f"a report section named {section.name!r} is already registered")
    _REGISTRY[section.name] = section
    return section


def registered() -> list:
    """The registered sections, in order."""
    from . import wiring  # noqa: F401  (registers the built-in sections)

    return list(_REGISTRY.values())


def choose(names=None) -> list:
    """The sections to run: the default ones, or those named (in registry order).

    Raises:
        ValueError: an unknown section name (the message lists the known ones).
    """
    sections = registered()
    if not names:
        return [s for s in sections if s.default]
    known = {s.name for s in sections}
    bad = [n for n in names if n not in known]
    if bad:
        raise ValueError(f"unknown report section(s) {bad}; known: {', '.join(sorted(known))}")
    return [s for s in sections if s.name in set(names)]


def _missing_module(names) -> Optional[str]:
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            return f"{name} is not available ({exc.__class__.__name__}: {exc})"
    return None


def run_sections(ctx, sections, strict: bool = False, progress=None) -> list:
    """Run ``sections`` in order on ``ctx`` and store each result in ``ctx.results``.

    Returns a list of :class:`SectionOutcome`. With ``strict``, an analysis error is
    raised instead of being recorded as *failed* (tests use this).
    """
    outcomes = []
    for sec in sections:
        t0 = time.perf_counter()
        reason = _missing_module(sec.modules)
        if reason is None:
            for need in sec.needs:
                ok, why = NEEDS[need]
                if not ok(ctx):
                    reason = why
                    break
        if reason is None:
            for dep in sec.after:
                if dep not in ctx.results:
                    reason = f"needs the {dep!r} section, which did not run"
                    break
        if reason is not None:
            log.info("section %s skipped: %s", sec.name, reason)
            outcomes.append(SectionOutcome(sec.name, sec.title, "skipped", reason))
            continue
        if progress:
            progress(sec.name)
        try:
            result = sec.run(ctx)
        except (SkipSection, ValueError) as exc:
            # ValueError is the analyses' "this input does not allow it" (too few
            # sentences, no applicable metric…): a skip with the analysis' own reason
            outcomes.append(SectionOutcome(sec.name, sec.title, "skipped", str(exc),
                                           time.perf_counter() - t0))
            continue
        except Exception as exc:
            if strict:
                raise
            log.exception("section %s failed", sec.name)
            outcomes.append(SectionOutcome(sec.name, sec.title, "failed", f"{type(exc).__name__}: {exc}",
                                           time.perf_counter() - t0))
            continue
        ctx.results[sec.name] = result
        outcomes.append(SectionOutcome(sec.name, sec.title, "ran", "", time.perf_counter() - t0, result))
        log.info("section %s ran in %.1fs", sec.name, outcomes[-1].seconds)
    return outcomes
