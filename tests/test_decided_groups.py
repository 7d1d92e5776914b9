"""The redundancy claim decided group by group on the whole corpus (issue 44,
:mod:`probe.analyses.claims.decided_groups`), and importance in random blocks until
precise (:mod:`probe.analyses.necessity.importance_blocks`)."""

from __future__ import annotations

import numpy as np
import pytest

from probe.analyses.claims.claim import Claim
from probe.analyses.common.objective import get_metric


def _claims(heads_by_role: dict, others: list) -> tuple:
    """Pattern and necessity claims: each role's heads share a pattern that holds and are not
    needed alone; ``others`` hold no pattern."""
    pattern, necessity = {}, {}
    for role, heads in heads_by_role.items():
        for key in heads:
            pattern[key] = Claim("pattern", "holds", statement=role)
            necessity[key] = Claim("necessity", "does not hold")
    for key in others:
        pattern[key] = Claim("pattern", "does not hold")
        necessity[key] = Claim("necessity", "does not hold")
    return pattern, necessity


def test_groups_are_decided_on_blocks_as_the_exact_removal_reads_them(minilm):
    """MiniLM on the bundled 24 sentences (one block): layer 4's special-token heads removed
    together harm the similarity structure far above the floor (holds), layer 3's three not
    (does not hold); each group's harm is the mean of the size-corrected block harms of the
    exact removal of the group (removal_sweep's readouts), and every head of a group carries
    its group's claim with the examples it took; a head in no group keeps "not tested"."""
    from probe.analyses.claims.decided import block_removals
    from probe.analyses.claims.decided_groups import decided_redundancy
    from probe.analyses.common.objective import resolve_objective
    from probe.analyses.necessity.ablation import position_kind_means
    from probe.app.report.bundled import sample_corpus

    corpus = sample_corpus(24)
    obj, _ = resolve_objective("similarity-structure", minilm, corpus)
    strong = [(4, h) for h in (2, 4, 5, 7, 8, 10, 11)]
    weak = [(3, 3), (3, 4), (3, 5)]
    pattern, necessity = _claims({"special-token": strong + weak}, [(0, 0)])
    claims, rows, info = decided_redundancy(minilm, corpus, obj, pattern, necessity, seed=0)
    assert info["groups"] == 2 and info["path"] == "sequential" and info["examples"] == 24
    by = {r["heads"]: r for r in rows}
    s, w = by["+".join(f"L{l}H{h}" for l, h in strong)], by["+".join(f"L{l}H{h}" for l, h in weak)]
    assert s["holds"] and not w["holds"] and s["harm"] > 0.02 > w["harm"]
    assert claims[strong[0]].status == "holds" and claims[strong[0]].statement == "needed as a group of 7"
    assert claims[weak[1]].status == "does not hold" and claims[weak[1]].count == w["examples"] == 24
    assert claims[(0, 0)].status == "not tested"
    means = position_kind_means(minilm, corpus, obj, 8, minilm.default_stack)
    exact = block_removals(minilm, corpus, obj, [strong, weak], ("mean",), range(24), seed=0, batch_size=8, means=means)
    for j, row in enumerate((s, w)):  # one block of all 24: the group's harm is its rows' mean
        assert row["harm"] == pytest.approx(exact["mean"][j].mean(), rel=1e-9)
    single = block_removals(minilm, corpus, obj, strong[:1], ("mean",), range(24), seed=0, batch_size=8, means=means)
    assert single["mean"][0].mean() < s["harm"]  # the group is not read as its first head alone
    assert s["random"] is not None and w["random"] is None  # the random perturbation beside a group that holds


def test_the_null_models_groups_set_the_bar_and_run_in_this_process(minilm):
    """With a null model: its random groups of each candidate size are decided against the
    floor on its own blocks, the bar is at least the floor and at least their largest mean
    harm, and the claim says what it was tested against."""
    from probe.analyses.claims import thresholds as T
    from probe.analyses.claims.decided_groups import decided_redundancy
    from probe.analyses.claims.null_model import null_adapter
    from probe.analyses.common.objective import resolve_objective
    from probe.app.report.bundled import sample_corpus

    corpus = sample_corpus(24)
    obj, _ = resolve_objective("similarity-structure", minilm, corpus)
    null = null_adapter(minilm, 0, "reinit")
    heads = [(4, 2), (4, 4), (4, 5)]
    pattern, necessity = _claims({"special-token": heads}, [])
    claims, rows, info = decided_redundancy(minilm, corpus, obj, pattern, necessity, null_adapter=null, seed=0)
    bar = info["bars"][3]
    assert bar["groups"] == 6 * 4 and bar["bar"] >= T.min_effect(obj.name) and bar["bar"] >= bar["null_max"]
    assert info["null_removals"] == bar["removals"] > 0
    assert rows[0]["bar"] == bar["bar"] and rows[0]["null_harm"] == bar["null_max"]
    assert "random groups of" in claims[heads[0]].extra["null_source"]


def test_importance_in_blocks_stops_when_precise_and_pools_the_blocks(lm_models_small):
    """Importance in random blocks: with a loose precision it stops after the fewest blocks
    and its raw importance is the size-weighted mean of head_importance on those blocks;
    with an unreachable one it takes every block and says the precision was not reached."""
    from probe.analyses.necessity.importance import head_importance
    from probe.analyses.necessity.importance_blocks import _halfwidth, importance_in_blocks

    adapter, texts = lm_models_small
    loose = importance_in_blocks(
        adapter, texts, get_metric("loss", adapter), method="gradient", block=3, precision=10.0, batch_size=4
    )
    assert loose.blocks == 3 and loose.reached and len(loose.examples) == 9
    order = np.random.default_rng(0).permutation(len(texts))
    cuts = [c for c in np.array_split(order, len(texts) // 3)][:3]
    raws = [
        head_importance(adapter, [texts[i] for i in sorted(c)], get_metric("loss", adapter), method="gradient").raw
        for c in cuts
    ]
    sizes = np.array([len(c) for c in cuts], float)
    np.testing.assert_allclose(loose.result.raw, np.average(np.stack(raws), axis=0, weights=sizes), rtol=1e-5)
    np.testing.assert_allclose(
        loose.halfwidth, _halfwidth(np.stack(raws).astype(np.float64), sizes, "gradient"), rtol=1e-5
    )
    tight = importance_in_blocks(
        adapter, texts, get_metric("loss", adapter), method="gradient", block=3, precision=1e-9, batch_size=4
    )
    assert not tight.reached and sorted(tight.examples) == list(range(len(texts)))


def test_the_half_width_is_the_normalised_standard_error():
    """Two heads of one layer, block estimates (1, 3) and (2, 2): mean (2, 2.5), standard errors
    (1, 0.5)·(√2/√2)… over ‖mean‖; a layer of zeros gives zero width, never a division by zero."""
    from probe.analyses.necessity.importance_blocks import _halfwidth

    raws = np.array([[[1.0, 2.0], [0.0, 0.0]], [[3.0, 2.0], [0.0, 0.0]]])  # [b=2, L=2, H=2]
    got = _halfwidth(raws, np.array([1.0, 1.0]), "gradient")
    sd = np.array([np.std([1.0, 3.0], ddof=1), 0.0])
    np.testing.assert_allclose(got[0], 1.96 * sd / np.sqrt(2) / np.linalg.norm([2.0, 2.0]))
    assert (got[1] == 0).all()


def test_importance_in_blocks_refuses_bad_settings(lm_models_small):
    from probe.analyses.necessity.importance_blocks import importance_in_blocks
    from probe.errors import InputError

    adapter, texts = lm_models_small
    with pytest.raises(InputError, match="min_blocks ≥ 2"):
        importance_in_blocks(adapter, texts, get_metric("loss", adapter), method="gradient", min_blocks=1)


@pytest.fixture(scope="module")
def lm_models_small(bert_tokenizer):
    """A tiny seeded BERT with an LM head and 12 short texts."""
    import torch
    import transformers as T

    from probe.models import ModelAdapter

    torch.manual_seed(0)
    cfg = T.BertConfig(
        vocab_size=len(bert_tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, pad_token_id=0, initializer_range=0.2,
    )  # fmt: skip
    adapter = ModelAdapter(
        name="tiny-bert-lm", model=T.BertForMaskedLM(cfg).eval(), tokenizer=bert_tokenizer, family="bert"
    )
    texts = [f"the cat number {i} sat on mat {i % 3}" for i in range(12)]
    return adapter, texts


def test_a_decoders_induction_group_is_decided_by_the_betting_test():
    """zoo:induction (its loss, a per-example objective: the betting test), layer 1's four
    heads as one candidate group: needed together, as the zoo's card says, decided before the
    last of its 128 examples against the null model's same-size groups."""
    from probe.analyses.claims.decided_groups import decided_redundancy
    from probe.analyses.claims.null_model import null_adapter
    from probe.analyses.common.objective import resolve_objective
    from probe.inputs.corpus import fit_to_model, load_corpus
    from probe.models import load_model

    a = load_model("zoo:induction")
    corpus = fit_to_model(load_corpus(model="zoo:induction", limit=128), a)
    obj, _ = resolve_objective("auto", a, corpus)
    heads = [(1, h) for h in range(a.n_heads)]
    pattern, necessity = _claims({"induction": heads}, [(0, h) for h in range(a.n_heads)])
    claims, rows, info = decided_redundancy(
        a, corpus, obj, pattern, necessity, null_adapter=null_adapter(a, 0, "reinit")
    )
    assert info["test"] == "betting e-processes per example" and info["groups"] == 1
    (row,) = rows
    assert row["holds"] and row["examples"] < 128 and row["harm"] > 10 * row["bar"]
    assert claims[(1, 2)].statement == "needed as a group of 4" and claims[(0, 1)].status == "not tested"
