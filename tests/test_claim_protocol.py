"""Claim kinds, pattern and causal alike, through one protocol (issue 56): the inputs carry
the objective, the runner, the null model and the thresholds, the built-in kinds are declared
in their own modules (found by one list, :data:`probe.analyses.claims.protocol.KIND_MODULES`),
and a causal kind in one module appears among the heads' claims and in a report's."""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys

import numpy as np
import pytest

TEXTS = [
    "The keys to the cabinet are on the table.",
    "A dog ran home after the rain.",
    "Birds sing in the morning.",
    "We left early because it rained.",
]


@pytest.fixture
def zero_harm(monkeypatch):
    """tests/zero_harm_claim.py imported (registered) into a copy of the claim kinds."""
    from probe.analyses.claims import protocol

    protocol.claim_kinds()  # the built-in kinds in place before the copy
    monkeypatch.setattr(protocol, "_TESTS", dict(protocol._TESTS))
    sys.modules.pop("zero_harm_claim", None)
    module = importlib.import_module("zero_harm_claim")
    module.SEEN.clear()
    yield module
    sys.modules.pop("zero_harm_claim", None)


def test_the_inputs_are_frozen_and_carry_what_a_causal_kind_tests_against():
    """``ClaimInputs`` is a frozen dataclass with the objective, runner, null and thresholds."""
    from probe.analyses.claims.protocol import ClaimInputs

    fields = {f.name for f in dataclasses.fields(ClaimInputs)}
    assert {"objective", "runner", "null", "thresholds", "adapter", "corpus", "causal"} <= fields
    inputs = ClaimInputs([(0, 0)])
    with pytest.raises(dataclasses.FrozenInstanceError):
        inputs.objective = "loss"  # type: ignore[misc]
    assert inputs.floor is None  # no objective, no floor


def test_the_built_in_kinds_are_declared_in_their_own_modules():
    """Each of the six built-in kinds is declared by the module that computes it (listed once
    in ``KIND_MODULES``), in the order the report shows them; ``claims/__init__.py`` imports
    nothing."""
    from pathlib import Path

    from probe.analyses.claims import protocol

    assert protocol.claim_kinds()[:6] == ("pattern", "structure", "necessity", "redundancy", "weights", "attribution")
    where = {
        t.kind: importlib.import_module(m) for m in protocol.KIND_MODULES for t in importlib.import_module(m).CLAIMS
    }
    assert {k: m.__name__.rsplit(".", 1)[1] for k, m in where.items()} == {
        "pattern": "pattern",
        "structure": "structure",
        "necessity": "necessity",
        "weights": "necessity",
        "redundancy": "redundancy",
        "attribution": "attribution",
    }
    init = Path(protocol.__file__).with_name("__init__.py").read_text()
    assert "import" not in init.replace('"""', "").split('"""')[-1]


def test_a_causal_claim_kind_is_one_module(zero_harm, tiny_models):
    """A kind that zero-ablates each head on the run's objective, runner and null model
    (tests/zero_harm_claim.py) is computed for every head by ``head_claims``: it saw the
    run's resolved objective, its runner, the null model and the thresholds, and its numbers
    are the removals' own (the same sweep run here again)."""
    from probe.analyses.claims.heads import head_claims
    from probe.analyses.claims.removal import removal_sweep
    from probe.analyses.claims.thresholds import min_effect
    from probe.analyses.common.metrics import as_corpus
    from probe.analyses.common.objective import resolve_objective
    from probe.runs.blocks import InProcess
    from probe.runs.capture import capture

    adapter = tiny_models["bert"]
    corpus = as_corpus(TEXTS)
    objective, why = resolve_objective("embedding-drift", adapter, corpus)
    runner = InProcess(adapter, False)
    maps = capture(adapter, list(corpus.texts))
    hc = head_claims(adapter, corpus, maps, objective=objective, objective_why=why, runner=runner, null="permute")
    (seen,) = zero_harm.SEEN
    assert seen.objective is objective and seen.runner is runner and seen.adapter is adapter
    assert seen.null is not None and seen.null.card["null_source"]  # the null model the claims calibrate on
    assert seen.floor == min_effect("embedding-drift") and seen.thresholds["fdr"]["value"] == 0.05
    want = removal_sweep(adapter, corpus, objective, units=seen.heads, modes=("zero",)).harm["zero"].mean(1)
    got = np.array([hc.claims[k][zero_harm.KIND].effect for k in seen.heads])
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert list(hc.counts().index)[-1] == zero_harm.KIND and zero_harm.KIND in set(hc.to_frame()["claim"])
    assert all(hc.claims[k]["necessity"].status != "not tested" for k in seen.heads)  # the built-in kinds still run


def test_a_causal_kind_appears_in_the_reports_claims(zero_harm, tiny_models, tmp_path):
    """Registered from one module, with no edit to the claims package, the kind is in the
    report's summary.json (each head's claims and the counts) and on its head pages."""
    from probe.analyses.common.metrics import as_corpus
    from probe.app.registry import open_run
    from probe.app.report.build import analyse, write_report

    ctx = open_run(None, as_corpus(TEXTS), adapter=tiny_models["bert"], objective="embedding-drift")
    data = analyse(ctx, sections=["claims"], strict=True)
    out = write_report(data, tmp_path / "report")
    summary = json.loads((out / "summary.json").read_text())
    claims = [h["claims"][zero_harm.KIND] for h in summary["heads"]]
    assert len(claims) == 8 and all(c["status"] in ("holds", "does not hold") for c in claims)
    assert sum(summary["claims"]["counts"][zero_harm.KIND].values()) == 8
    assert "Zero-ablation harm" in (out / "heads" / "L0H0.html").read_text()
