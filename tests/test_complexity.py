"""Tests of "Why self-attention" measured (Vaswani et al. 2017, Table 1): probe.analyses.paper.complexity*."""

from __future__ import annotations

import json
import math

import networkx as nx
import pytest
import torch
from click.testing import CliRunner

from probe.analyses.paper.complexity import (
    analyze_complexity,
    check_memory,
    fit_exponents,
    measure_grid,
    summary_table,
    to_markdown,
    validate_sizes,
)
from probe.analyses.paper.complexity_crossover import crossover_table
from probe.analyses.paper.complexity_layers import LAYER_KINDS, RECURRENT_KINDS, estimate_peak_bytes, make_layer
from probe.analyses.paper.complexity_measure import count_flops, measure_layer
from probe.analyses.paper.complexity_paths import (
    closed_form_path_length,
    connectivity_graph,
    max_path_length,
    path_length_table,
)
from probe.app.cli import command
from probe.app.registry.analyses.complexity import parse_sizes

complexity_cmd = command("complexity")

GATES = {"rnn": 1, "gru": 3, "lstm": 4}


def expected_flops(kind, n, d, k, r):
    """The FLOPs each layer should count, from its definition (2 per multiply-add)."""
    if kind == "self_attention":
        return 4 * 2 * n * d * d + 2 * 2 * n * n * d
    if kind == "restricted_attention":
        return 4 * 2 * n * d * d + 2 * 2 * n * r * d
    if kind in GATES:
        return 2 * 2 * GATES[kind] * n * d * d
    if kind in ("conv", "dilated_conv"):
        return 2 * k * n * d * d
    return 2 * k * n * d + 2 * n * d * d


# --------------------------------------------------------------------------- layers


@pytest.mark.parametrize("kind", LAYER_KINDS)
@pytest.mark.parametrize("n,d,k,r", [(7, 5, 3, 4), (20, 12, 5, 9)])
def test_flop_counter_sees_every_multiply_add(kind, n, d, k, r):
    counted = count_flops(make_layer(kind, d, k=k, r=r), torch.randn(n, d))
    assert counted["total"] == expected_flops(kind, n, d, k, r)
    assert sum(v for t, v in counted.items() if t != "total") == counted["total"]


def test_restricted_attention_is_banded_causal_attention_and_linear_in_n():
    n, d, r = 23, 8, 5
    layer = make_layer("restricted_attention", d, r=r)
    x = torch.randn(n, d)
    with torch.no_grad():
        q, k, v = layer.q_proj(x), layer.k_proj(x), layer.v_proj(x)
        i = torch.arange(n)
        outside = (i[None, :] > i[:, None]) | (i[None, :] <= i[:, None] - r)
        scores = (q @ k.T / math.sqrt(d)).masked_fill(outside, float("-inf"))
        reference = layer.o_proj(scores.softmax(-1) @ v)
        assert torch.allclose(layer(x), reference, atol=1e-5)
    # banded, not masked full attention: doubling n exactly doubles the FLOPs
    f1 = count_flops(layer, torch.randn(64, d))["total"]
    f2 = count_flops(layer, torch.randn(128, d))["total"]
    assert f2 == 2 * f1


@pytest.mark.parametrize("kind", ["rnn", "gru", "lstm"])
def test_recurrent_loop_matches_torch_recurrent_layers(kind):
    n, d = 9, 6
    layer = make_layer(kind, d)
    torch_cls = {"rnn": torch.nn.RNN, "gru": torch.nn.GRU, "lstm": torch.nn.LSTM}[kind]
    ref = torch_cls(d, d)
    with torch.no_grad():
        ref.weight_ih_l0.copy_(layer.w_ih)
        ref.weight_hh_l0.copy_(layer.w_hh)
        ref.bias_ih_l0.copy_(layer.bias)
        ref.bias_hh_l0.zero_()
        x = torch.randn(n, d)
        expected = ref(x.unsqueeze(1))[0].squeeze(1)
        assert torch.allclose(layer(x), expected, atol=1e-5)


@pytest.mark.parametrize("kind", LAYER_KINDS)
def test_every_layer_is_causal(kind):
    layer = make_layer(kind, 8, k=3, r=4)
    x = torch.randn(30, 8)
    y = x.clone()
    y[20:] += 1.0
    with torch.no_grad():
        a, b = layer(x), layer(y)
    assert torch.allclose(a[:20], b[:20], atol=1e-6)
    assert not torch.allclose(a[20:], b[20:], atol=1e-3)


def test_sequential_ops_constant_for_parallel_layers_and_linear_for_recurrence():
    for kind in LAYER_KINDS:
        layer = make_layer(kind, 8, r=4)
        s16, s32, s64 = (measure_layer(layer, n, repeats=1).sequential_ops for n in (16, 32, 64))
        if kind in RECURRENT_KINDS:
            # a fixed number of dependent ops per time step: differences double with n
            assert s32 - s16 > 16 and s64 - s32 == 2 * (s32 - s16)
        else:
            assert s16 == s32 == s64 <= 10


def test_measure_layer_restores_threads_and_grad_mode():
    before = torch.get_num_threads()
    cost = measure_layer(make_layer("self_attention", 8), 16, repeats=2, threads=1)
    assert torch.get_num_threads() == before and torch.is_grad_enabled()
    assert cost.time_s > 0 and cost.flops == expected_flops("self_attention", 16, 8, 3, 16)


def test_peak_memory_grows_with_the_attention_matrix_and_estimate_bounds_it():
    d = 8
    small = measure_layer(make_layer("self_attention", d), 256, repeats=1).peak_bytes
    large = measure_layer(make_layer("self_attention", d), 512, repeats=1).peak_bytes
    assert 3.5 < large / small < 4.2  # the [n, n] scores dominate when n >> d
    for kind in LAYER_KINDS:
        measured = measure_layer(make_layer(kind, 16, k=3, r=8), 128, repeats=1).peak_bytes
        estimate = estimate_peak_bytes(kind, 128, 16, k=3, r=8)
        assert measured <= estimate <= 4 * measured, kind


# --------------------------------------------------------------------------- exponents


@pytest.fixture(scope="module")
def small_grid():
    """All layer types, sizes chosen so that each paper term dominates somewhere."""
    return measure_grid([128, 256], [4, 8, 32, 64], k=3, r=16, repeats=1)


@pytest.mark.slow
def test_fitted_exponents_match_the_paper_where_each_term_dominates(small_grid):
    grid, terms = small_grid
    exps = fit_exponents(grid, terms)
    paper = exps[exps.in_paper & (exps.term != "sequential operations")]
    # every paper term except the two that need k or r >> d is fitted on this grid
    fitted = paper.dropna(subset=["fitted_flops"])
    missing = set(paper.layer[paper.fitted_flops.isna()])
    assert missing == {"restricted_attention", "separable_conv"}
    assert len(fitted) == 2 * 7  # n and d for 7 layer types
    assert ((fitted.fitted_flops - fitted.paper_exponent).abs() <= 0.15).all()
    assert fitted.within_tolerance.all()
    sa = fitted[fitted.layer == "self_attention"].set_index("variable")
    # n² dominates (>= 90% of FLOPs, n >= 18d) only at (128, 4), (256, 4), (256, 8)
    assert sa.loc["n", "points"] == 3
    assert (sa.loc["n", "n_range"], sa.loc["n", "d_range"]) == ("128–256", "4–8")
    seq = exps[exps.term == "sequential operations"].set_index("layer").fitted_flops
    assert all(abs(seq[k] - (1 if k in RECURRENT_KINDS else 0)) <= 0.15 for k in LAYER_KINDS)


def test_terms_that_need_a_wide_window_or_kernel_dominate_when_r_and_k_exceed_d():
    grid, terms = measure_grid([64, 128], [1, 2, 4], ["restricted_attention", "separable_conv"], k=64, r=64, repeats=1)
    exps = fit_exponents(grid, terms).set_index(["layer", "term", "variable"])
    for layer, term in (("restricted_attention", "r·n·d"), ("separable_conv", "k·n·d")):
        assert abs(exps.loc[(layer, term, "n"), "fitted_flops"] - 1) <= 0.15
        assert abs(exps.loc[(layer, term, "d"), "fitted_flops"] - 1) <= 0.15


def test_fit_recovers_known_exponents_from_a_synthetic_grid():
    import pandas as pd

    rows, terms = [], []
    for n in (10, 20, 40):
        for d in (3, 6):
            f = 5 * n**2 * d
            rows.append(dict(layer="self_attention", n=n, d=d, flops=f, time_s=n**1.5 * d, sequential_ops=7))
            terms.append(dict(layer="self_attention", n=n, d=d, term="n²·d", flops=f, share=1.0, in_paper=True))
    exps = fit_exponents(pd.DataFrame(rows), pd.DataFrame(terms)).set_index(["term", "variable"])
    assert exps.loc[("n²·d", "n"), "fitted_flops"] == pytest.approx(2)
    assert exps.loc[("n²·d", "d"), "fitted_flops"] == pytest.approx(1)
    assert exps.loc[("n²·d", "n"), "fitted_time"] == pytest.approx(1.5)
    assert exps.loc[("sequential operations", "n"), "fitted_flops"] == pytest.approx(0)


# --------------------------------------------------------------------------- paths


@pytest.mark.parametrize("kind", LAYER_KINDS)
def test_graph_path_lengths_equal_the_closed_forms(kind):
    for k, r in ((2, 2), (3, 5), (4, 3)):
        for n in list(range(1, 26)) + [64, 81]:
            assert max_path_length(kind, n, k=k, r=r) == closed_form_path_length(kind, n, k=k, r=r)


def test_path_lengths_grow_as_the_paper_says():
    def p(kind, n, **kw):
        return max_path_length(kind, n, **kw)

    assert p("self_attention", 200) == p("self_attention", 2) == 1
    assert [p("gru", n) for n in (50, 100, 200)] == [50, 100, 200]
    assert p("conv", 201, k=3) == 2 * p("conv", 101, k=3) == 100  # O(n/k)
    assert p("conv", 201, k=5) == 50
    assert p("restricted_attention", 201, r=11) == 20  # O(n/r)
    assert [p("dilated_conv", n, k=2) for n in (16, 17, 32, 33, 64)] == [4, 5, 5, 6, 6]  # O(log n)
    assert p("dilated_conv", 81, k=3) == 4 and p("dilated_conv", 82, k=3) == 5


def test_connectivity_graphs_encode_what_each_position_reads():
    g = connectivity_graph("conv", 6, k=3)
    assert set(g.predecessors(("out", 4))) == {("in", 2), ("in", 3), ("in", 4), ("out", 2), ("out", 3), ("out", 4)}
    g = connectivity_graph("dilated_conv", 9, k=3, depth=2)
    assert set(g.predecessors((2, 8))) == {(1, 8), (1, 5), (1, 2)}  # dilation 3 at layer 2
    g = connectivity_graph("lstm", 5)
    assert nx.shortest_path_length(g, (0, 0), (1, 4)) == 5  # one hop in, four steps


def test_path_length_table_skips_the_graph_past_its_limit():
    table = path_length_table([8, 64], ["self_attention", "conv"], graph_max_n=32)
    assert table.path_length_graph.isna().tolist() == [False, True, False, True]
    assert table.set_index(["layer", "n"]).loc[("conv", 64), "path_length_closed_form"] == 32


# --------------------------------------------------------------------------- crossover


def test_crossover_follows_from_the_counted_flops():
    table = crossover_table([8, 24], verify=True).set_index(["d", "recurrent"])
    for d in (8, 24):
        for cell, g in GATES.items():
            # 8nd² + 4n²d > 4g·nd²  <=>  n > (g - 2)·d
            expected = max(1, (g - 2) * d + 1)
            assert table.loc[(d, cell), "crossover_n"] == expected
    assert table.loc[(8, "gru"), "crossover_over_d"] == pytest.approx(9 / 8)
    assert table.loc[(8, "lstm"), "flops_recurrent"] == "16·d²·n"


def test_grid_crossover_is_the_first_grid_n_past_the_exact_one():
    grid, _ = measure_grid([8, 16, 32, 64], [8], ["self_attention", "gru", "lstm"], repeats=1)
    table = crossover_table([8], ["gru", "lstm"], grid=grid).set_index("recurrent")
    assert table.loc["gru", "crossover_n"] == 9 and table.loc["gru", "crossover_n_grid"] == 16
    assert table.loc["lstm", "crossover_n"] == 17 and table.loc["lstm", "crossover_n_grid"] == 32


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "values,needle", [([0, 16], "got 0"), ([16.5], "16.5"), (["x"], "'x'"), ([], "at least one"), ([True], "True")]
)
def test_bad_sizes_name_the_parameter(values, needle):
    with pytest.raises(ValueError, match="^d ") as err:
        validate_sizes("d", values)
    assert needle in str(err.value)


def test_grid_too_large_for_memory_is_refused_with_the_estimate_before_running():
    with pytest.raises(ValueError, match=r"n=100000, d=64 needs about 111\.\d\d GiB .*self_attention"):
        measure_grid([16, 100000], [64], max_bytes=2**30)
    assert check_memory([16], [64], max_bytes=2**30) == max(estimate_peak_bytes(k, 16, 64) for k in LAYER_KINDS)


def test_bad_layer_settings_raise_value_errors():
    with pytest.raises(ValueError, match="unknown layer type 'mlp'"):
        make_layer("mlp", 8)
    with pytest.raises(ValueError, match="^k must be an integer >= 2"):
        measure_grid([8], [8], ["conv"], k=1)
    with pytest.raises(ValueError, match="^r must be an integer >= 2"):
        max_path_length("restricted_attention", 8, r=0)
    with pytest.raises(ValueError, match="dominance"):
        fit_exponents(*measure_grid([8], [4], ["conv"], repeats=1), dominance=0.3)


# --------------------------------------------------------------------------- report & CLI


def test_parse_sizes_expands_geometric_ranges_and_names_the_option():
    assert parse_sizes("16,32,...,1024", "--n") == [16, 32, 64, 128, 256, 512, 1024]
    assert parse_sizes("64,...,1024", "--d") == [64, 128, 256, 512, 1024]
    assert parse_sizes("3,9,...,100", "--n") == [3, 9, 27, 81, 100]
    for spec in ("0,4", "4,abc", "...,8", "8,..."):
        with pytest.raises(ValueError, match="^--n: "):
            parse_sizes(spec, "--n")


@pytest.mark.slow
def test_cli_writes_tables_figure_and_markdown(tmp_path):
    out = tmp_path / "cx"
    result = CliRunner().invoke(
        complexity_cmd,
        ["--n", "16,32", "--d", "4,8", "--repeats", "1", "--kinds", "self_attention,gru,conv", "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    for name in ("grid", "terms", "exponents", "paths", "crossover", "summary"):
        assert (out / f"{name}.csv").stat().st_size > 0
    assert (out / "complexity.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((out / "settings.json").read_text())["d"] == [4, 8]
    md = (out / "summary.md").read_text()
    assert "| gru | O(n·d²) |" in md and "Crossover" in md
    assert "gru" in result.output


def test_cli_refuses_bad_input_in_one_line(tmp_path):
    runner = CliRunner()
    result = runner.invoke(complexity_cmd, ["--n", "16,-4", "--out", str(tmp_path)])
    assert result.exit_code == 1 and "--n" in result.output
    result = runner.invoke(
        complexity_cmd, ["--n", "16,200000", "--d", "8", "--max-memory", "1", "--out", str(tmp_path)]
    )
    assert result.exit_code == 1
    assert result.output.strip().startswith("Error: grid point n=200000, d=8 needs about")


def test_analyze_complexity_builds_the_summary_beside_table_1():
    report = analyze_complexity([8, 16], [4], ["self_attention", "rnn", "dilated_conv"], repeats=1)
    summary = report.to_frame().set_index("layer")
    assert summary.loc["rnn", "sequential_paper"] == "O(n)"
    assert summary.loc["dilated_conv", "path_measured"] == "8: 2, 16: 3"  # ⌈log_3 n⌉
    assert summary.loc["self_attention", "complexity_paper"] == "O(n²·d)"
    assert set(report.tables()) == {"grid", "terms", "exponents", "paths", "crossover", "summary"}
    assert report.crossover.crossover_n.tolist() == [1]
    md = to_markdown(summary_table(report.grid, report.exponents, report.paths))
    assert md.count("\n") == 2 + 3
