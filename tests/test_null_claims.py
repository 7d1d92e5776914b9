"""Claims calibrated on a null model (analyses/claims/null_model.py): a model that learned
nothing gets each claim for no more heads than the FDR allows, and the trained zoo heads
keep theirs (tests/test_claims.py)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from probe.analyses.claims import thresholds as T
from probe.analyses.common.objective import parse_target


def _random(kind: str, tokenizer):
    import transformers as T_

    from conftest import _tiny_configs
    from probe.models import ModelAdapter

    family, cls = {
        "bert": ("bert", T_.BertModel),
        "bert-mlm": ("bert", T_.BertForMaskedLM),
        "bert-classifier": ("bert", T_.BertForSequenceClassification),
        "gpt2": ("gpt2", T_.GPT2LMHeadModel),
        "llama-gqa": ("llama", T_.LlamaForCausalLM),
        "t5": ("t5", T_.T5ForConditionalGeneration),
    }[kind]
    torch.manual_seed(0)
    model = cls(_tiny_configs(len(tokenizer))[family]).eval()
    return ModelAdapter(name=f"random-{kind}", model=model, tokenizer=tokenizer, family=family)


def _claims(adapter, limit=12, **kw):
    from probe.analyses.claims.heads import head_claims
    from probe.app.report.bundled import sample_corpus
    from probe.runs.capture import capture

    corpus = sample_corpus(limit=limit)
    maps = capture(adapter, list(corpus.texts), word_spans=list(corpus.word_spans))
    from probe.analyses.common.objective import resolve_objective

    kw["objective"] = resolve_objective(kw.get("objective", "auto"), adapter, corpus)[0]  # the run's, resolved once
    return head_claims(adapter, corpus, maps, **kw)


def test_reinitialised_model_is_a_fresh_draw_of_the_same_shape(bert_tokenizer):
    from probe.analyses.claims.null_model import reinitialised

    adapter = _random("bert-classifier", bert_tokenizer)
    null = reinitialised(adapter.model, seed=3)
    q0 = adapter.model.bert.encoder.layer[0].attention.self.query.weight
    q1 = null.bert.encoder.layer[0].attention.self.query.weight
    assert q0.shape == q1.shape and not torch.equal(q0, q1)
    assert abs(q1.std().item() - adapter.model.config.initializer_range) < 0.005  # the model's own initialiser
    assert torch.equal(reinitialised(adapter.model, seed=3).classifier.weight, null.classifier.weight)  # seeded
    assert not null.training


@pytest.mark.parametrize("kind", ["bert-classifier", "gpt2", "t5"])
def test_permuted_model_shuffles_each_attention_weight_across_heads_and_layers(kind, bert_tokenizer):
    """The permuted null: each kind of attention weight keeps its multiset of entries pooled
    over the layers (so its scale and distribution), its entries move across heads and
    layers, every other parameter (embeddings, MLPs, norms, the output bias) is unchanged,
    the model itself is untouched and the draw is seeded."""
    from probe.analyses.claims.null_model import null_adapter, permuted

    adapter = _random(kind, bert_tokenizer)
    with torch.no_grad():  # trained-like weights: distinct per layer, so a move across layers shows
        for p in adapter.model.parameters():
            p.add_(torch.randn_like(p) * 0.01)
    before = {n: p.detach().clone() for n, p in adapter.model.named_parameters()}
    null = permuted(adapter, seed=3)
    after = dict(null.named_parameters())
    assert all(torch.equal(p, before[n]) for n, p in adapter.model.named_parameters())  # untouched
    heads_weights = {
        "bert-classifier": (
            "attention.self.query.weight",
            "attention.self.value.bias",
            "attention.output.dense.weight",
        ),
        "gpt2": ("attn.c_attn.weight", "attn.c_proj.weight"),
        "t5": ("SelfAttention.q.weight", "EncDecAttention.o.weight", "SelfAttention.relative_attention_bias.weight"),
    }[kind]
    moved = set()
    for suffix in heads_weights:
        names = sorted(n for n in before if n.endswith(suffix))
        assert names, suffix
        stacks = {n.split(".")[0] + n.split(".")[1] if kind == "t5" else "" for n in names}
        for stack in stacks:
            group = [n for n in names if (n.split(".")[0] + n.split(".")[1] if kind == "t5" else "") == stack]
            old = torch.cat([before[n].reshape(-1) for n in group])
            new = torch.cat([after[n].detach().reshape(-1) for n in group])
            assert torch.equal(old.sort().values, new.sort().values), group  # the same entries
            assert (old == new).float().mean() < 0.05, group  # shuffled
            moved.update(group)
            if len(group) > 1:  # entries crossed layers: layer 0 now holds values of layer 1
                assert torch.isin(after[group[0]].detach(), before[group[1]]).any()
    kept = [n for n in before if not any(n.endswith(s) for s in heads_weights) and "attn" not in n.lower()]
    kept = [n for n in kept if "attention" not in n.lower() and "Attention" not in n]
    assert kept and all(torch.equal(after[n].detach(), before[n]) for n in kept)
    assert all(torch.equal(a, b) for a, b in zip(permuted(adapter, seed=3).parameters(), null.parameters()))
    out_bias = [n for n in before if n.endswith(("attention.output.dense.bias", "attn.c_proj.bias"))]
    assert all(torch.equal(after[n].detach(), before[n]) for n in out_bias)  # not a head's
    card = null_adapter(adapter, seed=3, kind="permute").card
    assert (
        card["null_source"].startswith("the model with its attention weights permuted")
        and "seed 3" in card["null_source"]
    )


def test_random_classifier_calibrated_on_the_permuted_null(bert_tokenizer):
    """The issue's failing case under the second null: a random BertForSequenceClassification
    read as a sentence encoder holds necessity (and every other claim) for no more than the
    FDR share of its heads, each claim naming the permuted null as its source."""
    hc = _claims(_random("bert-classifier", bert_tokenizer), objective="similarity-structure", null="permute")
    n = len(hc.claims)
    for claim in ("pattern", "structure", "necessity", "redundancy", "weights"):
        assert sum(c[claim].holds for c in hc.claims.values()) <= T.FDR * n, claim
    nec = hc.claims[(0, 0)]["necessity"]
    assert nec.extra["null_source"].startswith("the model with its attention weights permuted")
    assert nec.extra["null_quantile"] > T.min_effect("similarity-structure")  # the bar the floor alone missed
    assert "attention weights permuted across heads and layers" in " ".join(hc.notes)


def test_an_unknown_null_is_refused(bert_tokenizer):
    from probe.errors import InputError

    with pytest.raises(InputError, match="unknown null model 'shuffle'; known: reinit, permute, none"):
        _claims(_random("bert", bert_tokenizer), limit=6, null="shuffle")


def test_necessity_against_a_null_sweep_closed_form():
    """A head 0.3 above every null head on every example holds; heads drawn like the null's
    do not, although each clears the floor (the old rule held them all)."""
    from probe.analyses.claims.necessity import NullSweep, necessity_claims

    rng = np.random.default_rng(0)
    n, m = 24, 8
    null_harm = 0.1 + 0.02 * rng.standard_normal((m, n))
    harm = 0.1 + 0.02 * rng.standard_normal((m, n))
    harm[3] += 0.3
    sweep = lambda h: SimpleNamespace(  # noqa: E731
        units=tuple(((0, i),) for i in range(m)),
        harm={"mean": h},
        measures={},
        corpus={},
        objective="similarity-structure",
        describe="",
        units_text="1 − ρ",
    )
    calibrated = necessity_claims(sweep(harm), null=NullSweep(sweep(null_harm), "a null"))
    assert [c.status for c in calibrated.values()].count("holds") == 1 and calibrated[(0, 3)].holds
    c = calibrated[(0, 0)]
    q = np.quantile(null_harm, 0.95, axis=0).mean()
    assert c.extra["null_quantile"] == pytest.approx(q) and c.extra["null_source"] == "a null"
    assert c.extra["null_max"] == pytest.approx(null_harm.mean(1).max())
    assert all(c.holds for c in necessity_claims(sweep(harm)).values())  # the floor alone: all 8


def test_random_classifier_necessity_reproduced_and_calibrated(bert_tokenizer):
    """The issue's failure: a random BertForSequenceClassification read as a sentence
    encoder held necessity for every head against the fixed floor; calibrated, ≤ FDR."""
    adapter = _random("bert-classifier", bert_tokenizer)
    floor_only = _claims(adapter, null="none", objective="similarity-structure")
    n = len(floor_only.claims)
    assert sum(c["necessity"].holds for c in floor_only.claims.values()) >= n // 2  # the failure, reproduced
    hc = _claims(adapter, objective="similarity-structure")
    assert sum(c["necessity"].holds for c in hc.claims.values()) <= T.FDR * n
    nec = hc.claims[(0, 0)]["necessity"]
    assert (
        nec.extra["null_source"].startswith("the model re-initialised") and nec.extra["p_null"] == nec.extra["p_null"]
    )
    assert "quantile over the heads of the model re-initialised" in " ".join(hc.notes)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["bert", "bert-mlm", "gpt2", "llama-gqa", "t5"])
def test_random_models_get_no_claims(kind, bert_tokenizer):
    """Every claim on a random model of each kind holds for at most the FDR share of its heads."""
    hc = _claims(_random(kind, bert_tokenizer))
    n = len(hc.claims)
    for claim in ("pattern", "structure", "necessity", "redundancy", "weights"):
        held = sum(c[claim].holds for c in hc.claims.values())
        assert held <= T.FDR * n, (kind, claim, held)


def test_word_scores_average_pieces():
    from probe.analyses.common.word_scores import to_words

    scores = np.array([1.0, 2.0, 4.0, 8.0])
    ids = (None, 0, 0, 1)  # word 0 in two pieces
    assert to_words(scores, ids, 2).tolist() == [6.0, 8.0]
    assert to_words(scores, ids, 2, mean=True).tolist() == [3.0, 8.0]


def test_random_gpt2_attribution_agreement_calibrated_and_ig_gated(bert_tokenizer):
    """Attribution agreement on a random GPT-2: pieces averaged, IG gated at 1% completeness
    and the bar the null model's heads reach: no head agrees."""
    from probe.analyses.claims.attribution import attribution_claims
    from probe.analyses.explanation.completeness import TOLERANCE, relative_errors
    from probe.analyses.explanation.faithfulness import run_faithfulness
    from probe.app.report.bundled import sample_corpus

    adapter = _random("gpt2", bert_tokenizer)
    rep = run_faithfulness(
        adapter, sample_corpus(limit=10), parse_target("loss:-1", adapter), methods=("ig",), n_steps=4, permute=False
    )
    heads = [(layer, h) for layer in range(2) for h in range(4)]
    claims = attribution_claims(heads, rep.verdict, rep.info)
    assert sum(c.holds for c in claims.values()) <= T.FDR * len(heads)
    gate, null = rep.info["ig_gate"], rep.info["null_agreement"]
    err = relative_errors(rep.attributions)
    used = [i for i in range(len(err)) if err[i] <= TOLERANCE]
    assert gate["n"] == 10 and gate["excluded"] == 10 - len(used)
    assert gate["max_relative_error_used"] <= TOLERANCE
    c = claims[(0, 0)]
    assert c.null == pytest.approx(max(0.0, null["tau_max"])) and c.extra["null_source"] == null["source"]
    assert c.count == 10 - gate["excluded"]


def test_a_sequence_classifier_is_judged_on_its_head(bert_tokenizer):
    """auto resolves a sequence classifier to the KL of its predicted distribution; the
    harm is KL(clean ‖ perturbed), computed here by scipy."""
    from scipy.special import rel_entr, softmax

    from probe.analyses.common.objective import resolve_objective

    adapter = _random("bert-classifier", bert_tokenizer)
    obj, why = resolve_objective("auto", adapter)
    assert obj.name == "prediction-kl" and "classification head" in why
    assert resolve_objective("auto", _random("bert", bert_tokenizer))[0].name != "prediction-kl"
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((5, 3)), rng.standard_normal((5, 3))
    la, lb = np.log(softmax(a, -1)), np.log(softmax(b, -1))
    assert np.allclose(obj.harm(la, lb), rel_entr(softmax(a, -1), softmax(b, -1)).sum(-1))
    assert np.allclose(obj.harm(la, la), 0)
    hc = _claims(adapter, limit=10)
    assert hc.objective["objective"] == "prediction-kl"
    assert sum(c["necessity"].holds for c in hc.claims.values()) <= T.FDR * len(hc.claims)


def test_attribution_claim_is_not_tested_when_its_null_could_not_be_computed():
    """The same strong agreement holds against a computed null below it, and is "not tested"
    (never held against a bar of 0) when the faithfulness run asked for its null and could not
    compute it."""
    import pandas as pd

    from probe.analyses.claims.attribution import attribution_claims

    verdict = pd.DataFrame({"layer": [0], "head": [0], "tau_ig": [0.9], "tau_ig_significant": [1.0]})
    verdict.attrs["reference"] = "ig"
    info = {"n_examples": 8, "target": "logit"}
    null = {"tau_max": 0.1, "tau_quantile": 0.05, "source": "re-initialised", "significant_max": 0.0}
    held = attribution_claims([(0, 0)], verdict, dict(info, null_agreement=null))[(0, 0)]
    assert held.status == "holds", held
    missing = attribution_claims([(0, 0)], verdict, dict(info, null_agreement_unavailable=True))[(0, 0)]
    assert missing.status == "not tested" and "null model" in missing.reason
