"""Targets and captum attributions: shapes, completeness, a model that reads one token."""

from __future__ import annotations

import numpy as np
import pytest

from probe.errors import NotApplicable
import torch

from probe.analyses.explanation.attributions import METHODS, attribute, baseline_ids
from probe.analyses.common.targets import CallableTarget, ClassLogit, LMLoss, ProbeLogit, check_scalar
from probe.analyses.common.objective import parse_target

TEXTS = ["the keys to the cabinet are here", "a dog barks", "she sees the old house near the river"]
POS = 2  # the one position the hand-built model reads


@pytest.fixture(scope="module")
def one_token_bert(tiny_models):
    """The tiny BERT with every attention output projection zeroed: position i's final
    state depends on token i only (plus constant position embeddings)."""
    import copy

    from probe.models import ModelAdapter

    base = tiny_models["bert"]
    model = copy.deepcopy(base.model)
    with torch.no_grad():
        for layer in model.encoder.layer:
            layer.attention.output.dense.weight.zero_()
            layer.attention.output.dense.bias.zero_()
    return ModelAdapter(name="one-token-bert", model=model, tokenizer=base.tokenizer, family="bert")


def _reads_pos(out, mask):
    torch.manual_seed(1)
    return out.last_hidden_state[:, POS] @ torch.linspace(-1, 1, out.last_hidden_state.shape[-1])


def test_every_attribution_ranks_the_only_token_read_first(one_token_bert):
    a = one_token_bert
    encs = [a.encode(t) for t in TEXTS]
    res = attribute(
        a, CallableTarget(_reads_pos, positions=[POS]), encs, n_steps=20, internal_batch_size=8, batch_size=2
    )
    assert res.methods == METHODS
    for i, ex in enumerate(res.examples):
        assert ex.index == i and ex.tokens == encs[i].tokens  # input order restored after length sorting
        for m in METHODS:
            s = np.abs(ex.scores[m])
            assert s.shape == (len(encs[i]),)
            assert int(s.argmax()) == POS, (m, s)
            others = np.delete(s, POS)
            assert others.max() <= 1e-6 * max(s[POS], 1e-12) + 1e-9, (m, s)
        # IG of the only token carries the whole difference f(x) − f(baseline)
        assert ex.scores["ig"].sum() == pytest.approx(ex.value - ex.baseline_value, rel=1e-2, abs=1e-6)
        # blank-out of the read token is exactly f(x) − f(x with [PAD] there)
        assert ex.scores["blank_out"][POS] == pytest.approx(ex.value - ex.baseline_value, rel=1e-4, abs=1e-6)


def test_word_scores_sum_tokens_of_each_word(one_token_bert):
    a = one_token_bert
    enc = a.encode("unbelievably quick")  # the first word splits into several word pieces
    res = attribute(a, CallableTarget(_reads_pos, positions=[POS]), [enc], methods=["saliency"])
    ex = res.examples[0]
    w = ex.word_scores("saliency")
    expect = [sum(ex.scores["saliency"][t] for t, wid in enumerate(enc.word_ids) if wid == k) for k in range(2)]
    assert w.tolist() == pytest.approx(expect)
    assert res.to_frame().shape[0] == len(enc)


def test_baseline_keeps_special_tokens(one_token_bert):
    a = one_token_bert
    encs = [a.encode(t) for t in TEXTS[:2]]
    b = a.batch(encs)
    special = torch.ones_like(b["input_ids"], dtype=torch.bool)
    for i, e in enumerate(encs):
        special[i, : len(e)] = e.special_mask
    base = baseline_ids(a, b["input_ids"], b["attention_mask"], special)
    assert (base[special] == b["input_ids"][special]).all()
    assert (base[~special] == a.pad_token_id).all()


def test_target_that_is_not_a_scalar_is_refused_with_its_shape(one_token_bert):
    a = one_token_bert
    bad = CallableTarget(lambda out, mask: out.last_hidden_state[:, 0])  # [batch, d]
    with pytest.raises(ValueError, match=r"one scalar per example.*got shape \(2, 32\)"):
        attribute(a, bad, [a.encode(TEXTS[0])] * 2, methods=["saliency"])  # one length: one batch of 2
    with pytest.raises(ValueError, match=r"\(3,\)"):
        check_scalar(torch.zeros(3, 4), 3)


def test_position_out_of_range_names_the_range(tiny_models):
    a = tiny_models["gpt2"]
    b = a.batch([a.encode("one two three")])
    n = int(b["attention_mask"].sum())
    with pytest.raises(ValueError, match=rf"valid positions are 1..{n - 1}"):
        LMLoss(n + 5).aux(a, b["input_ids"], b["attention_mask"])
    with pytest.raises(ValueError, match="position 0 has no loss"):
        LMLoss(0).aux(a, b["input_ids"], b["attention_mask"])
    assert LMLoss(-1).aux(a, b["input_ids"], b["attention_mask"])[0].tolist() == [n - 2, int(b["input_ids"][0, -1])]
    assert LMLoss(-1).reads(n, a) == (n - 2,)
    one = b["input_ids"][:, :1]  # a single token: no range to name, and not "1..0"
    with pytest.raises(ValueError, match="of 1 token: it has no position with a loss") as e:
        LMLoss(-1).aux(a, one, torch.ones_like(one))
    assert "1..0" not in str(e.value) and "tokens" not in str(e.value)


def test_class_logit_needs_logits_and_parse_target(tiny_models):
    a = tiny_models["bert"]
    b = a.batch([a.encode("a b")])
    with pytest.raises(NotApplicable, match="logits"):
        ClassLogit().aux(a, b["input_ids"], b["attention_mask"])
    assert isinstance(parse_target("logit:1", a), ClassLogit) and parse_target("logit:1", a).label == 1
    assert isinstance(parse_target("loss:-1", a), LMLoss)
    with pytest.raises(ValueError, match="unknown objective"):
        parse_target("banana", a)


def test_bad_attribution_settings(one_token_bert):
    a = one_token_bert
    t = CallableTarget(_reads_pos)
    e = [a.encode("a b c")]
    with pytest.raises(ValueError, match="unknown attribution"):
        attribute(a, t, e, methods=["lime"])
    with pytest.raises(ValueError, match="exceeds internal_batch_size"):
        attribute(a, t, e, batch_size=8, internal_batch_size=4)
    with pytest.raises(ValueError, match="no examples"):
        attribute(a, t, [])


@pytest.mark.slow
def test_ig_completeness_on_the_bundled_model(minilm):
    """Sundararajan et al. (2017): Σ IG = f(x) − f(baseline), within 1% at 50 steps."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(minilm.config.hidden_size, 1)
    target = ProbeLogit(lin.requires_grad_(False))
    encs = [minilm.encode(t) for t in ["The dogs bark.", "She walks home."]]
    res = attribute(minilm, target, encs, methods=["ig"], n_steps=50)
    comp = res.completeness()
    assert (comp["relative_error"] < 0.01).all(), comp
    assert np.allclose(comp["ig_sum"] - comp["ig_delta"], comp["value"] - comp["baseline_value"], atol=1e-5)
    assert (comp["value"] - comp["baseline_value"]).abs().min() > 1e-4  # a real gap was explained
