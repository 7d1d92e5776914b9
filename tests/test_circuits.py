"""Circuits between heads: exact path patching, EAP / EAP-IG, circuit discovery, checked
on circuits whose edges are known (zoo:relay set by hand, zoo:induction trained)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from probe.analyses.circuits.attribution import edge_attribution
from probe.analyses.circuits.discovery import circuit_objective, recovery_curve
from probe.analyses.circuits.edges import Edge, all_edges, check_edge, parse_edge
from probe.analyses.circuits.objectives import SimilarityMetric
from probe.analyses.circuits.path_patching import path_patch

from probe.hooks import count_hooks

CLEAN = ["the cat sat on the mat today", "a dog ran in the big park"]
CORRUPT = ["the cow ate on the hill today", "a man ran at the old house"]


def _tiny(bert_tokenizer, family: str, zero_mlp: bool = False, layers: int = 3):
    import transformers as T
    from probe.models import ModelAdapter

    v = len(bert_tokenizer)
    cfg = {
        "gpt2": T.GPT2Config(vocab_size=v, n_embd=32, n_layer=layers, n_head=4, pad_token_id=0),
        "llama": T.LlamaConfig(
            vocab_size=v,
            hidden_size=32,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=64,
            pad_token_id=0,
        ),
        "bert": T.BertConfig(
            vocab_size=v,
            hidden_size=32,
            num_hidden_layers=layers,
            num_attention_heads=4,
            intermediate_size=64,
            pad_token_id=0,
        ),
    }[family]
    torch.manual_seed(0)
    model = T.AutoModel.from_config(cfg)
    if zero_mlp:
        with torch.no_grad():
            for n, p in model.named_parameters():
                if ".mlp." in n:
                    p.zero_()
    return ModelAdapter(name=f"tiny-{family}", model=model, tokenizer=bert_tokenizer, family=family)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_path_patching_equals_cutting_one_edge_of_the_circuit_without_mlps(bert_tokenizer, family):
    """Two independent implementations: the two-step path patch (heads frozen, receiver input
    recorded then written) and the edge mixer (every receiver's own residual stream) must give
    the same objective for every single edge when no MLP lies on the path; llama is GQA."""
    a = _tiny(bert_tokenizer, family, zero_mlp=True)
    m = SimilarityMetric(CORRUPT)
    graph = all_edges(a)
    pp = path_patch(a, CLEAN, CORRUPT, m)
    sub = list(range(0, len(graph), 5))
    cut = circuit_objective(a, CLEAN, CORRUPT, m, [[x for x in graph if x != graph[i]] for i in sub] + [graph], graph)
    assert cut[-1] == pytest.approx(pp.clean.mean(), abs=1e-6)  # the full circuit is the clean run
    np.testing.assert_allclose(cut[:-1] - pp.clean.mean(), pp.table["delta"].to_numpy()[sub], atol=2e-6)
    assert np.abs(pp.table["delta"].to_numpy()).max() > 1e-3  # the edges do something
    assert count_hooks(a.model) == 0


def test_grouped_query_attention_receiver_is_the_query_heads_own_group(bert_tokenizer):
    """4 query heads, 2 key/value heads: query heads 2 and 3 read kv group 1; an edge into
    either's key is the same edge, and differs from group 0's."""
    a = _tiny(bert_tokenizer, "llama")
    e2, e3, e0 = (parse_edge(a, f"0.1->1.{h}.k") for h in (2, 3, 0))
    assert e2 == e3 == Edge(0, 1, 1, 1, "k") and e0.receiver_slot == 0
    assert parse_edge(a, "0.1->1.3.q").receiver_slot == 3  # queries stay per head
    assert len([e for e in all_edges(a) if e.channel == "k" and e.sender == (0, 0) and e.receiver_layer == 1]) == 2
    pp = path_patch(a, CLEAN, CORRUPT, SimilarityMetric(CORRUPT), [e2, e0])
    assert pp.table["delta"].abs().min() > 0 and pp.table["delta"][0] != pp.table["delta"][1]
    with pytest.raises(ValueError, match="k slots 0..1"):
        check_edge(a, Edge(0, 1, 1, 2, "k"))


@pytest.mark.slow
@pytest.mark.parametrize("family", ["gpt2", "bert"])
def test_edge_attribution_ranks_edges_like_exact_path_patching(bert_tokenizer, family):
    """EAP is the first-order estimate of each exact effect: on random small models the two
    rankings agree (a wrong Jacobian or gradient gives ~0), and the scores are first order,
    not equal."""
    from scipy.stats import spearmanr

    a = _tiny(bert_tokenizer, family)
    m = SimilarityMetric(CORRUPT)
    pp = path_patch(a, CLEAN, CORRUPT, m)
    eap = edge_attribution(a, CLEAN, CORRUPT, m, "eap")
    ig = edge_attribution(a, CLEAN, CORRUPT, m, "eap-ig", steps=4)
    assert spearmanr(pp.table["effect"], eap.table["effect"])[0] > 0.7
    assert spearmanr(pp.table["effect"], ig.table["effect"])[0] > 0.6
    assert not np.allclose(ig.table["effect"], eap.table["effect"])  # IG moves the gradient, outputs included
    assert not np.allclose(
        ig.table["effect"][ig.table["channel"] == "out"], eap.table["effect"][eap.table["channel"] == "out"]
    )
    assert count_hooks(a.model) == 0


def _relay():
    from probe.models import load_model, zoo
    from probe.models.zoo import relay

    from probe.inputs import Corpus

    a = load_model("zoo:relay")
    ex = zoo.eval_examples("relay", n=8)
    bad = relay.corrupt(ex)
    return (
        a,
        Corpus(texts=tuple(e["text"] for e in ex), examples=tuple(ex)),
        Corpus(texts=tuple(e["text"] for e in bad), examples=tuple(bad)),
    )


@pytest.mark.slow
def test_relay_path_patching_finds_exactly_the_constructed_edges():
    """zoo:relay's answer flows 0.0 -> 1.0.v -> out by construction: each of those two edges
    carries the whole corruption (effect 1), every other edge none of it; the circuit of the
    two edges is fully faithful and the known edges get ROC AUC 1."""
    from probe.analyses.circuits.known import known_edges, recovery_stats

    a, clean, bad = _relay()
    pp = path_patch(a, clean, bad, "loss")
    eff = dict(zip(pp.table["edge"], pp.table["effect"]))
    assert eff["0.0->1.0.v"] == pytest.approx(1.0, abs=0.01) and eff["1.0->out"] == pytest.approx(1.0, abs=0.01)
    others = [abs(v) for k, v in eff.items() if k not in ("0.0->1.0.v", "1.0->out")]
    assert max(others) < 1e-3
    known = known_edges(a)
    curve = recovery_curve(a, clean, bad, "loss", pp.table, share=0.9)
    assert set(curve.circuit) == set(known) and curve.curve["faithfulness"].iloc[2] == pytest.approx(1, abs=0.01)
    assert curve.curve["faithfulness"].iloc[1] < 0.1  # one of the two edges alone recovers nothing
    stats = recovery_stats(pp.table, known, curve.circuit, a)
    assert stats["auc"] == 1.0 and stats["precision"] == 1.0 and stats["recall"] == 1.0


@pytest.mark.slow
def test_random_model_known_circuit_recovers_no_more_than_random_edge_sets():
    """A randomly initialised model of zoo:relay's configuration: the constructed circuit's
    edges recover no more of the objective than random edge sets of the same composition (one
    head->head value edge, one head->output edge), and far less than in the hand-set model,
    where they recover all of it."""
    import transformers as T
    from probe.analyses.circuits.known import known_edges, matched_random_circuits
    from probe.models import ModelAdapter

    a, clean, bad = _relay()
    known = known_edges(a)
    torch.manual_seed(0)
    rand = ModelAdapter(
        name="random-relay", model=T.GPT2LMHeadModel(a.model.config), tokenizer=a.tokenizer, family="gpt2"
    )
    graph = all_edges(rand)
    null = matched_random_circuits(graph, known, 20)
    assert all(sorted(e.channel for e in n) == sorted(e.channel for e in known) for n in null)
    vals = circuit_objective(rand, clean, bad, "loss", [known] + null + [graph, []], graph)
    full, empty = vals[-2], vals[-1]
    faith = (vals[:-2] - empty) / (full - empty)
    assert faith[0] <= np.quantile(faith[1:], 0.95)
    assert faith[0] < 0.5


def test_bad_edges_and_an_unchanged_corruption_are_refused(bert_tokenizer):
    a = _tiny(bert_tokenizer, "gpt2")
    with pytest.raises(ValueError, match="must be in a later layer than the sender"):
        parse_edge(a, "2.0->1.1.q")
    with pytest.raises(ValueError, match="must be in a later layer"):
        parse_edge(a, "1.0->1.1.v")
    with pytest.raises(ValueError, match="receiver head 1.9 does not exist"):
        parse_edge(a, "0.0->1.9.k")
    with pytest.raises(ValueError, match="sender head 0.7 does not exist"):
        parse_edge(a, "0.7->out")
    with pytest.raises(ValueError, match="cannot read edge"):
        parse_edge(a, "0.0=>1.1")
    with pytest.raises(ValueError, match="does not change"):
        path_patch(a, CLEAN, CLEAN, SimilarityMetric(CORRUPT), [Edge(0, 0, -1, -1, "out")])
    with pytest.raises(ValueError, match="does not change"):
        edge_attribution(a, CLEAN, CLEAN, SimilarityMetric(CORRUPT))
    with pytest.raises(ValueError, match="not a pre-LayerNorm decoder"):
        circuit_objective(_tiny(bert_tokenizer, "bert"), CLEAN, CORRUPT, SimilarityMetric(CORRUPT), [[]])
    assert count_hooks(a.model) == 0


@pytest.mark.slow
def test_cli_circuit_writes_tables_and_graph_and_refuses_bad_edges(tmp_path):
    import json

    from click.testing import CliRunner
    from probe.app.cli import main

    out = tmp_path / "c"
    r = CliRunner().invoke(main, ["circuit", "--model", "zoo:relay", "--limit", "4", "--out", str(out)])
    assert r.exit_code == 0, r.output
    summary = json.loads((out / "circuit.json").read_text())
    assert summary["circuit"] == ["0.0->1.0.v", "1.0->out"] or summary["circuit"] == ["1.0->out", "0.0->1.0.v"]
    for f in ("edges.csv", "curve.csv", "known.csv", "circuit.png", "curve.png"):
        assert (out / f).stat().st_size > 0
    for edge, what in (("1.0->0.1.k", "later layer"), ("0.0->1.5.q", "does not exist")):
        r = CliRunner().invoke(
            main, ["circuit", "--model", "zoo:relay", "--limit", "2", "--edge", edge, "--out", str(tmp_path / "bad")]
        )
        lines = [x for x in r.output.splitlines() if x.strip()]
        assert r.exit_code == 1 and lines[-1].startswith("Error:") and what in lines[-1] and edge in lines[-1]
        assert not (tmp_path / "bad").exists()


@pytest.mark.slow
def test_induction_previous_token_head_feeds_induction_heads_through_keys():
    """zoo:induction (Olsson et al. 2022): the previous-token head of layer 0 (found from its
    attention) reaches every induction head of layer 1 through its key input; exact path
    patching ranks those key edges and the induction heads' output edges above the rest."""
    from probe.analyses.circuits.known import known_edges, recovery_stats
    from probe.analyses.necessity.patching import corrupt_zoo
    from probe.models import load_model, zoo

    from probe.inputs import Corpus

    a = load_model("zoo:induction")
    ex = zoo.eval_examples("induction", n=16)
    bad = corrupt_zoo("induction", ex)
    clean = Corpus(texts=tuple(e["text"] for e in ex), examples=tuple(ex))
    corr = Corpus(texts=tuple(e["text"] for e in bad), examples=tuple(bad))
    known = known_edges(a)
    assert {e.channel for e in known} == {"k", "out"} and len({e.sender for e in known if e.channel == "k"}) == 1
    pp = path_patch(a, clean, corr, "loss", batch_size=16)
    stats = recovery_stats(pp.table, known, [], a)
    assert stats["auc"] > 0.9
    k_edges = pp.table[pp.table["channel"] == "k"].sort_values("effect", ascending=False)
    assert k_edges["edge"].iloc[0] in {e.name() for e in known}
