"""Activation patching: batched restart equals one patch per forward; closed-form ends;
bad input; zoo:induction (skips until its weights are committed)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from analyses.metrics import as_corpus, get_metric
from analyses.patching import corrupt_zoo, patch_heads
from probe.interventions import HeadEdit, HeadIntervention, HeadOutputRecorder

CLEAN = ["The cat sat on the mat today.", "A dog barked at the old man."]
CORRUPT = ["The dog ran to the car today.", "A cat hissed at the young boy."]


@pytest.fixture(scope="module")
def gpt2_lm(bert_tokenizer):
    import transformers as T

    from models import ModelAdapter

    torch.manual_seed(0)
    cfg = T.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=len(bert_tokenizer), pad_token_id=0,
                       initializer_range=0.2)
    return ModelAdapter(name="tiny-gpt2-lm", model=T.GPT2LMHeadModel(cfg), tokenizer=bert_tokenizer, family="gpt2")


def test_patching_equals_one_forward_per_head(gpt2_lm):
    a = gpt2_lm
    res = patch_heads(a, CLEAN, CORRUPT, "embedding-drift", batch_size=2)
    assert res.path == "layer-restart"
    metric = get_metric("embedding-drift", a)
    cb = metric.make_batch(a, as_corpus(CLEAN), [0, 1])
    kb = metric.make_batch(a, as_corpus(CORRUPT), [0, 1])
    with torch.no_grad():
        with HeadOutputRecorder(a) as rec:
            ref = metric.reference(metric.forward(a, cb), cb)
        for j, (layer, head) in enumerate(res.heads):
            edit = HeadEdit(layer, head, "patch", value=rec.outputs[layer][:, :, head])
            with HeadIntervention(a, [edit]):
                s = metric.score(metric.forward(a, kb), kb, ref)
            np.testing.assert_allclose(res.patched[j], s.numpy(), atol=1e-5)
    assert np.allclose(res.clean, 0, atol=1e-6) and (res.corrupted > 1e-3).all()
    t = res.table
    np.testing.assert_allclose(t["restored"], (t["patched"] - t["corrupted"]) / (t["clean"] - t["corrupted"]))


def test_patching_a_pair_with_itself_is_undefined_and_lengths_must_match(gpt2_lm):
    with pytest.raises(ValueError, match="does not change"):
        patch_heads(gpt2_lm, CLEAN, CLEAN, "embedding-drift")
    with pytest.raises(ValueError, match="pair 0: .*different lengths"):
        patch_heads(gpt2_lm, CLEAN, ["A short one.", CORRUPT[1]], "embedding-drift")
    with pytest.raises(ValueError, match="in pairs"):
        patch_heads(gpt2_lm, CLEAN, CORRUPT[:1], "embedding-drift")


def test_patching_loss_table_and_interval(gpt2_lm):
    """Loss targets come from the clean input; the bootstrap CI brackets each estimate."""
    res = patch_heads(gpt2_lm, CLEAN, CORRUPT, "loss", batch_size=2)
    assert len(res.table) == 8
    assert res.clean.mean() != pytest.approx(res.corrupted.mean())
    t = res.table
    assert ((t["ci_low"] <= t["restored"] + 1e-9) & (t["restored"] <= t["ci_high"] + 1e-9)).all()


def test_corrupt_zoo_induction_keeps_second_copy():
    from models.zoo import eval_examples

    ex = eval_examples("induction", n=5)
    bad = corrupt_zoo("induction", ex)
    for e, b in zip(ex, bad):
        L = e["prefix_len"]
        assert b["words"][L:] == e["words"][L:]
        assert not set(b["words"][:L]) & set(e["words"][:L])
        assert len(b["words"]) == len(e["words"])
    with pytest.raises(ValueError, match="no built-in corruption"):
        corrupt_zoo("prev-token", ex)


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="the committed zoo:induction model copies without the textbook layer-1 "
                   "induction head (see tests/test_zoo.py); expected to pass once it is retrained")
def test_zoo_induction_ablation_destroys_copying_and_patching_restores_it():
    from models import load_model
    from probe.inputs import load_corpus
    from analyses.ablation import sweep_heads

    try:
        a = load_model("zoo:induction")
    except ValueError as exc:
        pytest.skip(f"zoo:induction not available: {exc}")
    clean = load_corpus(model="zoo:induction", limit=100)
    sweep = sweep_heads(a, clean, "accuracy", "zero", batch_size=50).table.sort_values("delta")
    ind = (int(sweep["layer"].iloc[0]), int(sweep["head"].iloc[0]))
    assert sweep["clean"].iloc[0] > 90
    assert ind[0] == 1 and sweep["ablated"].iloc[0] < 50  # the induction head sits in layer 1
    bad = corrupt_zoo("induction", clean.examples)
    corrupted = as_corpus(clean).__class__(texts=tuple(e["text"] for e in bad), examples=tuple(bad))
    res = patch_heads(a, clean, corrupted, "accuracy", batch_size=50)
    t = res.table.set_index(["layer", "head"])
    assert res.corrupted.mean() < 50
    assert t.loc[ind, "restored"] > 0.5
