"""Claim kinds as a registered protocol: :class:`ClaimTest`.

A claim kind is one :class:`ClaimTest`: its name (``kind``), what it tests, how it is
computed (``compute(inputs) -> {(layer, head): Claim}`` from :class:`ClaimInputs`) and how
it renders (its head-page ``title``, its evidence sentence ``evidence(claim) -> Evidence``
and, optionally, its words in the head's one-line summary). :func:`head_claims
<probe.analyses.claims.heads.head_claims>` computes every registered kind, in registration
order; head pages, ``report.md``, ``summary.json`` (``heads[i].claims``) and the claims'
tables list them all. A new kind is one module that calls :func:`register_claim`::

    from probe.analyses.claims.claim import Claim
    from probe.analyses.claims.protocol import ClaimTest, register_claim

    def compute(inputs):                      # ClaimInputs: heads, maps, corpus, adapter, …
        return {key: Claim("sharp", "holds", effect=0.9, count=12) for key in inputs.heads}

    register_claim(ClaimTest("sharp", "Sharpness", "its rows peak on one token", compute))

An installed package adds a kind by naming that module under the entry-point group
``attention_probe.claims`` (:data:`PLUGIN_GROUP`): it is imported (and so registers its
kinds) the first time the kinds are listed; one that fails to import is left out with one
logged line.

The six built-in kinds (pattern, structure, necessity, redundancy, weights, attribution)
are registered here. Their computations share one pipeline (weights and redundancy read the
necessity sweep, redundancy the pattern claims), so :func:`head_claims` runs it once and
their ``compute`` reads their part of it (``inputs.built``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

__all__ = ["PLUGIN_GROUP", "ClaimInputs", "ClaimTest", "claim_kinds", "claim_test", "claim_tests", "register_claim"]

#: the entry-point group an installed package names its claim-kind modules in
PLUGIN_GROUP = "attention_probe.claims"


@dataclass
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
        built: the built-in kinds' claims, ``{kind: {(layer, head): Claim}}``.
    """

    heads: list
    adapter: Any = None
    corpus: Any = None
    maps: list = field(default_factory=list)
    evidence: dict = field(default_factory=dict)
    built: dict = field(default_factory=dict)


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
    """

    kind: str
    title: str
    tests: str
    compute: Callable[[ClaimInputs], dict]
    evidence: Optional[Callable[[Any], Any]] = None  # (Claim) -> Evidence; this module imports neither
    summary: Optional[Callable[[Any], str]] = None


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


def _load_plugins() -> None:
    """Import, once, the modules installed packages name under :data:`PLUGIN_GROUP` (each
    calls :func:`register_claim`); one that fails to import is left out, said in one line."""
    global _PLUGINS_LOADED
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
    """Every registered :class:`ClaimTest` (installed plugins included), in the order they are shown."""
    _load_plugins()
    return list(_TESTS.values())


def claim_kinds() -> tuple:
    """The registered claim kinds (installed plugins included), in the order they are shown."""
    _load_plugins()
    return tuple(_TESTS)


def claim_test(kind: str) -> ClaimTest:
    """The :class:`ClaimTest` of ``kind``.

    Raises:
        KeyError: no such kind is registered.
    """
    _load_plugins()
    return _TESTS[kind]


def _built(kind: str) -> Callable[[ClaimInputs], dict]:
    def compute(inputs: ClaimInputs) -> dict:
        return inputs.built.get(kind, {})

    compute.__doc__ = f"The {kind} claims of the built-in pipeline (:func:`.heads.head_claims`)."
    return compute


for _kind, _title, _tests in (
    ("pattern", "Pattern", "its attention follows a named pattern, past a null model (Clark et al. 2019)"),
    ("structure", "Structure", "it finds a dependency relation better than the best fixed offset"),
    ("necessity", "Necessity", "removing it alone harms the objective past the floor (Wang et al. 2022)"),
    ("redundancy", "Redundancy", "removing it with its look-alikes harms more than each alone"),
    ("weights", "Do the weights matter", "uniform weights in its place harm the objective"),
    ("attribution", "Agreement with attributions", "its attention ranks tokens as the attributions do"),
):
    register_claim(ClaimTest(_kind, _title, _tests, _built(_kind)))  # rendered by .evidence.builtin_evidence
