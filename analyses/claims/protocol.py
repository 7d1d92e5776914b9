"""Claim kinds as a registered protocol: :class:`ClaimTest`.

A claim kind is one :class:`ClaimTest`: its name (``kind``), what it tests, how it is
computed (``compute(inputs) -> {(layer, head): Claim}`` from :class:`ClaimInputs`) and how
it renders (its head-page ``title``, its evidence sentence ``evidence(claim) -> Evidence``
and, optionally, its words in the head's one-line summary). :func:`head_claims
<probe.analyses.claims.heads.head_claims>` computes every registered kind, in ``order``;
head pages, ``report.md``, ``summary.json`` (``heads[i].claims``) and the claims' tables
list them all.

The inputs carry everything a kind may test against, pattern and causal alike: the heads,
the captured maps and the pattern/structure evidence, and for a causal kind the live model,
the run's resolved objective, the runner its removals run on, the null model and the
thresholds in force (its floor: :attr:`ClaimInputs.floor`). A new kind is one module that
calls :func:`register_claim`::

    from probe.analyses.claims.claim import Claim
    from probe.analyses.claims.protocol import ClaimTest, register_claim

    def compute(inputs):                      # ClaimInputs: heads, maps, objective, runner, null, …
        return {key: Claim("sharp", "holds", effect=0.9, count=12) for key in inputs.heads}

    register_claim(ClaimTest("sharp", "Sharpness", "its rows peak on one token", compute))

A module anywhere registers its kinds when imported; one in an installed package is found
by naming it under the entry-point group ``attention_probe.claims`` (:data:`PLUGIN_GROUP`,
as analyses plugins use ``attention_probe.analyses``): it is imported the first time the
kinds are listed, and one that fails to import is left out with one logged line. A kind of
this package is found by its module's name in :data:`KIND_MODULES`, the one list of the
built-in kinds' modules: each declares its kinds as ``CLAIMS = (ClaimTest(...), …)``.

The six built-in kinds live in their own modules (:mod:`.pattern`, :mod:`.structure`,
:mod:`.necessity` — necessity and weights —, :mod:`.redundancy`, :mod:`.attribution`). The
causal ones (necessity, weights, redundancy) are decided together by the run's causal path
(:func:`.causal_paths.decide_causal`, once, the first time a kind asks
``inputs.causal()``); pattern is computed before every kind (the causal path reads it) and
carried as ``inputs.pattern``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

__all__ = [
    "KIND_MODULES",
    "PLUGIN_GROUP",
    "ClaimInputs",
    "ClaimTest",
    "claim_kinds",
    "claim_test",
    "claim_tests",
    "register_claim",
]

#: the entry-point group an installed package names its claim-kind modules in
PLUGIN_GROUP = "attention_probe.claims"

#: the modules of this package that declare the built-in kinds (``CLAIMS``), imported the
#: first time the kinds are listed; a new built-in kind's module is added here
KIND_MODULES = (
    "probe.analyses.claims.pattern",
    "probe.analyses.claims.structure",
    "probe.analyses.claims.necessity",
    "probe.analyses.claims.redundancy",
    "probe.analyses.claims.attribution",
)


def _no_record() -> Any:
    raise LookupError("no causal path was given to these inputs")


@dataclass(frozen=True)
class ClaimInputs:
    """What a claim kind's ``compute`` may read.

    Attributes:
        heads: the ``(layer, head)`` keys to claim about (every captured head).
        adapter: the live model, or ``None`` (a report from stored maps).
        corpus: the :class:`probe.inputs.corpus.Corpus` the interventions run on.
        maps: the captured :class:`probe.maps.AttentionMaps` of ``corpus`` (may be empty
            when an engine streamed the evidence instead).
        evidence: the pattern and structure accumulators, filled
            (:func:`probe.analyses.claims.heads.evidence_accumulators`).
        objective: the run's resolved :class:`probe.analyses.common.objective.Objective`
            (``use="corpus"``) a causal kind measures harm on, or ``None`` without a model;
            objective_why: how the run chose it.
        runner: where a kind's removal batches run (:mod:`probe.runs.blocks`; ``None``: this
            process), as :func:`.removal.removal_sweep`'s ``runner``.
        null: the null model (:mod:`.null_model`: the model re-initialised or its attention
            permuted) a kind calibrates against, or ``None`` (the floor alone).
        thresholds: the thresholds in force (:func:`.thresholds.thresholds_in_force`:
            name -> ``{"value", "source"}``); :attr:`floor` is the objective's.
        seed, progress: the run's seed of every random draw, and whether to show progress.
        importance: table ``layer, head, importance`` (the importance section's), or ``None``.
        faithfulness: ``(verdict table, run info, reason when absent)`` of the faithfulness
            section (``(None, None, reason)`` where it did not run).
        pattern: the pattern claims (computed first: the causal path reads them).
        causal: ``causal() -> CausalRecord``: the causal path's record
            (:class:`.causal_paths.CausalRecord`), decided once, the first time it is asked.
        notes, tables: where a kind adds the sentences and evidence tables the report shows.
    """

    heads: list
    adapter: Any = None
    corpus: Any = None
    maps: list = field(default_factory=list)
    evidence: dict = field(default_factory=dict)
    objective: Any = None
    objective_why: str = ""
    runner: Any = None
    null: Any = None
    thresholds: dict = field(default_factory=dict)
    seed: int = 0
    progress: bool = False
    importance: Any = None
    faithfulness: tuple = (None, None, "")
    pattern: dict = field(default_factory=dict)
    causal: Callable[[], Any] = _no_record
    notes: list = field(default_factory=list)
    tables: dict = field(default_factory=dict)

    @property
    def floor(self) -> Optional[float]:
        """The objective's practical floor (:func:`.thresholds.min_effect`), ``None`` without one."""
        if self.objective is None:
            return None
        from .thresholds import min_effect

        return min_effect(self.objective.name)


@dataclass(frozen=True)
class ClaimTest:
    """One kind of claim.

    Attributes:
        kind: its name (a claim's ``kind``, a column of report.md, a key of summary.json's
            ``heads[i].claims``).
        title: its heading on a head page.
        tests: what it tests, in one line.
        compute: ``compute(inputs: ClaimInputs) -> {(layer, head): Claim}``; a head it
            leaves out is *not tested*; raising :class:`probe.errors.NotApplicable` makes
            every head *not tested* with the reason.
        evidence: ``evidence(claim) -> Evidence`` (:mod:`.evidence`): its sentence and
            numbers; default (``None``): the built-in kinds' own renderers
            (:func:`.evidence.builtin_evidence`), for another kind the claim's ``reason``
            with its effect, interval and count.
        summary: ``summary(claim) -> str``: its words in the head's one-line summary
            (``""``: none); the built-in kinds' words are :func:`.summary.summary_sentence`'s.
        order: its place among the kinds (the built-in ones 10–60; default after them).
    """

    kind: str
    title: str
    tests: str
    compute: Callable[[ClaimInputs], dict]
    evidence: Optional[Callable[[Any], Any]] = None  # (Claim) -> Evidence; this module imports neither
    summary: Optional[Callable[[Any], str]] = None
    order: int = 100


_TESTS: dict = {}


def register_claim(test: ClaimTest, replace: bool = False) -> ClaimTest:
    """Add ``test`` to the claim kinds (after those registered before it).

    Raises:
        ValueError: the kind is taken and ``replace`` is false (a developer's error).
    """
    if test.kind in _TESTS and not replace:
        raise ValueError(f"a claim kind named {test.kind!r} is already registered")
    _TESTS[test.kind] = test
    return test


_PLUGINS_LOADED = False
_BUILT_IN_INTO: list = []  # the registry the built-in kinds were put in (a test may swap in a copy)


def _load_built_in() -> None:
    """Put the kinds of every :data:`KIND_MODULES` module (its ``CLAIMS``) in the registry,
    keeping any registered under the same name before."""
    if _BUILT_IN_INTO and _BUILT_IN_INTO[0] is _TESTS:
        return
    for name in KIND_MODULES:
        for test in getattr(importlib.import_module(name), "CLAIMS", ()):
            _TESTS.setdefault(test.kind, test)
    _BUILT_IN_INTO[:] = [_TESTS]


def _load_plugins() -> None:
    """The built-in kinds (:func:`_load_built_in`) and, once, the modules installed packages
    name under :data:`PLUGIN_GROUP` (each calls :func:`register_claim`); a plugin that fails
    to import is left out, said in one line."""
    global _PLUGINS_LOADED
    _load_built_in()
    if _PLUGINS_LOADED:
        return
    _PLUGINS_LOADED = True
    import logging
    from importlib.metadata import entry_points

    for ep in sorted(entry_points(group=PLUGIN_GROUP), key=lambda e: e.name):
        try:
            ep.load()
        except Exception as exc:  # a third party's import error: the kind is left out, said once
            logging.getLogger(__name__).warning(
                "claim plugin %r (%s) left out: %s: %s", ep.name, ep.value, type(exc).__name__, exc
            )


def claim_tests() -> list:
    """Every registered :class:`ClaimTest` (installed plugins included), in the order they
    are shown (``order``, then registration)."""
    _load_plugins()
    return sorted(_TESTS.values(), key=lambda t: t.order)


def claim_kinds() -> tuple:
    """The registered claim kinds (installed plugins included), in the order they are shown."""
    return tuple(t.kind for t in claim_tests())


def claim_test(kind: str) -> ClaimTest:
    """The :class:`ClaimTest` of ``kind``.

    Raises:
        KeyError: no such kind is registered.
    """
    _load_plugins()
    return _TESTS[kind]
