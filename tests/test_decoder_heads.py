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
