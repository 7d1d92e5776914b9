"""Blank-out of a causal LM from its clean prefix's key/value cache equals captum's
``FeatureAblation`` of whole forwards (issue 54: faithfulness's reference on SmolLM2)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from probe.analyses.common.targets import LMLoss
from probe.analyses.explanation import causal_occlusion as C
from probe.analyses.explanation.attributions import attribute

TEXTS = ["The cat sat on the mat today.", "A dog barked at the moon.", "Birds sing in the tall trees at dawn and dusk."]


def _decoder(kind: str, tokenizer):
    import transformers as T

    from probe.models import ModelAdapter

    common = dict(vocab_size=len(tokenizer), pad_token_id=0, bos_token_id=101, eos_token_id=102)
    gqa = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64)
    cfg = {
        "llama": lambda: T.LlamaConfig(max_position_embeddings=64, **gqa, **common),
        "qwen3": lambda: T.Qwen3Config(head_dim=8, max_position_embeddings=64, **gqa, **common),
        "gpt2": lambda: T.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=64, **common),
        "gemma3_text": lambda: T.Gemma3TextConfig(
            head_dim=8,
            sliding_window=3,
            layer_types=["sliding_attention", "full_attention"],
            max_position_embeddings=64,
            **gqa,
            **common,
        ),  # fmt: skip
    }[kind]()
    torch.manual_seed(0)
    model = T.AutoModelForCausalLM.from_config(cfg).eval()
    return ModelAdapter(name=f"tiny-{kind}", model=model, tokenizer=tokenizer, family=kind.split("_")[0])


def _both(adapter, objective, encs, monkeypatch) -> tuple:
    """``(scores from the prefix cache, scores from captum's whole forwards)`` per example."""
    calls = []
    prefix_path = C.causal_blank_out
    with monkeypatch.context() as m:  # the prefix path runs, once per batch
        m.setattr(C, "causal_blank_out", lambda *a, **k: calls.append(1) or prefix_path(*a, **k))
        fast = attribute(adapter, objective, encs, methods=("blank_out",), internal_batch_size=16)
    assert calls
    with monkeypatch.context() as m:  # captum's path runs
        m.setattr(C, "applies", lambda *a: False)
        m.setattr(C, "causal_blank_out", lambda *a, **k: pytest.fail("the prefix path ran"))
        slow = attribute(adapter, objective, encs, methods=("blank_out",), internal_batch_size=16)
    return [e.scores["blank_out"] for e in fast.examples], [e.scores["blank_out"] for e in slow.examples]


@pytest.mark.parametrize("kind", ["llama", "qwen3", "gpt2"])
def test_prefix_cache_blank_out_equals_captums_whole_forwards(kind, bert_tokenizer, monkeypatch):
    a = _decoder(kind, bert_tokenizer)
    objective = LMLoss(-1)
    assert C.applies(a, objective)
    encs = [a.encode(t) for t in TEXTS]
    fast, slow = _both(a, objective, encs, monkeypatch)
    for f, s, e in zip(fast, slow, encs):
        assert f.shape == s.shape == (len(e),)
        np.testing.assert_allclose(f, s, atol=1e-5)
        assert np.abs(s).max() > 1e-3  # the scores are not all zero: the comparison can fail
        # the last token is the label of loss:-1, read at the position before it: no occlusion moves it
        assert f[-1] == 0.0
        special = np.asarray(e.special_mask, bool)
        assert (f[special] == 0.0).all()  # the baseline leaves special tokens as they are


def test_an_interior_position_scores_nothing_after_it(bert_tokenizer, monkeypatch):
    a = _decoder("llama", bert_tokenizer)
    objective = LMLoss(4)  # the token at 4, predicted from the logits at 3
    encs = [a.encode(t) for t in TEXTS]
    fast, slow = _both(a, objective, encs, monkeypatch)
    for f, s in zip(fast, slow):
        np.testing.assert_allclose(f, s, atol=1e-5)
        assert (f[4:] == 0.0).all() and np.abs(f[1:4]).max() > 1e-4


def test_a_tight_memory_budget_runs_fewer_occlusions_a_forward_with_the_same_scores(bert_tokenizer, monkeypatch):
    from probe.inputs import budget

    a = _decoder("llama", bert_tokenizer)
    encs = [a.encode(t) for t in TEXTS]
    wide = attribute(a, LMLoss(-1), encs, methods=("blank_out",))
    groups = []
    one_example = C._one_example
    monkeypatch.setattr(budget, "rows_for", lambda *a, **k: 2)  # two rows of an example fit a forward
    monkeypatch.setattr(C, "_one_example", lambda *a: groups.append(a[-1]) or one_example(*a))
    narrow = attribute(a, LMLoss(-1), encs, methods=("blank_out",))
    assert groups and set(groups) == {2}
    for w, n in zip(wide.examples, narrow.examples):
        np.testing.assert_allclose(w.scores["blank_out"], n.scores["blank_out"], atol=1e-6)


def test_a_sliding_window_model_takes_captums_path(bert_tokenizer):
    """A sliding-window layer's cache cannot be cut back to a prefix: the whole forwards run."""
    a = _decoder("gemma3_text", bert_tokenizer)
    assert not C.applies(a, LMLoss(-1))
    res = attribute(a, LMLoss(-1), [a.encode(TEXTS[0])], methods=("blank_out",))
    assert np.abs(res.examples[0].scores["blank_out"]).max() > 1e-3


def test_an_encoder_or_another_objective_takes_captums_path(tiny_models, bert_tokenizer):
    from probe.analyses.common.targets import ClassLogit

    assert not C.applies(tiny_models["bert"], LMLoss(-1))
    assert not C.applies(_decoder("llama", bert_tokenizer), ClassLogit(0))


def test_the_prefix_path_runs_about_half_the_token_forwards():
    here, whole = C.occlusion_cost(40)
    assert 0.5 < here / whole < 0.65
    assert C.occlusion_cost(40, last=9)[0] < here / 3  # read early: the occlusions stop there


@pytest.mark.slow
def test_smollm2_blank_out_equals_captums(smollm2, monkeypatch):
    """On the real decoder (skipped with the install line without the wheel): two EWT-like sentences."""
    encs = [smollm2.encode(t) for t in ("The keys to the cabinet are on the table.", "She said that it was fine.")]
    fast, slow = _both(smollm2, LMLoss(-1), encs, monkeypatch)
    for f, s in zip(fast, slow):
        np.testing.assert_allclose(f, s, atol=1e-4, rtol=1e-5)
        assert np.abs(s).max() > 0.1
