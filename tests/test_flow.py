"""Attention flow (Abnar & Zuidema 2020): closed forms, min-cut, the networkx reference."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from probe.errors import InputError, NotApplicable
import torch

from probe.analyses.flow.attention_flow import adjusted_attention, attention_flow, flow_graph, flow_maps
from conftest import identity, make_maps, previous_token


def _random_maps(L, H, n, seed=0, causal=False, temperature=2.0):
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(L, H, n, n, generator=g, dtype=torch.float64) * temperature
    if causal:
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1)


def test_identity_maps_flow_only_to_themselves():
    f = attention_flow(identity(6, layers=3, heads=2))
    assert torch.allclose(f, torch.eye(6, dtype=torch.float64), atol=1e-8)


def test_previous_token_chain_moves_mass_by_the_expected_offsets():
    # Â = ½I + ½P on every layer. From input i−k to output i the paths take k shifts and
    # L−k stays; for 0 < k < L the all-shifts-first and all-stays-first paths are
    # disjoint inside, so the flow is both unit-half edges out of the source: 1. For
    # k = 0 or k = L a single path of half-edges carries 0.5; beyond L nothing.
    L, n, i = 4, 12, 10
    f = attention_flow(previous_token(n, layers=L), output_positions=[i])[0].numpy()
    expected = np.zeros(n)
    expected[i] = expected[i - L] = 0.5
    expected[i - L + 1 : i] = 1.0
    np.testing.assert_allclose(f, expected, atol=1e-8)


def _min_cut(ahat, j, i):
    """Smallest s–t cut of the layered graph by enumerating every node subset."""
    L, n, _ = ahat.shape
    inner = [(l, p) for l in range(L + 1) for p in range(n) if (l, p) not in ((0, j), (L, i))]
    best = np.inf
    for bits in itertools.product((0, 1), repeat=len(inner)):
        side = {(0, j)} | {v for v, b in zip(inner, bits) if b}
        cap = sum(
            ahat[l - 1][q, p]
            for l in range(1, L + 1)
            for p in range(n)
            for q in range(n)
            if (l - 1, p) in side and (l, q) not in side
        )
        best = min(best, cap)
    return best


def test_flow_equals_the_minimum_cut_on_small_graphs():
    for seed in range(3):
        a = _random_maps(3, 2, 3, seed=seed)
        ahat = adjusted_attention(a)
        f = attention_flow(a).numpy()
        for j, i in [(0, 0), (1, 2), (2, 0)]:
            assert f[i, j] == pytest.approx(_min_cut(ahat, j, i), abs=1e-8)


def test_flow_is_below_every_cut_of_the_hand_built_graph():
    # two layers, three tokens: the cuts "all source edges" and "all sink edges"
    a = _random_maps(2, 1, 3, seed=7)
    ahat = adjusted_attention(a)
    f = attention_flow(a).numpy()
    for i in range(3):
        for j in range(3):
            assert f[i, j] <= ahat[0][:, j].sum() + 1e-9
            assert f[i, j] <= ahat[1][i, :].sum() + 1e-9


def test_causal_flow_never_comes_from_the_future_and_matches_networkx():
    a = _random_maps(4, 2, 9, seed=5, causal=True)
    fast = attention_flow(a, causal=True)
    assert fast.triu(1).abs().max().item() == 0
    ref = attention_flow(a, causal=True, reference=True)
    assert (fast - ref).abs().max().item() < 1e-6


def test_single_layer_flow_is_the_adjusted_map():
    a = _random_maps(1, 2, 5, seed=1)
    assert torch.allclose(attention_flow(a), torch.from_numpy(adjusted_attention(a)[0]))


def test_graph_has_the_documented_nodes_and_capacities():
    a = _random_maps(2, 1, 3, seed=2)
    ahat = adjusted_attention(a)
    g = flow_graph(ahat)
    assert g.number_of_nodes() == 9 and g.number_of_edges() == 18
    assert g.edges[(1, 2), (2, 0)]["capacity"] == pytest.approx(ahat[1][0, 2])


@pytest.mark.slow
@pytest.mark.parametrize("n", [8, 16, 24, 32, 40, 48])
def test_fast_flow_equals_networkx_on_random_attention(n):
    a = _random_maps(4, 3, n, seed=n)
    rows = list(range(n)) if n <= 8 else [0, n - 1]
    fast = attention_flow(a, output_positions=rows)
    ref = attention_flow(a, output_positions=rows, reference=True)
    assert (fast - ref).abs().max().item() < 1e-6


@pytest.fixture(scope="module")
def kernel():
    from probe.analyses.flow import layered_maxflow

    if not layered_maxflow.available():
        pytest.skip("the compiled flow kernel could not be built here (no C compiler); scipy is used")
    return layered_maxflow


def _tied_maps(L, H, n, seed, causal=False):
    """Attention with many exactly equal weights: scores on a coarse integer grid."""
    g = torch.Generator().manual_seed(seed)
    s = torch.randint(0, 3, (L, H, n, n), generator=g).double()
    if causal:
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1)


@pytest.mark.parametrize(
    "shape, causal, maker",
    [
        ((2, 1, 7), False, _random_maps),
        ((3, 2, 9), False, _random_maps),
        ((5, 2, 8), True, _random_maps),
        ((4, 3, 10), False, _tied_maps),
        ((6, 1, 6), True, _tied_maps),
    ],
)
def test_compiled_flow_equals_networkx_on_every_pair(kernel, shape, causal, maker):
    L, H, n = shape
    a = maker(L, H, n, seed=L * 100 + n, causal=causal)
    fast = attention_flow(a, causal=causal, solver="dinic")
    ref = attention_flow(a, causal=causal, reference=True)
    assert (fast - ref).abs().max().item() < 1e-9


def test_compiled_flow_on_sharp_and_flat_maps_equals_scipy(kernel):
    # temperature 8: near one-hot rows (the flow runs through few wide edges);
    # temperature 0.1: near-uniform rows (every edge carries a little)
    for temperature in (8.0, 0.1):
        a = _random_maps(6, 4, 40, seed=11, temperature=temperature)
        rows = [0, 17, 39]
        fast = attention_flow(a, output_positions=rows, solver="dinic", workers=2)
        slow = attention_flow(a, output_positions=rows, solver="scipy", workers=1)
        assert (fast - slow).abs().max().item() < 1e-6
        assert fast.min().item() >= 0 and fast.max().item() <= 1 + 1e-12


def test_compiled_flow_stops_at_the_source_cut_when_the_sink_is_wide(kernel):
    # closed form: with Â = I on the last layer's sink row replaced by a uniform row, the
    # sink can take everything, and an input's flow is limited by its own out-capacity
    # Σ_q Â_1[q, j] whenever the middle layers are the identity
    n = 6
    ahat = np.zeros((3, n, n))
    ahat[0] = np.random.default_rng(0).dirichlet(np.ones(n), size=n)
    ahat[1] = np.eye(n)
    ahat[2] = np.full((n, n), 1 / n)
    got = kernel.max_flows(ahat, np.arange(n), np.zeros(n, dtype=int))
    # source j reaches (1, q) with Â_1[q, j], each (1, q) → (2, q) → sink with 1/n
    expected = np.minimum(ahat[0], 1 / n).sum(0)
    np.testing.assert_allclose(got, expected, atol=1e-12)


def test_without_the_kernel_auto_falls_back_to_scipy(monkeypatch):
    from probe.analyses.flow import attention_flow as af, layered_maxflow

    monkeypatch.setattr(layered_maxflow, "available", lambda: False)
    assert af.solver_name("auto") == "scipy"
    a = previous_token(8, layers=3)
    ts = flow_maps(make_maps(a), output_positions=[7])
    assert ts.meta["solver"].startswith("scipy")
    np.testing.assert_allclose(np.asarray(ts.scores[0])[4:], [0.5, 1, 1, 0.5], atol=1e-6)


def test_unknown_solver_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="dinic, scipy, networkx"):
        attention_flow(_random_maps(2, 1, 4), solver="fast")


def test_fast_flow_in_parallel_equals_serial():
    a = _random_maps(3, 2, 10, seed=3)
    assert torch.equal(attention_flow(a, workers=2), attention_flow(a, workers=1))


@pytest.mark.slow
def test_flow_equals_networkx_on_the_bundled_model(minilm):
    from probe.runs.capture import capture

    text = "The old man who lived by the sea sold his boat to a young fisherman from town."
    (maps,) = capture(minilm, text)
    assert 18 <= maps.n_tokens <= 22
    fast = flow_maps(maps, output_positions=[0, maps.n_tokens // 2, -1])
    ref = flow_maps(maps, output_positions=[0, maps.n_tokens // 2, -1], reference=True)
    assert np.abs(fast.scores - ref.scores).max() < 1e-6
    assert fast.output_positions == (0, maps.n_tokens // 2, maps.n_tokens - 1)
    assert fast.method == "flow"


def test_flow_maps_defaults_to_cls_or_last_token():
    a = _random_maps(2, 2, 5, seed=9).float()
    assert flow_maps(make_maps(a)).output_positions == (0,)
    c = _random_maps(2, 2, 5, seed=9, causal=True).float()
    ts = flow_maps(make_maps(c, kind="causal"))
    assert ts.output_positions == (4,)


def test_long_inputs_warn_with_an_estimated_time_before_starting():
    a = _random_maps(2, 1, 12, seed=0)
    with pytest.warns(RuntimeWarning, match=r"estimated .* s"):
        attention_flow(a, output_positions=[0], max_tokens=10)


@pytest.mark.parametrize(
    "bad, kind, match",
    [
        (torch.rand(2, 2, 3, 4), NotApplicable, "square"),  # cross-attention: flow is not defined there
        (torch.full((2, 2, 3, 3), 0.2), InputError, "sum to 1"),  # scores, not probabilities: bad input
    ],
)
def test_bad_maps_are_rejected(bad, kind, match):
    with pytest.raises(kind, match=match):
        attention_flow(bad)


def test_out_of_range_output_position_names_the_valid_range():
    with pytest.raises(ValueError, match=r"0\.\.4"):
        attention_flow(_random_maps(2, 1, 5), output_positions=[5])


def test_flow_of_a_batch_is_refused_with_advice():
    with pytest.raises(ValueError, match="one example"):
        attention_flow(_random_maps(2, 1, 4).expand(3, 2, 1, 4, 4))


# ---- CLI: probe flow ------------------------------------------------------------------


def _store_with(tmp_path, attn, kind="self"):
    from probe.store.directory import write_store

    maps = make_maps(attn.float(), kind=kind)
    return write_store(tmp_path / "store", [(0, maps)], {"model": "hand-built"})


def test_cli_flow_from_a_store_writes_json_csv_and_heatmap(tmp_path):
    import json

    import pandas as pd
    from click.testing import CliRunner

    from probe.app.cli import command

    flow_cmd = command("flow")

    a = previous_token(12, layers=4)
    _store_with(tmp_path, a)
    out = tmp_path / "out"
    res = CliRunner().invoke(
        flow_cmd, ["--store", str(tmp_path / "store"), "--example", "0", "-p", "10", "-p", "-1", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    d = json.loads((out / "flow.json").read_text())
    assert d["output_positions"] == [10, 11] and len(d["tokens"]) == 12
    np.testing.assert_allclose(d["scores"][0][6:11], [0.5, 1, 1, 1, 0.5], atol=1e-8)
    frame = pd.read_csv(out / "flow.csv")
    assert len(frame) == 24
    assert (out / "flow.png").stat().st_size > 0


def test_cli_flow_default_is_the_last_token_for_causal_maps(tmp_path):
    import json

    from click.testing import CliRunner

    from probe.app.cli import command

    flow_cmd = command("flow")

    _store_with(tmp_path, _random_maps(2, 2, 6, seed=1, causal=True), kind="causal")
    res = CliRunner().invoke(flow_cmd, ["--store", str(tmp_path / "store"), "-o", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "o" / "flow.json").read_text())["output_positions"] == [5]


def test_cli_flow_bad_input_is_one_clear_line(tmp_path):
    from click.testing import CliRunner

    from probe.app.cli import command

    flow_cmd = command("flow")

    _store_with(tmp_path, identity(5, layers=2))
    runner = CliRunner()
    res = runner.invoke(flow_cmd, ["--store", str(tmp_path / "store"), "-p", "7", "-o", str(tmp_path / "o")])
    assert res.exit_code == 1 and "valid positions are 0..4" in res.output
    res = runner.invoke(flow_cmd, ["--store", str(tmp_path / "store"), "--example", "3", "-o", str(tmp_path / "o")])
    assert res.exit_code == 1 and "0..0" in res.output
    res = runner.invoke(flow_cmd, ["-o", str(tmp_path / "o")])
    assert res.exit_code == 1 and "no input: give --text" in res.output


# ---- blank-out correlation (Abnar & Zuidema Table 1) on zoo:agreement -----------------


@pytest.fixture(scope="module")
def agreement():
    from probe.models import load_model

    try:
        return load_model("zoo:agreement")
    except ValueError as exc:
        pytest.skip(f"zoo:agreement is not available: {exc}")


def test_blank_out_finds_the_subject_noun(agreement):
    from probe.analyses.flow.blankout import blank_out_importance
    from probe.models.zoo import eval_examples

    hits = 0
    examples = eval_examples("agreement", n=20)
    for e in examples:
        imp, y = blank_out_importance(agreement, e["text"], e["label"])
        assert y == e["label"]
        hits += int(imp.argmax()) == e["evidence_word"] + 1  # +1: [CLS] comes first
    assert hits >= 15


def test_correlation_table_has_one_row_per_method_layer_and_closed_form_ranks():
    from probe.analyses.flow.blankout import correlation_table, importance_correlations

    a = previous_token(6, layers=2, heads=2)
    a[:, :, 0] = torch.tensor([0.1, 0.5, 0.2, 0.1, 0.05, 0.05])  # [CLS] row
    imp = np.array([0.0, 0.9, 0.2, 0.5, 0.1, 0.05])
    special = torch.tensor([True, False, False, False, False, True])
    per = importance_correlations([a], [imp], [special])
    raw_words = per.query("method == 'raw' and positions == 'words' and layer == 1").rho.item()
    # word ranks: attention 4,3,2,1 vs importance 4,2,3,1 -> ρ = 1 − 6·2/(4·15) = 0.8
    assert raw_words == pytest.approx(0.8)
    table = correlation_table(per)
    assert len(table) == 2 * 3 * 2  # positions × methods × layers
