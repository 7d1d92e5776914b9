"""Attention rollout (Abnar & Zuidema 2020): closed forms, batching, causal maps, bad input."""

from __future__ import annotations

import json
import math

import pytest

from probe.errors import InputError, NotApplicable
import torch

from probe.analyses.flow.rollout import combine_heads, residual_adjust, rollout, rollout_batch, rollout_maps
from probe.analyses.common.token_scores import TokenScores
from conftest import identity, make_maps, previous_token, uniform


def _random_maps(L, H, n, seed=0, causal=False):
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(L, H, n, n, generator=g, dtype=torch.float64) * 2
    if causal:
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1)


def _chain(a):
    """R_L = Â_L ⋯ Â_1 by plain matrix products (the definition)."""
    ah = residual_adjust(a.mean(1))
    r = ah[0]
    for l in range(1, a.shape[0]):
        r = ah[l] @ r
    return r


def test_identity_maps_roll_out_to_identity():
    r = rollout(identity(7, layers=4, heads=3))
    assert torch.equal(r, torch.eye(7))


def test_previous_token_chain_gives_binomial_offsets():
    # Â = ½I + ½P (P = previous token): row i of Â^L puts C(L,k)/2^L on i−k.
    L, n, i = 4, 12, 9
    r = rollout(previous_token(n, layers=L, heads=2).double(), output_positions=[i])[0]
    for k in range(L + 1):
        assert r[i - k].item() == pytest.approx(math.comb(L, k) / 2**L, abs=1e-12)
    assert r[: i - L].abs().max().item() == 0 and r[i + 1 :].abs().max().item() == 0


def test_one_uniform_layer_is_half_uniform_half_identity():
    # one uniform layer: Â = ½·(1/n) + ½·I exactly
    n = 5
    r = rollout(uniform(n).double())
    assert torch.allclose(r, 0.5 / n + 0.5 * torch.eye(n, dtype=torch.float64))


def test_rows_sum_to_one_and_match_the_matrix_chain():
    a = _random_maps(6, 4, 15)
    full = rollout(a)
    assert torch.allclose(full.sum(-1), torch.ones(15, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(full, _chain(a), atol=1e-12)
    rows = rollout(a, output_positions=[0, -1, 7])
    assert torch.allclose(rows, full[[0, 14, 7]], atol=1e-12)


def test_head_combination_by_indices_and_weights():
    a = _random_maps(3, 4, 6, seed=1)
    sub = rollout(a, heads=[1, 3])
    manual = rollout(a[:, [1, 3]])
    assert torch.allclose(sub, manual, atol=1e-12)
    w = torch.tensor([0.0, 2.0, 0.0, 2.0])  # same as heads 1 and 3, renormalised
    assert torch.allclose(rollout(a, heads=w), manual, atol=1e-12)
    one_head = combine_heads(a, torch.tensor([[0, 0, 1.0, 0]] * 3))
    assert torch.allclose(one_head, a[:, 2], atol=1e-12)


def test_causal_rollout_stays_lower_triangular():
    a = _random_maps(5, 3, 10, seed=2, causal=True)
    r = rollout(a, causal=True)
    assert r.triu(1).abs().max().item() == 0
    assert torch.allclose(r.sum(-1), torch.ones(10, dtype=torch.float64), atol=1e-12)


def test_batch_of_ragged_examples_equals_one_by_one():
    exs = [_random_maps(4, 3, n, seed=n) for n in (5, 9, 3, 9, 12)]
    out = rollout_batch(exs, bucket_size=2)
    for a, r in zip(exs, out):
        assert r.shape == (1, a.shape[-1])
        assert torch.allclose(r, rollout(a, output_positions=[0]), atol=1e-12)
    full = rollout_batch(exs, output_positions="all", bucket_size=3)
    for a, r in zip(exs, full):
        assert torch.allclose(r, rollout(a), atol=1e-12)
    picked = rollout_batch(exs, output_positions=[[1], [2, 3], [0], [8], [-1]])
    assert torch.allclose(picked[1], rollout(exs[1], output_positions=[2, 3]), atol=1e-12)
    assert torch.allclose(picked[4], rollout(exs[4], output_positions=[11]), atol=1e-12)


def test_batch_default_row_of_causal_examples_is_the_last_token():
    exs = [_random_maps(2, 2, n, seed=n, causal=True) for n in (4, 7)]
    out = rollout_batch(exs, kind="causal")
    assert torch.allclose(out[1], rollout(exs[1], output_positions=[6]), atol=1e-12)


def test_rollout_maps_gives_token_scores_that_round_trip_through_json():
    a = _random_maps(3, 2, 6, seed=3).float()
    maps = make_maps(a, tokens=["[CLS]", "a", "b", "c", "d", "[SEP]"], special=[True, False, False, False, False, True])
    ts = rollout_maps(maps)
    assert ts.output_positions == (0,)
    assert ts.scores.shape == (1, 6)
    d = json.loads(ts.to_json())
    assert d["tokens"][0] == "[CLS]" and len(d["scores"][0]) == 6
    back = TokenScores.from_dict(d)
    assert (back.scores == ts.scores).all()
    frame = ts.to_frame()
    assert list(frame.columns[-3:]) == ["input_position", "input_token", "score"]
    assert frame["score"].sum() == pytest.approx(1.0, abs=1e-6)


def test_rollout_maps_default_for_causal_is_last_token():
    a = _random_maps(2, 2, 5, seed=4, causal=True).float()
    ts = rollout_maps(make_maps(a, kind="causal"))
    assert ts.output_positions == (4,)
    assert ts.scores[0, 4] > 0


@pytest.mark.parametrize(
    "bad, kind, match",
    [
        (torch.rand(2, 2, 3, 4), NotApplicable, "square"),  # cross-attention: rollout is not defined there
        (torch.full((2, 2, 3, 3), 0.5), InputError, "sum to 1"),  # scores, not probabilities: bad input
        (torch.full((2, 2, 3, 3), float("nan")), InputError, "NaN"),
    ],
)
def test_bad_maps_are_rejected_with_the_reason(bad, kind, match):
    with pytest.raises(kind, match=match):
        rollout(bad)


def test_out_of_range_position_names_the_valid_range():
    with pytest.raises(ValueError, match=r"0\.\.5"):
        rollout(_random_maps(2, 2, 6), output_positions=[6])


def test_future_attention_is_rejected_when_declared_causal():
    with pytest.raises(ValueError, match="future"):
        rollout(_random_maps(2, 2, 4), causal=True)


def test_bad_head_specs_are_rejected():
    a = _random_maps(2, 3, 4)
    with pytest.raises(ValueError, match="out of range"):
        rollout(a, heads=[3])
    with pytest.raises(ValueError, match="non-negative"):
        rollout(a, heads=torch.tensor([1.0, -1.0, 1.0]))
    with pytest.raises(ValueError, match="mean"):
        rollout(a, heads="max")


def test_non_consecutive_captured_layers_are_refused():
    from probe.maps import AttentionMaps

    a = _random_maps(2, 2, 4).float()
    maps = AttentionMaps(
        a, tokens=list("abcd"), word_ids=[0, 1, 2, 3], special_mask=torch.zeros(4, dtype=torch.bool), layers=(0, 3)
    )
    with pytest.raises(ValueError, match="consecutive"):
        rollout_maps(maps)


def test_cls_row_on_the_bundled_model_is_a_distribution_over_its_tokens(minilm):
    from probe.runs.capture import capture

    (maps,) = capture(minilm, "The keys to the cabinet are on the table.")
    ts = rollout_maps(maps)
    assert ts.scores.shape == (1, maps.n_tokens)
    assert ts.scores.sum() == pytest.approx(1.0, abs=1e-5)
    # the residual path keeps at least 0.5^L of [CLS] on itself
    assert ts.scores[0, 0] >= 0.5**maps.n_layers


def test_cli_rollout_of_the_bundled_model_writes_the_cls_row(tmp_path):
    from click.testing import CliRunner

    from probe.app.cli import command

    rollout_cmd = command("rollout")

    res = CliRunner().invoke(rollout_cmd, ["-t", "The keys to the cabinet are on the table.", "-o", str(tmp_path)])
    assert res.exit_code == 0, res.output
    d = json.loads((tmp_path / "rollout.json").read_text())
    assert d["tokens"][0] == "[CLS]" and d["output_positions"] == [0]
    assert sum(d["scores"][0]) == pytest.approx(1.0, abs=1e-5)
    assert (tmp_path / "rollout.csv").exists() and (tmp_path / "rollout.png").exists()


def test_cli_rollout_norm_weights_need_a_live_model(tmp_path):
    from click.testing import CliRunner

    from probe.app.cli import command

    rollout_cmd = command("rollout")

    res = CliRunner().invoke(rollout_cmd, ["--store", str(tmp_path), "--weights", "norm", "-o", str(tmp_path / "o")])
    assert res.exit_code == 1 and "give an input instead of --store" in res.output
