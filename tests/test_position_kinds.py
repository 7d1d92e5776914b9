"""Mean-ablation per position kind (issue 58): each special token its own kind, content
its own, a decoder's first position apart; a head built by hand to write a large vector at
[CLS] and none at [SEP] is not necessary under per-kind means, though a mean pooling
[CLS] with [SEP] makes it look so."""

from __future__ import annotations

import numpy as np
import pytest
import torch

TEXTS = [
    "The cat sat on the mat.",
    "A dog barked at the mailman.",
    "She reads books every evening.",
    "Rain fell over the quiet town.",
    "He plays the piano very well.",
    "Birds sing early in the morning.",
    "The train left the station late.",
    "We cooked dinner for our friends.",
    "Children ran across the green field.",
    "The old house stood on a hill.",
    "My brother fixed the broken chair.",
    "Stars shone above the dark sea.",
]


@pytest.fixture(scope="module")
def cls_writer(bert_tokenizer):
    """A tiny BERT (2 layers, 4 heads of 8) whose layer-0 head 0 is built by hand: it writes a
    large vector (norm ≈ 5.6) at [CLS] and exactly zero at [SEP] and at every word.

    Token embeddings of every token but [CLS] have a zero first dimension and zero mean, so the
    embedding LayerNorm keeps it zero; [CLS]'s is all in the first dimension (≈ 5.57 after the
    LayerNorm); position and token-type embeddings zero, so [CLS] is the same in every sentence.
    The head's value reads the first dimension only; [CLS]'s query finds its own key
    (score ≈ 33), every other query is pushed off [CLS]'s key (score ≈ −19) onto positions
    whose value is 0."""
    import transformers as T

    from probe.models import ModelAdapter

    torch.manual_seed(0)
    cfg = T.BertConfig(
        vocab_size=len(bert_tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, pad_token_id=0,
    )  # fmt: skip
    model = T.BertModel(cfg).eval()
    emb, att = model.embeddings, model.encoder.layer[0].attention
    cls = bert_tokenizer.cls_token_id
    with torch.no_grad():
        w = torch.randn_like(emb.word_embeddings.weight)
        w[:, 0] = 0
        w[:, 1:] -= w[:, 1:].mean(1, keepdim=True)
        w[cls] = -1 / 31
        w[cls, 0] = 1.0
        emb.word_embeddings.weight.copy_(w)
        emb.position_embeddings.weight.zero_()
        emb.token_type_embeddings.weight.zero_()
        q, k, v = att.self.query, att.self.key, att.self.value
        for lin in (q, k, v):
            lin.weight[:8] = 0
            lin.bias[:8] = 0
        q.weight[0, 0] = 5.0  # q0 = 5·x0
        q.bias[1] = 10.0  # q1 = 10 for every query
        k.weight[0, 0] = 1.0  # k0 = x0
        k.weight[1, 0] = -1.0  # k1 = −x0: every query but [CLS]'s avoids [CLS]'s key
        v.weight[:8, 0] = 1 / np.sqrt(8)  # the value: x0 along a unit vector
        att.output.dense.weight[:, :8] = torch.randn(32, 8) * 0.5
    return ModelAdapter(name="tiny-cls-writer", model=model, tokenizer=bert_tokenizer, family="bert")


def _direct_outputs(adapter, texts):
    """``(z [b, s, H·dh] of layer 0's heads, input ids, attention mask)`` with a plain
    forward pre-hook on the output projection."""
    enc = adapter.tokenizer(list(texts), padding=True, return_tensors="pt")
    got = {}
    dense = adapter.model.encoder.layer[0].attention.output.dense
    hook = dense.register_forward_pre_hook(lambda m, a: got.__setitem__("z", a[0].detach().clone()))
    try:
        with torch.no_grad():
            adapter.model(**enc)
    finally:
        hook.remove()
    return got["z"], enc["input_ids"], enc["attention_mask"].bool()


def test_the_hand_built_head_writes_at_cls_only(cls_writer):
    z, ids, valid = _direct_outputs(cls_writer, TEXTS)
    head = z[..., :8].norm(dim=-1)
    tok = cls_writer.tokenizer
    at_cls = head[(ids == tok.cls_token_id) & valid]
    rest = head[(ids != tok.cls_token_id) & valid]
    assert at_cls.min() > 5.0 and rest.max() < 1e-4


def test_a_head_that_writes_at_cls_only_is_not_necessary_under_per_kind_means(cls_writer):
    """Under the toolkit's default (per-kind means) mean-ablation changes nothing the head
    writes, so it is not necessary; pooling [CLS] with [SEP] (the toolkit before issue 58)
    puts half of [CLS]'s vector at both and makes it look necessary. Fails on the pooled code:
    there its default claim holds."""
    from probe.analyses.claims.necessity import necessity_claims
    from probe.analyses.claims.removal import removal_sweep
    from probe.analyses.common.metrics import as_corpus
    from probe.analyses.common.objective import resolve_objective
    from probe.analyses.claims import thresholds as T

    corpus = as_corpus(TEXTS)
    obj, _ = resolve_objective("embedding-drift", cls_writer, corpus)
    sweep = removal_sweep(cls_writer, corpus, obj, units=[(0, 0)], modes=("mean",))
    claim = necessity_claims(sweep)[(0, 0)]
    assert claim.status == "does not hold"
    assert claim.effect < 1e-6  # the per-kind mean is what the head writes at every position

    from probe.analyses.necessity.ablation import position_kind_means
    from probe.analyses.necessity.position_kinds import KindMeans

    means = position_kind_means(cls_writer, corpus, obj, 8)
    kinds = means.kinds
    special = [i for i, t in enumerate(kinds.token_ids) if t >= 0]
    counts = torch.tensor([float(means.counts[i]) for i in special])
    pooled_special = (means.values[special] * counts[:, None, None, None]).sum(0) / counts.sum()
    values = means.values.clone()
    values[special] = pooled_special
    pooled = KindMeans(values, means.overall, kinds, means.counts)
    old = removal_sweep(cls_writer, corpus, obj, units=[(0, 0)], modes=("mean",), means=pooled)
    old_claim = necessity_claims(old)[(0, 0)]
    assert old_claim.status == "holds" and old_claim.effect > T.min_effect("embedding-drift")


def test_per_kind_means_equal_a_direct_computation(cls_writer, tiny_models):
    """Each kind's mean equals the mean of the head outputs over that kind's positions,
    computed here with its own hook: [CLS] apart from [SEP], content apart, padding never."""
    from probe.analyses.common.metrics import as_corpus
    from probe.analyses.common.objective import resolve_objective
    from probe.analyses.necessity.ablation import position_kind_means
    from probe.analyses.necessity.position_kinds import CONTENT

    tok = cls_writer.tokenizer
    for adapter in (cls_writer, tiny_models["bert"]):
        corpus = as_corpus(TEXTS)
        obj, _ = resolve_objective("embedding-drift", adapter, corpus)
        means = position_kind_means(adapter, corpus, obj, 4)
        assert means.kinds.names[0] == CONTENT and {"[CLS]", "[SEP]"} <= set(means.kinds.names)
        assert "[PAD]" not in means.kinds.names and "[UNK]" not in means.kinds.names
        z, ids, valid = _direct_outputs(adapter, TEXTS)
        z = z.reshape(*z.shape[:2], adapter.n_heads, adapter.head_dim).double()
        specials = (ids == tok.cls_token_id) | (ids == tok.sep_token_id)
        for name, sel in (
            (CONTENT, valid & ~specials),
            ("[CLS]", valid & (ids == tok.cls_token_id)),
            ("[SEP]", valid & (ids == tok.sep_token_id)),
        ):
            k = means.kinds.names.index(name)
            assert means.counts[k] == int(sel.sum())
            np.testing.assert_allclose(means.values[k, 0].double(), z[sel].mean(0), atol=1e-5)
        np.testing.assert_allclose(means.overall[0].double(), z[valid].mean(0), atol=1e-5)
        absent = means.kinds.names.index("[MASK]")  # no [MASK] in these texts: the one overall mean
        assert means.counts[absent] == 0
        np.testing.assert_allclose(means.values[absent], means.overall, atol=0)
        assert "[MASK]" in means.describe() and "one mean over all positions" in means.describe()


def test_a_decoders_first_position_is_its_own_kind_unless_special(tiny_models):
    from probe.analyses.common.batch import MetricBatch
    from probe.analyses.necessity.position_kinds import CONTENT, FIRST, position_kinds

    dec = tiny_models["llama"]
    kinds = position_kinds(dec)
    assert kinds.names[:2] == (CONTENT, FIRST) and kinds.first_apart
    assert not position_kinds(tiny_models["bert"]).first_apart
    cls = dec.tokenizer.cls_token_id
    ids = torch.tensor([[2000, 2001, 2002, 0], [cls, 2001, 2002, 2003]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    batch = MetricBatch(inputs={"input_ids": ids, "attention_mask": mask}, special=(ids == cls) & mask.bool())
    got = kinds.index(batch)
    assert got[0].tolist()[:3] == [kinds.names.index(FIRST), 0, 0]  # the sink position apart
    assert got[1, 0] == kinds.names.index("[CLS]") and got[1, 1:].tolist() == [0, 0, 0]


def test_resample_draws_from_the_same_kind():
    from probe.analyses.claims.removal import resample_sources

    kind = torch.tensor([[1, 0, 0, 2, 0], [1, 0, 2, 0, 0], [1, 0, 0, 0, 2]])
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1], [1, 1, 1, 1, 1]])
    for seed in range(20):
        src = resample_sources(kind, mask, torch.Generator().manual_seed(seed))
        flat_kind, flat_valid = kind.reshape(-1), mask.reshape(-1).bool()
        s = src.reshape(-1)
        for p in torch.nonzero(flat_valid).flatten().tolist():
            q = int(s[p])
            assert flat_valid[q] and flat_kind[q] == flat_kind[p] and q // 5 != p // 5


def test_the_means_of_some_layers_stop_after_the_last_of_them(bert_tokenizer):
    """``position_kind_means(layers=...)`` runs each forward no further than the last layer asked
    (the removal sweep asks for its units' layers: SmolLM2's necessary head in layer 1 paid for all
    30 layers' means): those layers' means equal the full computation's, the others are NaN, and a
    mean-ablation sweep of a layer-0 head gives the harms it gives with every layer's means."""
    from conftest import tiny_llama_lm

    from probe.analyses.claims.removal import removal_sweep
    from probe.analyses.common.metrics import as_corpus
    from probe.analyses.common.objective import resolve_objective
    from probe.analyses.necessity.ablation import position_kind_means
    from probe.models.sites import layer_modules

    llama = tiny_llama_lm(bert_tokenizer, layers=3)
    corpus = as_corpus(TEXTS)
    obj, _ = resolve_objective("loss", llama, corpus)
    ran = {"layer 2": 0, "head": 0}
    hooks = [
        layer_modules(llama)[2].register_forward_hook(lambda *_: ran.__setitem__("layer 2", ran["layer 2"] + 1)),
        llama.model.lm_head.register_forward_hook(lambda *_: ran.__setitem__("head", ran["head"] + 1)),
    ]
    try:
        some = position_kind_means(llama, corpus, obj, 4, layers=[0, 1])
        assert ran == {"layer 2": 0, "head": 0}  # layer 2, the norm and the head never ran
        every = position_kind_means(llama, corpus, obj, 4)
        assert ran["layer 2"] > 0 and ran["head"] == 0
    finally:
        for h in hooks:
            h.remove()
    torch.testing.assert_close(some.values[:, :2], every.values[:, :2], atol=0, rtol=0)
    assert torch.isnan(some.values[:, 2]).all() and not torch.isnan(every.values).any()
    assert some.counts == every.counts
    own = removal_sweep(llama, corpus, obj, units=[(0, 1)], modes=("mean", "one-mean"))
    given = removal_sweep(llama, corpus, obj, units=[(0, 1)], modes=("mean", "one-mean"), means=every)
    for mode in ("mean", "one-mean"):
        np.testing.assert_allclose(own.harm[mode], given.harm[mode], atol=1e-6)
        assert np.abs(own.harm[mode]).max() > 1e-4  # the removal harms something: the means were used
