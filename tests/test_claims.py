"""Per-head claims (probe.analyses.claims): the statistics in closed form, every kind of
claim on a zoo model whose answer is known, and a random model that must not get them."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from probe.analyses.claims import thresholds as T
from probe.analyses.claims.statistics import benjamini_hochberg, mean_ci, paired_greater, wilson_interval
from probe.analyses.common.objective import parse_target

ZOO_EXAMPLES = 48  # enough for the paired tests, small for CI


# ---- statistics in closed form ---------------------------------------------------------
def test_benjamini_hochberg_step_up():
    # thresholds k·q/m for m = 4, q = 0.05: 0.0125, 0.025, 0.0375, 0.05
    assert benjamini_hochberg([0.01, 0.04, 0.03, 0.2]).tolist() == [True, False, False, False]
    assert benjamini_hochberg([0.01, 0.02, 0.03, 0.04]).tolist() == [True] * 4
    # step-up: 0.013 misses its own threshold (0.0125) but is rejected because 0.02 ≤ 0.025
    assert benjamini_hochberg([0.013, 0.02, 0.9, 0.9]).tolist() == [True, True, False, False]
    assert benjamini_hochberg([0.02, 0.2, 0.2, 0.04]).tolist() == [False] * 4
    assert benjamini_hochberg([np.nan, 0.001]).tolist() == [False, True]
    with pytest.raises(ValueError, match="false discovery rate"):
        benjamini_hochberg([0.1], q=0)


def test_paired_test_and_intervals():
    null = np.linspace(0, 1, 10)
    assert paired_greater(null + 1, null) == pytest.approx(1 / 2**10)  # exact: all 10 signs positive
    assert paired_greater(null, null) == 1.0
    assert paired_greater(null - 1, null) > 0.99
    assert mean_ci(np.full(20, 0.3)) == pytest.approx((0.3, 0.3, 0.3))
    m, lo, hi = mean_ci(np.arange(100.0))
    assert m == 49.5 and lo < 49.5 < hi and hi - lo < 25
    lo, hi = wilson_interval(7, 7)  # Wilson (1927): 7/7 at 95% → [0.646, 1]
    assert lo == pytest.approx(0.6457, abs=1e-3) and hi == 1.0
    with pytest.raises(ValueError):
        wilson_interval(3, 0)


def test_weighted_shares_and_null_geometry():
    from probe.analyses.claims.pattern import weighted_shares
    from probe.analyses.claims.perturb import random_rotations, rotate, uniform_output

    values = np.array([[1.0], [0.0], [np.nan]])
    mean, lo, hi = weighted_shares(values, np.array([3.0, 1.0, 5.0]))
    assert mean[0] == pytest.approx(0.75) and 0.0 <= lo[0] <= 0.75 <= hi[0] <= 1.0  # NaN example carries no weight
    g = torch.Generator().manual_seed(0)
    z = torch.randn(2, 5, 3, 4, dtype=torch.float64)
    q = random_rotations(2, 3, 4, g)
    assert torch.allclose(rotate(z, q).norm(dim=-1), z.norm(dim=-1))  # same norm at every position
    # the necessity null replaces z by z − Qz: its change −Qz is as large as the removal's (−z)
    null_output = z - rotate(z, q)
    assert torch.allclose((null_output - z).norm(dim=-1), (torch.zeros_like(z) - z).norm(dim=-1))
    assert not torch.allclose(rotate(z, q), z)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    u = uniform_output(z, mask, causal=False)
    assert torch.allclose(u[0, 4], z[0, :3].mean(0)) and torch.allclose(u[1, 0], z[1].mean(0))
    uc = uniform_output(z, mask, causal=True)
    assert torch.allclose(uc[1, 1], z[1, :2].mean(0))


def test_closed_form_maps_and_minimum_counts():
    from conftest import make_maps, previous_token, uniform

    from probe.analyses.claims.heads import head_claims
    from probe.analyses.claims.pattern import pattern_claims

    # head 0 attends to the previous token, head 1 uniformly: 40 examples × 10 query rows each
    maps = [make_maps(torch.cat([previous_token(10), uniform(10)], 1)) for _ in range(40)]
    claims, table = pattern_claims(maps)
    assert claims[(0, 0)].status == "holds" and claims[(0, 0)].statement == "previous-token"
    assert claims[(0, 0)].effect == pytest.approx(1.0) and claims[(0, 0)].ci_low == pytest.approx(1.0)
    assert claims[(0, 1)].statement == "broad" and claims[(0, 1)].effect == pytest.approx(1.0)
    prev = table[(table["head"] == 1) & (table["feature"] == "prev")]["share"].item()
    assert prev == pytest.approx(0.1)  # uniform over 10 keys
    # 3 examples × 10 rows < PATTERN_MIN_ROWS: stated as not enough evidence, never as a role
    few, _ = pattern_claims(maps[:3])
    assert {c.status for c in few.values()} == {"not enough evidence"} and few[(0, 0)].count == 30
    # no model: the causal claims say why they were not tested
    hc = head_claims(None, type("C", (), {"sentences": None, "examples": None})(), maps[:3])
    assert hc.claims[(0, 0)]["necessity"].status == "not tested" and hc.claims[(0, 0)]["necessity"].reason


# ---- power: what a claim that does not hold could have detected ---------------------------
Z95, Z80 = 1.6448536, 0.8416212  # one-sided 5% and 80% normal quantiles (tables)


def test_detectable_effect_and_share_shrink_with_n_and_match_closed_form():
    from math import comb

    from probe.analyses.claims.statistics import detectable_effect, detectable_share

    base = np.array([0.0, 0.01, 0.03, 0.02, 0.05, 0.04, 0.01, 0.02])
    ds = [detectable_effect(np.tile(base, k), 0.02, q=T.FDR, power=T.POWER) for k in (1, 4, 16)]
    assert ds[0] > ds[1] > ds[2] > 0.02
    v = np.tile(base, 4)
    assert ds[1] == pytest.approx(0.02 + (Z95 + Z80) * v.std(ddof=1) / np.sqrt(v.size), rel=1e-6)
    # attribution: the smallest per-example rate at which n examples reach a 50% share in 80% of samples
    shares = [detectable_share(n, 0.5, 0.8) for n in (8, 32, 128)]
    assert shares[0] > shares[1] > shares[2] > 0.5

    def reach(n, p):  # P(at least ceil(n/2) of n), summed by hand
        return sum(comb(n, k) * p**k * (1 - p) ** (n - k) for k in range((n + 1) // 2, n + 1))

    grid = np.arange(0.5, 1.0, 1e-4)
    brute = next(p for p in grid if reach(10, p) >= 0.8)
    assert detectable_share(10, 0.5, 0.8) == pytest.approx(brute, abs=2e-4)


def _cls_maps(shares) -> list:
    """One head per example: ``s`` of every non-special row on [CLS], the rest split over the
    previous token, itself and the next token (no role rule clears: to_special < 50%)."""
    from conftest import make_maps

    n = 12
    special = [True] + [False] * (n - 2) + [True]
    out = []
    for s in shares:
        a = torch.zeros(n, n)
        a[0, 0] = a[-1, -1] = 1.0
        for i in range(1, n - 1):
            a[i, 0] += s
            for j in (i - 1, i, i + 1):
                a[i, j] += (1 - s) / 3
        out.append(make_maps(a[None, None], special=special))
    return out


def test_pattern_power_shrinks_with_n_and_matches_an_independent_computation():
    from probe.analyses.claims.evidence import claim_evidence, pct
    from probe.analyses.claims.pattern import pattern_claims

    rng = np.random.default_rng(0)
    got = []
    for E in (20, 80):
        maps = _cls_maps(rng.uniform(0.3, 0.45, size=E))
        c = pattern_claims(maps)[0][(0, 0)]
        assert c.status == "does not hold" and c.extra["nearest_rule"] == "special-token"
        # independently: each example's share on [CLS]/[SEP] over its non-special rows, plain torch
        per = np.array([float(m.attentions[0, 0, 1:-1][:, [0, -1]].sum(-1).mean()) for m in maps])
        assert c.extra["nearest_share"] == pytest.approx(per.mean(), abs=1e-6)  # float32 maps
        # the rule compares the share with 50% (no test level): 50% + z_0.8 · se, se ≈ sd / √E
        expect = T.SPECIAL + Z80 * per.std() / np.sqrt(E)
        assert c.extra["detectable"] - T.SPECIAL == pytest.approx(expect - T.SPECIAL, rel=0.2)
        ev = claim_evidence("pattern", c)
        assert ev.detectable == c.extra["detectable"] and f"could have detected: {pct(ev.detectable)}" in ev.text
        got.append(c.extra["detectable"])
    assert got[0] > got[1] > T.SPECIAL


def test_attribution_and_necessity_state_their_power_in_the_evidence():
    import pandas as pd

    from probe.analyses.claims.attribution import attribution_claims
    from probe.analyses.claims.evidence import claim_evidence, pct
    from probe.analyses.claims.statistics import detectable_share

    verdict = pd.DataFrame({"layer": [0, 0], "head": [0, 1], "tau_ig": [0.3, 0.1], "tau_ig_significant": [0.7, 0.2]})
    for n in (10, 40):
        claims = attribution_claims([(0, 0), (0, 1)], verdict, {"target": "logit", "n_examples": n})
        assert claims[(0, 0)].holds and "detectable" not in claims[(0, 0)].extra
        c = claims[(0, 1)]
        ev = claim_evidence("attribution", c)
        assert ev.detectable == pytest.approx(detectable_share(n)) and pct(ev.detectable) in ev.text
        assert ev.to_dict()["detectable"] == ev.detectable  # what summary.json carries


# ---- zoo models with known answers -----------------------------------------------------
def _claims(task: str, limit: int = ZOO_EXAMPLES, **kw):
    from probe.analyses.claims.heads import head_claims
    from probe.runs.capture import capture
    from probe.inputs.corpus import fit_to_model, load_corpus
    from probe.models import load_model

    adapter = load_model(f"zoo:{task}")
    corpus = fit_to_model(load_corpus(model=f"zoo:{task}", limit=limit), adapter)
    maps = capture(adapter, list(corpus.texts))
    from probe.analyses.common.objective import resolve_objective

    kw.setdefault("objective", resolve_objective("auto", adapter, corpus)[0])  # the run's, resolved once
    return adapter, corpus, head_claims(adapter, corpus, maps, **kw)


@pytest.mark.parametrize("null", ["reinit", "permute"])
def test_prev_token_zoo(null):
    """The trained heads keep their claims under either null model (analyses/claims/null_model.py)."""
    _, _, hc = _claims("prev-token", null=null)
    assert (
        hc.claims[(0, 1)]["necessity"]
        .extra["null_source"]
        .startswith(
            {"reinit": "the model re-initialised", "permute": "the model with its attention weights permuted"}[null]
        )
    )
    used, idle = hc.claims[(0, 1)], hc.claims[(0, 0)]
    assert used["pattern"].status == "holds" and used["pattern"].statement == "previous-token"
    assert used["necessity"].status == "holds" and used["necessity"].count == ZOO_EXAMPLES
    assert used["necessity"].ci_low > used["necessity"].extra["min_effect"]
    assert used["weights"].status == "holds"
    # head 0-0 attends to the previous token but its output was trained to ≈ 0
    assert idle["pattern"].status == "holds" and idle["pattern"].statement == "previous-token"
    assert idle["necessity"].status == "does not hold"
    assert idle["weights"].status == "does not hold"
    # the modes beside necessity run for the necessary head alone (held_heads.BESIDE_MODES), measured
    for mode in ("zero", "resample", "random"):
        assert used["necessity"].extra[f"{mode}_harm"]["effect"] > 0
        assert f"{mode}_harm" not in idle["necessity"].extra
    assert used["necessity"].extra["times_random"] == pytest.approx(
        used["necessity"].effect / used["necessity"].extra["random_harm"]["effect"]
    )
    assert "times_random" not in idle["necessity"].extra
    removal = hc.tables["removal"]
    # the held head is also removed under one mean over all positions (the baseline it must survive, issue 58)
    assert set(removal[(removal["layer"] == 0) & (removal["head"] == 1)]["mode"]) == {
        "mean", "uniform", "zero", "resample", "random", "one-mean"
    }  # fmt: skip
    assert set(removal[(removal["layer"] == 0) & (removal["head"] == 0)]["mode"]) == {"mean", "uniform"}
    assert "needed alone" in hc.summary((0, 1)) and "not shown to be needed alone" in hc.summary((0, 0))
    assert used["structure"].status == "not tested"  # no dependency annotation


@pytest.mark.parametrize("null", ["reinit", "permute"])
def test_induction_zoo_redundant_group(null):
    _, _, hc = _claims("induction", null=null)
    assert hc.claims[(0, 3)]["necessity"].status == "holds"
    assert hc.claims[(0, 3)]["pattern"].statement == "previous-token"
    for h in range(4):
        c = hc.claims[(1, h)]
        assert c["pattern"].status == "holds" and c["pattern"].statement == "induction"
        assert c["necessity"].status == "does not hold"
        assert c["redundancy"].status == "holds" and c["redundancy"].statement == "needed as a group of 4"
        assert "redundant: needed as a group of 4" in hc.summary((1, h))
        # the group that holds gets its same-norm random perturbation beside it (context)
        assert c["redundancy"].extra["random_harm"] is not None and c["redundancy"].extra["random_harm"] >= 0
    groups = hc.tables["groups"]
    assert groups[groups["holds"]]["random"].notna().all() and groups[~groups["holds"]]["random"].isna().all()


def test_constructed_zoo_patterns():
    _, _, hc = _claims("constructed")
    assert hc.claims[(0, 0)]["pattern"].statement == "previous-token"
    assert hc.claims[(0, 1)]["pattern"].statement == "special-token"  # the role probe roles names it
    assert hc.claims[(0, 1)]["pattern"].extra["parks_on"] == "[CLS]"
    assert hc.claims[(0, 1)]["pattern"].effect > 0.99


def test_brackets_zoo_supervised_head_is_structural():
    _, _, hc = _claims("brackets")
    s = hc.claims[(2, 1)]["structure"]
    assert s.status == "holds" and s.statement == "match (dep to head)"
    assert s.count >= T.STRUCTURE_MIN_COUNT and s.ci_low > 0 and s.extra["accuracy"] > 0.95
    assert hc.claims[(0, 3)]["structure"].status == "does not hold"
    # every token is a bracket: attention to punctuation is no pattern here
    assert all(c["pattern"].statement != "punctuation" for c in hc.claims.values())


@pytest.mark.slow
def test_agreement_zoo_evidence_heads_not_called_meaningless():
    from probe.analyses.claims.attribution import attribution_claims
    from probe.analyses.explanation.faithfulness import run_faithfulness

    adapter, corpus, hc = _claims("agreement", limit=32)
    rep = run_faithfulness(
        adapter,
        corpus,
        parse_target("logit", adapter),
        methods=("ig",),
        attention_methods=("attention",),
        n_steps=8,
        n_permutations=1,
        max_examples=16,
    )
    attr = attribution_claims(sorted(hc.claims), rep.verdict, rep.info)
    finders = [k for k, c in attr.items() if (c.extra.get("evidence_top1_rate") or 0) >= 0.5]
    assert finders, "some head of zoo:agreement ranks the evidence word first in most examples"
    for k in finders:
        hc.claims[k]["attribution"] = attr[k]
        text = hc.summary(k)
        assert "evidence word first" in text
        for word in ("irrelevant", "meaningless", "no effect"):
            assert word not in text


# ---- a random model must not get the claims ------------------------------------------------
@pytest.mark.slow
def test_random_minilm_shape_gets_no_structure_and_few_discoveries():
    import transformers as T_

    from probe.analyses.claims.heads import head_claims
    from probe.app.report.bundled import sample_corpus
    from probe.runs.capture import capture
    from probe.models import ModelAdapter
    from probe.models.registry import minilm_path

    cfg = T_.BertConfig.from_pretrained(str(minilm_path()), local_files_only=True)
    torch.manual_seed(0)
    model = T_.BertModel(cfg).eval()
    tok = T_.AutoTokenizer.from_pretrained(str(minilm_path()), local_files_only=True)
    adapter = ModelAdapter(name="random-minilm", model=model, tokenizer=tok, family="bert")
    corpus = sample_corpus(limit=16)
    maps = capture(adapter, list(corpus.texts), word_spans=list(corpus.word_spans))
    from probe.analyses.common.objective import resolve_objective

    hc = head_claims(adapter, corpus, maps, objective=resolve_objective("auto", adapter, corpus)[0])
    n = len(hc.claims)
    assert n == 72
    status = lambda kind: [c[kind].status for c in hc.claims.values()]  # noqa: E731
    assert "holds" not in status("structure")
    assert status("necessity").count("holds") / n <= T.FDR
    assert status("weights").count("holds") / n <= T.FDR
    assert status("attribution") == ["not tested"] * n


# ---- the report ------------------------------------------------------------------------
def test_report_has_claims_per_head(tmp_path):
    from probe.app.report import build_report

    data = build_report(tmp_path / "r", model="zoo:prev-token", limit=24, sections=["ablation", "claims"])
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    head = next(h for h in summary["heads"] if (h["layer"], h["head"]) == (0, 1))
    assert set(head["claims"]) == {"pattern", "structure", "necessity", "redundancy", "weights", "attribution"}
    nec = head["claims"]["necessity"]
    assert nec["status"] == "holds" and nec["count"] == 24 and nec["ci_low"] > 0 and nec["null"] is not None
    assert head["verdict"].startswith("Previous-token head")
    assert summary["claims"]["counts"]["necessity"]["holds"] == 1
    assert "fdr" in summary["claims"]["thresholds"]
    md = (tmp_path / "r" / "report.md").read_text()
    assert "## Claims" in md and "needed alone" in md
    page = (tmp_path / "r" / "heads" / "L0H1.html").read_text()
    assert "<h2>Claims</h2>" in page and "same-norm random perturbation" in page
    assert "Mean-ablating the head" in page and "floor" in page
    assert data.claims.claims[(0, 0)]["necessity"].status == "does not hold"
