"""Syntax probes: relation heads (Clark et al. 2019), trees from attention, the attention
probe. Closed-form maps on real gold trees, the brackets zoo model, MiniLM on EWT."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import make_maps, previous_token

from probe.analyses.structure.attention_probe import AttentionProbe, pair_features, probe_report, split_by_sentence
from probe.analyses.structure.syntax import OFFSETS, argmax_predictions, relation_accuracy
from probe.analyses.structure.trees import attention_tree, branching_heads, max_arborescence, tree_scores
from probe.analyses.structure.word_graph import AlignmentError, Skipped, word_graph, word_graphs
from probe.inputs.readers import Sentence, read_conllu


def sentence(heads, deprels):
    n = len(heads)
    words = tuple(f"w{i}" for i in range(n))
    spans, pos = [], 0
    for w in words:
        spans.append((pos, pos + len(w)))
        pos += len(w) + 1
    return Sentence(
        text=" ".join(words),
        words=words,
        spans=tuple(spans),
        heads=tuple(heads),
        deprels=tuple(deprels),
        upos=("X",) * n,
        misc=({},) * n,
    )


CAT = sentence([2, 3, 0, 6, 6, 3, 3], ["det", "nsubj", "root", "case", "det", "obl", "punct"])


def gold_map(s, layers=1, heads=1):
    """[CLS] words [SEP]: each word attends to its gold head; the root word to [SEP]."""
    n = len(s)
    a = torch.zeros(n + 2, n + 2)
    a[0, 0] = a[-1, -1] = 1
    for i, h in enumerate(s.heads):
        a[i + 1, h if h > 0 else n + 1] = 1
    return make_maps(
        a.expand(layers, heads, n + 2, n + 2).clone(),
        tokens=["[CLS]"] + list(s.words) + ["[SEP]"],
        special=[True] + [False] * n + [True],
    )


def prev_map(s, layers=1, heads=1):
    n = len(s)
    return make_maps(
        previous_token(n + 2, layers, heads),
        tokens=["[CLS]"] + list(s.words) + ["[SEP]"],
        special=[True] + [False] * n + [True],
    )


@pytest.fixture(scope="module")
def ewt_sentences(ewt_dev):
    return read_conllu(ewt_dev, limit=80)


# ---- word level ----------------------------------------------------------------------
def test_word_graph_matches_word_level_on_subword_tokens(minilm):
    from probe.runs.capture import capture

    s = read_conllu_text(
        "1\tUnbelievably\t_\tADV\t_\t_\t2\tadvmod\t_\t_\n"
        "2\tinconsequential\t_\tADJ\t_\t_\t0\troot\t_\tSpaceAfter=No\n"
        "3\t!\t_\tPUNCT\t_\t_\t2\tpunct\t_\t_\n"
    )
    maps = capture(minilm, s.text, word_spans=[s.spans])[0]
    assert len(maps.tokens) > len(s) + 2  # really split into subwords
    g = word_graph(maps, s)
    ref = maps.word_level(keep_special=True)
    torch.testing.assert_close(g.attention, ref.words_only())
    sp = ref.is_special
    torch.testing.assert_close(g.to_special, ref.attentions[:, :, ~sp][:, :, :, sp].sum(-1))
    torch.testing.assert_close(g.attention.sum(-1) + g.to_special, torch.ones(g.attention.shape[:-1]))


def read_conllu_text(body):
    import tempfile

    f = tempfile.NamedTemporaryFile("w", suffix=".conllu", delete=False)
    f.write(body + "\n")
    f.close()
    return read_conllu(f.name)[0]


def test_unaligned_sentence_is_skipped_and_listed():
    good, bad = gold_map(CAT), gold_map(CAT)
    bad = bad.__class__(**{**bad.__dict__, "meta": {"unaligned_words": [3]}})
    with pytest.raises(AlignmentError, match=r"words \[3\]"):
        word_graph(bad, CAT)
    skipped = Skipped([])
    out = list(word_graphs([good, bad, good], [CAT, CAT, CAT], skipped=skipped))
    assert [g.index for g in out] == [0, 2]
    assert skipped.to_frame()["index"].tolist() == [1]


# ---- relation heads: closed form -------------------------------------------------------
def test_gold_head_map_scores_100_percent_on_every_relation(ewt_sentences):
    graphs = [word_graph(gold_map(s), s, i) for i, s in enumerate(ewt_sentences)]
    acc = relation_accuracy(graphs)
    df = acc.to_frame()
    dep = df[df.direction == "dep_to_head"]
    assert (dep.accuracy == 1.0).all()
    assert "root" not in acc.relations
    n_nonroot = sum(sum(h > 0 for h in s.heads) for s in ewt_sentences)
    assert acc.counts.sum() == n_nonroot


def test_previous_word_map_equals_offset_minus_one_baseline(ewt_sentences):
    graphs = [word_graph(prev_map(s, 2, 3), s, i) for i, s in enumerate(ewt_sentences)]
    acc = relation_accuracy(graphs).with_all()
    expected = acc.offset_hits[:, OFFSETS.index(-1)] / acc.counts
    df = acc.to_frame().query("direction == 'dep_to_head'")
    for _head, part in df.groupby(["layer", "head"]):
        got = part.set_index("relation").accuracy.reindex(acc.relations).to_numpy()
        np.testing.assert_array_equal(got, expected)
    # and the offset baseline itself is right: offset −1 hits are words whose head is i−1
    n_prev = sum(sum(h == i > 0 for i, h in enumerate(s.heads)) for s in ewt_sentences)  # 1-based head == i
    assert acc.offset_hits[acc.relations.index("all"), OFFSETS.index(-1)] == n_prev
    best = acc.best(min_count=20).set_index(["relation", "direction"])
    det = best.loc[("det", "dep_to_head")]
    assert det.baseline_offset in OFFSETS and det.accuracy <= det.baseline_accuracy + 1e-12


def test_argmax_ignores_self_special_and_reads_transpose():
    a = torch.tensor([[0.9, 0.1, 0.0], [0.2, 0.3, 0.5], [0.0, 0.0, 0.0]])[None, None]
    p = argmax_predictions(a)
    assert p[0, 0, 0].tolist() == [1, 2, -1]  # row 0: self excluded → 1; row 2: all zero → none
    assert p[1, 0, 0].tolist() == [1, 0, 1]  # column argmax: who attends most to each word


def test_best_table_flags_rare_relations_and_rejects_missing_ones():
    graphs = [word_graph(gold_map(CAT), CAT)]
    acc = relation_accuracy(graphs)
    best = acc.best(min_count=2)
    assert set(best.columns) >= {
        "relation",
        "direction",
        "layer",
        "head",
        "accuracy",
        "baseline_offset",
        "baseline_accuracy",
        "count",
        "flagged",
    }
    det = best[(best.relation == "det") & (best.direction == "dep_to_head")].iloc[0]
    assert det["count"] == 2 and not det.flagged and det.accuracy == 1.0
    assert best[best.relation == "nsubj"].flagged.all()
    # det: The→cat (+1) and the→mat (+1)
    assert det.baseline_offset == 1 and det.baseline_accuracy == 1.0
    with pytest.raises(ValueError, match="no 'nmod:poss' relation"):
        acc.best(relations=["nmod:poss"])
    with pytest.raises(ValueError, match="no sentence"):
        relation_accuracy([])


def test_base_relations_pool_subtypes():
    s = sentence([2, 0, 2], ["nmod:poss", "root", "nmod"])
    acc = relation_accuracy([word_graph(gold_map(s), s)], base=True)
    assert acc.relations == ("nmod",) and acc.counts.tolist() == [2]


# ---- trees -------------------------------------------------------------------------------
def _is_tree(heads):
    n = len(heads)
    for start in range(n):
        v, seen = start, 0
        while heads[v] != -1:
            v = heads[v]
            seen += 1
            if seen > n:
                return False
    return True


def test_max_arborescence_matches_networkx():
    import networkx as nx

    rng = np.random.default_rng(0)
    for _ in range(60):
        n = int(rng.integers(2, 16))
        s = rng.random((n, n))
        heads = max_arborescence(s)
        assert heads[0] == -1 and _is_tree(heads)
        g = nx.DiGraph()
        g.add_weighted_edges_from((h, d, s[d, h]) for d in range(1, n) for h in range(n) if h != d)
        ref = nx.maximum_spanning_arborescence(g)
        ref_score = sum(w for _, _, w in ref.edges(data="weight"))
        assert sum(s[d, heads[d]] for d in range(1, n)) == pytest.approx(ref_score, abs=1e-12)


def test_attention_tree_breaks_cycles_and_has_one_root():
    # words 0 and 1 attend to each other (a 2-cycle); word 2 attends to 1
    a = np.array([[0.0, 0.9, 0.1], [0.8, 0.0, 0.2], [0.3, 0.7, 0.0]])
    heads = attention_tree(a)
    assert (heads == -1).sum() == 1 and _is_tree(heads)
    # the cycle is broken where it costs least: word 1 gives up its 0.8 and becomes the root,
    # word 0 keeps its 0.9 edge to word 1 (total 0.9 + 0.7 − 1 beats 0.8 + 0.7 − 1)
    assert heads.tolist() == [1, -1, 1]


def test_gold_map_gives_perfect_trees_and_branching_baselines_are_exact(ewt_sentences):
    sents = ewt_sentences[:40]
    graphs = [word_graph(gold_map(s, 1, 2), s, i) for i, s in enumerate(sents)]
    df = tree_scores(graphs).set_index("source")
    assert (df.loc["head", "uas"] == 1.0).all() and df.loc["all_mean", "uas"] == 1.0
    words = sum(len(s) for s in sents)
    right = sum(sum(h == i + 2 or (h == 0 and i == len(s) - 1) for i, h in enumerate(s.heads)) for s in sents)
    assert df.loc["right_branching", "correct"] == right and df.loc["right_branching", "count"] == words
    assert branching_heads(3, "left").tolist() == [-1, 0, 1]


def test_previous_word_map_tree_is_the_left_branching_tree(ewt_sentences):
    sents = ewt_sentences[:30]
    graphs = [word_graph(prev_map(s), s, i) for i, s in enumerate(sents)]
    df = tree_scores(graphs).set_index("source")
    assert df.loc["head", "correct"] == df.loc["left_branching", "correct"]


# ---- attention probe -----------------------------------------------------------------------
def test_probe_learns_gold_heads_from_a_gold_head_map(ewt_sentences):
    # head 0 points at gold heads; head 1 is a distracting previous-word map
    graphs = []
    for i, s in enumerate(ewt_sentences[:80]):
        gold, prev = gold_map(s), prev_map(s)
        both = gold.with_attentions(torch.cat([gold.attentions, prev.attentions], 1))
        graphs.append(word_graph(both, s, i))
    f, mask = pair_features(graphs[0])
    w = graphs[0].n_words
    assert f.shape == (w, w + 1, 2 * 2 + 1) and not mask[np.arange(w), np.arange(w)].any()
    report = probe_report(graphs, test_fraction=0.25, seed=1)
    assert report["uas_test"] > 0.97
    assert report["uas_test"] > report["right_branching_uas_test"] + 0.5
    probe = AttentionProbe().fit(graphs[:60])
    assert probe.coef_[0] > abs(probe.coef_[1])  # the gold head's α_ij carries the weight


def test_split_by_sentence_is_disjoint_and_refuses_tiny_corpora():
    tr, te = split_by_sentence(10, 0.3, seed=0)
    assert len(te) == 3 and not set(tr) & set(te) and len(tr) + len(te) == 10
    with pytest.raises(ValueError, match="cannot be split"):
        split_by_sentence(1, 0.2)


# ---- the real model on real data, and the CLI ------------------------------------------------
@pytest.mark.slow
def test_minilm_on_ewt_has_syntactic_heads(minilm, ewt_sentences, tmp_path):
    from probe.analyses.structure.syntax_run import run_syntax

    result = run_syntax(minilm, ewt_sentences[:80], tree_limit=15, probe_limit=80)
    best = result.relations.with_all().best(min_count=20).set_index(["relation", "direction"])
    # Clark et al. (2019): det, obj and aux heads far above their best fixed offset
    for rel in ("det", "obj", "aux"):
        row = best.loc[(rel, "dep_to_head")]
        assert row.accuracy > row.baseline_accuracy + 0.1, (rel, row.to_dict())
    trees = result.trees.set_index("source")
    assert trees.loc["head", "uas"].max() > trees.loc["right_branching", "uas"]
    assert result.probe["uas_test"] > result.probe["right_branching_uas_test"] + 0.1
    # every non-root word of every evaluated sentence is counted once per relation table
    evaluated = [s for i, s in enumerate(ewt_sentences[:80]) if i not in set(result.skipped.to_frame()["index"])]
    assert result.relations.counts.sum() == sum(sum(h > 0 for h in s.heads) for s in evaluated)


def test_syntax_cli_writes_every_output(tmp_path, ewt_dev):
    import json

    import pandas as pd
    from click.testing import CliRunner

    from probe.app.cli import command

    syntax_cmd = command("syntax")

    out = tmp_path / "out"
    res = CliRunner().invoke(
        syntax_cmd,
        [
            "--conllu",
            str(ewt_dev),
            "--limit",
            "12",
            "--min-count",
            "3",
            "--tree-limit",
            "3",
            "--probe-limit",
            "12",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    rel = pd.read_csv(out / "relations.csv")
    assert list(rel.columns[:6]) == ["relation", "direction", "layer", "head", "accuracy", "hits"]
    assert len(rel) == rel.relation.nunique() * 2 * 6 * 12
    best = pd.read_csv(out / "best.csv")
    assert {"baseline_offset", "baseline_accuracy", "count", "flagged"} <= set(best.columns)
    assert (out / "trees.csv").exists() and (out / "relations_heatmap.png").stat().st_size > 1000
    assert 0 <= json.loads((out / "probe.json").read_text())["uas_test"] <= 1


def test_syntax_cli_bad_inputs(tmp_path, ewt_dev):
    from click.testing import CliRunner

    from probe.app.cli import command

    syntax_cmd = command("syntax")

    bad = tmp_path / "bad.conllu"
    bad.write_text("# text = a b\n1\ta\t_\tX\t_\t_\t0\troot\t_\t_\n2\tb\t_\tX\t_\t_\t1\n")
    res = CliRunner().invoke(syntax_cmd, ["--conllu", str(bad), "--out", str(tmp_path / "o")])
    assert res.exit_code == 1 and f"{bad}:3" in res.output
    empty = tmp_path / "empty.conllu"
    empty.write_text("\n")
    res = CliRunner().invoke(syntax_cmd, ["--conllu", str(empty), "--out", str(tmp_path / "o")])
    assert res.exit_code == 1 and "no sentence" in res.output
    res = CliRunner().invoke(
        syntax_cmd,
        [
            "--conllu",
            str(ewt_dev),
            "--limit",
            "3",
            "--relations",
            "nmod:tmod",
            "--tree-limit",
            "0",
            "--probe-limit",
            "0",
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert res.exit_code == 1 and "no 'nmod:tmod' relation" in res.output


@pytest.mark.slow
def test_zoo_brackets_has_a_matching_bracket_head(tmp_path):
    """zoo:brackets must locate each closer's opener: the probe, reading the gold arcs
    from CoNLL-U, must find the head trained to point there (the card's supervised head)."""
    from probe.models import load_model, zoo
    from probe.analyses.structure.syntax_run import run_syntax

    try:
        adapter = load_model("zoo:brackets")
    except ValueError as exc:
        pytest.skip(f"zoo:brackets weights not available: {exc}")
    path = tmp_path / "brackets.conllu"
    path.write_text(zoo.task_module("brackets").to_conllu(zoo.eval_examples("brackets")[:150]))
    sentences = read_conllu(path)
    result = run_syntax(adapter, sentences, tree_limit=0, probe_limit=0)
    assert not result.skipped_counts
    best = result.relations.best(relations=["match"]).set_index("direction")
    assert best.loc["dep_to_head", "accuracy"] >= 0.95, best.to_dict()
    supervised = tuple(adapter.card["ground_truth"]["supervised_head"])
    assert (best.loc["dep_to_head", "layer"], best.loc["dep_to_head", "head"]) == supervised
    assert best.loc["dep_to_head", "accuracy"] > best.loc["dep_to_head", "baseline_accuracy"] + 0.3
    assert best.loc["dep_to_head", "count"] == sum(s.deprels.count("match") for s in sentences)


def test_syntax_cli_defaults_to_the_zoo_treebank(tmp_path):
    """With zoo:brackets and no --conllu, the held-out set's gold arcs are written to
    OUT/gold.conllu and probed; other models are told to give --conllu."""
    from click.testing import CliRunner

    from probe.models import zoo
    from probe.app.cli import command

    syntax_cmd = command("syntax")

    out = tmp_path / "o"
    res = CliRunner().invoke(
        syntax_cmd,
        ["--model", "zoo:brackets", "--limit", "40", "--tree-limit", "0", "--probe-limit", "0", "--out", str(out)],
    )
    assert res.exit_code == 0, res.output
    gold = (out / "gold.conllu").read_text()
    assert gold == zoo.task_module("brackets").to_conllu(zoo.eval_examples("brackets"))
    assert "match" in res.output and len(read_conllu(out / "gold.conllu", limit=40)) == 40
    res = CliRunner().invoke(syntax_cmd, ["--model", "zoo:agreement", "--out", str(tmp_path / "p")])
    assert res.exit_code == 1 and "--conllu" in res.output and "zoo:brackets" in res.output


# ---- causal models: relations they cannot attend ----------------------------------------
def causal_gold_map(s, kind="causal"):
    """[BOS] words: each word attends to its gold head where the head lies on its left (all a
    causal model can see), else to [BOS]."""
    n = len(s)
    a = torch.zeros(n + 1, n + 1)
    a[0, 0] = 1
    for i, h in enumerate(s.heads):
        a[i + 1, h if 0 < h <= i else 0] = 1
    return make_maps(a[None, None].clone(), tokens=["[BOS]"] + list(s.words), special=[True] + [False] * n, kind=kind)


def test_a_causal_model_is_not_scored_on_heads_it_cannot_see():
    """CAT's det, nsubj and case dependents have their heads on the right: from the
    dependent (dep → head) a causal model cannot attend them, so they are "not applicable
    (causal)" with no accuracy, never 0%; its obl and punct (heads on the left) score 100%;
    the baselines use only the offsets each direction reaches. The same map read as
    bidirectional counts every instance."""
    from probe.analyses.structure.syntax import NOT_APPLICABLE_CAUSAL

    acc = relation_accuracy([word_graph(causal_gold_map(CAT), CAT)]).with_all()
    assert acc.causal
    df = acc.to_frame().set_index(["relation", "direction"])
    for rel in ("det", "nsubj", "case"):
        row = df.loc[(rel, "dep_to_head")]
        assert row["count"] == 0 and np.isnan(row["accuracy"]) and row["note"] == NOT_APPLICABLE_CAUSAL
        assert df.loc[(rel, "head_to_dep"), "count"] == acc.counts[acc.relations.index(rel)]  # reachable that way
    for rel in ("obl", "punct"):
        row = df.loc[(rel, "dep_to_head")]
        assert row["count"] == 1 and row["accuracy"] == 1.0 and row["note"] == ""
    assert df.loc[("all", "dep_to_head"), "count"] == 2 and df.loc[("all", "dep_to_head"), "accuracy"] == 1.0
    best = acc.best(min_count=1).set_index(["relation", "direction"])
    assert best.loc[("det", "dep_to_head"), "note"] == NOT_APPLICABLE_CAUSAL
    assert np.isnan(best.loc[("det", "dep_to_head"), "accuracy"])
    assert np.isnan(best.loc[("det", "dep_to_head"), "baseline_accuracy"])
    # det's heads are both at +1: the head → dependent baseline (positive offsets) finds them
    assert best.loc[("det", "head_to_dep"), "baseline_offset"] == 1
    assert best.loc[("det", "head_to_dep"), "baseline_accuracy"] == 1.0
    # obl (w5 → w2) is at −3: the dependent → head baseline looks left only
    assert best.loc[("obl", "dep_to_head"), "baseline_offset"] == -3
    assert best.loc[("obl", "dep_to_head"), "baseline_accuracy"] == 1.0
    bidir = relation_accuracy([word_graph(causal_gold_map(CAT, kind="self"), CAT)])
    frame = bidir.to_frame().set_index(["relation", "direction"])
    assert not bidir.causal and frame.loc[("det", "dep_to_head"), "count"] == 2
    assert frame.loc[("det", "dep_to_head"), "accuracy"] == 0.0 and (frame["note"] == "").all()


def test_causal_and_bidirectional_counts_do_not_mix():
    from probe.analyses.structure.syntax import RelationCounter

    c = RelationCounter()
    c.update(word_graph(causal_gold_map(CAT), CAT))
    with pytest.raises(ValueError, match="causal and bidirectional"):
        c.update(word_graph(causal_gold_map(CAT, kind="self"), CAT))


def test_structure_claim_on_a_causal_model_tests_only_what_it_can_attend():
    """The structure claim over 30 copies of CAT on a causal map: det/nsubj/case dep → head
    are not tested (listed as not applicable), obl dep → head is tested over its reachable
    instances against the left offsets; bidirectional, det dep → head is tested (0%)."""
    from probe.analyses.claims.structure import causal_blocked, relation_margins, sentence_counts

    graphs = [word_graph(causal_gold_map(CAT), CAT, i) for i in range(30)]
    sc = sentence_counts(graphs)
    assert sc["causal"]
    blocked = causal_blocked(sc)
    assert set(blocked) == {"det (dep to head)", "nsubj (dep to head)", "case (dep to head)", "obl (head to dep)"}
    m = relation_margins(sc, n_boot=50)
    rels = {(sc["relations"][int(r)], int(d)) for r, d in zip(m["r"], m["d"])}
    assert ("det", 0) not in rels and ("det", 1) in rels and ("obl", 0) in rels
    i = [k for k, (r, d) in enumerate(zip(m["r"], m["d"])) if sc["relations"][int(r)] == "obl" and d == 0][0]
    assert m["accuracy"][i] == 1.0 and m["baseline"][i] == 1.0 and m["count"][i] == 30  # offset −3 reaches it
    bidir = sentence_counts([word_graph(causal_gold_map(CAT, kind="self"), CAT, i) for i in range(30)])
    assert not causal_blocked(bidir)
    mb = relation_margins(bidir, n_boot=50)
    j = [k for k, (r, d) in enumerate(zip(mb["r"], mb["d"])) if bidir["relations"][int(r)] == "det" and d == 0][0]
    assert mb["accuracy"][j] == 0.0 and mb["count"][j] == 60
