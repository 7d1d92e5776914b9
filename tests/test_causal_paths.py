"""The causal claims' one engine (issue 56): the exhaustive, screened and sequential paths
behind one interface (:mod:`probe.analyses.claims.causal_paths`), the one ``--causal`` names,
and one record of what was decided and how (``HeadClaims.record``)."""

from __future__ import annotations

import pytest

from probe.errors import InputError

TEXTS = [
    "The keys to the cabinet are on the table.",
    "A dog ran home after the rain.",
    "Birds sing in the morning.",
    "We left early because it rained.",
]


def _claims(adapter, causal: str):
    from probe.analyses.claims.heads import head_claims
    from probe.analyses.common.metrics import as_corpus
    from probe.analyses.common.objective import resolve_objective
    from probe.runs.capture import capture

    corpus = as_corpus(TEXTS)
    objective, why = resolve_objective("embedding-drift", adapter, corpus)
    maps = capture(adapter, list(corpus.texts))
    return head_claims(adapter, corpus, maps, objective=objective, objective_why=why, causal=causal, null="none")


def test_the_paths_are_the_ones_causal_names():
    """``--causal``'s paths (less ``auto``, which the run settles) are the registered ones."""
    from probe.analyses.claims.causal_paths import CAUSAL, PATHS
    from probe.app.registry.analyses._shared import CAUSAL as OPTION

    assert CAUSAL == tuple(PATHS) == ("exhaustive", "screened", "sequential")
    assert set(OPTION.choices) - {"auto"} == set(PATHS)
    assert all(p.name == name for name, p in PATHS.items())


@pytest.mark.parametrize("path", ["exhaustive", "sequential"])
def test_one_record_of_what_was_decided_and_how(tiny_models, path):
    """Each path fills the same record: its name, the three kinds' claims (the ones the heads
    carry), the objective's info (``HeadClaims.objective``) and the path's notes and tables."""
    hc = _claims(tiny_models["bert"], path)
    record = hc.record
    assert record is not None and record.path == path
    assert record.info is hc.objective and record.info["objective"] == "embedding-drift"
    for kind in ("necessity", "weights", "redundancy"):
        got = getattr(record, kind)
        assert set(got) == set(hc.claims)
        assert all(hc.claims[head][kind].status == got[head].status for head in got)
    assert all(note in hc.notes for note in record.notes) and set(record.tables) <= set(hc.tables)
    assert ("decided" in record.tables) == (path == "sequential")  # how it was decided
    assert ("removal" in record.tables) == (path == "exhaustive")


def test_a_new_path_is_one_class(tiny_models, monkeypatch):
    """A class with ``name`` and ``decide(inputs, record)``, registered, is a path ``head_claims``
    takes by name: it receives the run's objective and the heads, and its claims are the heads'."""
    from probe.analyses.claims import causal_paths
    from probe.analyses.claims.claim import Claim

    seen = {}

    class Everywhere:
        name = "everywhere"

        def decide(self, inputs, record):
            seen["objective"], seen["heads"] = inputs.objective, list(inputs.heads)
            record.necessity = {h: Claim("necessity", "holds", statement="needed alone") for h in inputs.heads}
            record.notes.append("every head needed, by decree")

    monkeypatch.setitem(causal_paths.PATHS, "everywhere", Everywhere())
    hc = _claims(tiny_models["bert"], "everywhere")
    assert seen["objective"].name == "embedding-drift" and seen["heads"] == sorted(hc.claims)
    assert {c["necessity"].status for c in hc.claims.values()} == {"holds"}
    assert hc.record.path == "everywhere" and "every head needed, by decree" in hc.notes
    assert {c["weights"].status for c in hc.claims.values()} == {"not tested"}  # what the path left


def test_an_unknown_path_is_refused_naming_the_known(tiny_models):
    from probe.analyses.claims.causal_paths import decide_causal

    with pytest.raises(InputError, match="unknown causal path 'banana'; use exhaustive or screened or sequential"):
        decide_causal("banana", None, [(0, 0)])
    with pytest.raises(InputError, match="unknown causal path 'banana'"):
        _claims(tiny_models["bert"], "banana")
