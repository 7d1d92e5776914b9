"""The decoder head taxonomy: closed-form maps whose scores are known, and zoo:induction,
whose previous-token head (L0H3) and induction heads (layer 1) were trained in."""

from __future__ import annotations

import pytest
import torch

from probe.analyses.patterns.decoder_heads import (
    SINK_EPSILON,
    decoder_head_scores,
    duplicate_token_scores,
    induction_scores,
    previous_token_scores,
    repeated_random_tokens,
    sink_ratio,
    sink_scores,
)
from probe.errors import InputError

T = 5
N = 1 + 2 * T


def _map(target) -> torch.Tensor:
    """[1, 1, 1, N, N]: each query i attends fully to target(i) (or to itself where None)."""
    a = torch.zeros(N, N)
    for i in range(N):
        j = target(i)
        a[i, i if j is None else j] = 1.0
    return a[None, None, None]


def test_closed_form_maps_score_one_on_their_role_and_zero_elsewhere():
    prev = _map(lambda i: i - 1 if i >= 1 else None)
    dup = _map(lambda i: i - T if i > T else None)
    ind = _map(lambda i: i - T + 1 if i > T else None)
    sink = _map(lambda i: 0)
    assert float(previous_token_scores(prev)) == 1.0
    assert float(duplicate_token_scores(dup, T)) == 1.0
    assert float(induction_scores(ind, T)) == 1.0
    assert float(sink_scores(sink)) == 1.0
    assert float(induction_scores(dup, T)) == 0.0 and float(duplicate_token_scores(ind, T)) == 0.0
    assert float(previous_token_scores(sink)) == pytest.approx(1 / (N - 1))  # only query 1 -> 0
    assert float(sink_scores(ind)) == pytest.approx(1 / N)  # only <bos> itself


def test_sink_ratio_counts_heads_above_epsilon():
    scores = torch.tensor([[0.9, 0.31, 0.3, 0.0]])
    assert sink_ratio(scores) == 0.5
    assert SINK_EPSILON == 0.3


def test_repeated_random_tokens_repeat_distinct_tokens_after_bos():
    ids = repeated_random_tokens(range(10, 50), 6, 3, bos_id=2, seed=1)
    assert ids.shape == (3, 13) and (ids[:, 0] == 2).all()
    assert torch.equal(ids[:, 1:7], ids[:, 7:])
    assert all(len(set(row[1:7].tolist())) == 6 for row in ids)
    with pytest.raises(InputError, match="n_tokens"):
        repeated_random_tokens(range(3), 6, 1, bos_id=0)


@pytest.fixture(scope="module")
def induction_model():
    import probe

    return probe.load_model("zoo:induction")


def test_zoo_induction_heads_and_its_previous_token_head_are_named(induction_model):
    result = decoder_head_scores(induction_model, n_tokens=10, n_examples=16)
    assert result.heads("previous_token") == [(0, 3)]
    assert result.heads("induction") == [(1, 0), (1, 1), (1, 2), (1, 3)]
    t = result.table.set_index(["layer", "head"])
    assert t.loc[(0, 3), "previous_token"] > 0.9
    assert (t.loc[[(0, 0), (0, 1), (0, 2)], "induction"] < 0.2).all()
    assert result.sink_ratio == 0.0  # no head parks its attention on <s>
    with pytest.raises(InputError, match="positions"):
        decoder_head_scores(induction_model, n_tokens=20)


def test_hand_set_weights_make_a_previous_token_head_and_a_sink_head(bert_tokenizer):
    """One GPT-2 layer whose attention reads positions only (token embeddings zero, one-hot
    position embeddings): head 0's W_Q shifts position i onto i-1 against W_K = I (a
    previous-token head); head 1's query is a constant bias that matches only position 0's
    key (a sink). The detectors must name exactly these."""
    import transformers

    from probe.models import ModelAdapter
    from probe.tracing.trace import trace

    cfg = transformers.GPT2Config(
        vocab_size=64, n_embd=32, n_layer=1, n_head=2, n_positions=16, bos_token_id=1, eos_token_id=2
    )
    model = transformers.GPT2LMHeadModel(cfg).eval()
    attn = model.transformer.h[0].attn.c_attn  # Conv1D: x @ W + b, W [32, 96] = q | k | v
    from conftest import previous_token_by_position

    previous_token_by_position(model)  # head 0
    with torch.no_grad():
        attn.bias[16] = 4.0  # head 1: the same query everywhere
        attn.weight[0, 32 + 16] = 1.0  # head 1: only position 0's key answers it
    adapter = ModelAdapter(name="hand-set", model=model, tokenizer=bert_tokenizer, family="gpt2")
    ids = repeated_random_tokens(range(3, 64), T, 4, bos_id=1)
    patterns = trace(adapter, {"input_ids": ids}, read="pattern").stack("pattern").transpose(0, 1)
    prev, sink = previous_token_scores(patterns)[0], sink_scores(patterns)[0]
    assert prev[0] > 0.95 and prev[1] < 0.3
    assert sink[1] > 0.9 and sink[0] < 0.3
    assert sink_ratio(sink_scores(patterns)) == 0.5
    assert (induction_scores(patterns, T)[0] < 0.1).all() and (duplicate_token_scores(patterns, T)[0] < 0.1).all()
