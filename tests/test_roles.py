"""Head roles (issue 4): features, rules, clustering — closed-form maps, the zoo, MiniLM on EWT."""

from __future__ import annotations

import logging
import math

import numpy as np
import pandas as pd
import pytest

from probe.errors import NotApplicable
import torch
from conftest import all_on, identity, make_maps, previous_token, uniform

from probe.analyses.patterns.head_clusters import cluster_heads, embed_heads, head_clusters, head_divergence
from probe.analyses.patterns.role_features import head_features, is_punctuation, layer_summary, token_frequencies
from probe.analyses.patterns.roles import (
    ROLES,
    RoleClassifier,
    RoleThresholds,
    assign_roles,
    base_role,
    head_roles,
    role_counts,
)

N = 10
BERTISH = dict(
    tokens=["[CLS]"] + [f"w{i}" for i in range(1, N - 2)] + [".", "[SEP]"], special=[True] + [False] * (N - 2) + [True]
)


def next_token(n, layers=1, heads=1):
    a = torch.zeros(n, n)
    a[n - 1, n - 1] = 1
    for i in range(n - 1):
        a[i, i + 1] = 1
    return a.expand(layers, heads, n, n).clone()


def four_heads(n=N):
    """heads: previous-token, uniform, identity, all-on-[CLS], next-token."""
    return torch.cat([previous_token(n), uniform(n), identity(n), all_on(n, 0), next_token(n)], 1)


def role_of(roles, layer, head):
    row = roles[(roles["layer"] == layer) & (roles["head"] == head)]
    assert len(row) == 1
    return row.iloc[0]


# ---- closed-form maps --------------------------------------------------------------------
def test_closed_form_roles():
    maps = [make_maps(four_heads(), **BERTISH) for _ in range(3)]
    roles = head_roles(maps, min_examples=1)
    assert list(roles.columns[:6]) == ["layer", "head", "role", "confidence", "decided_by", "also"]
    prev, broad, self_, cls, nxt = (role_of(roles, 0, h) for h in range(5))
    assert prev.role == "previous-token" and prev.confidence >= 0.95
    assert broad.role == "broad" and broad.confidence == pytest.approx(1.0)
    assert self_.role == "self" and self_.confidence == pytest.approx(1.0)
    assert cls.role == "special-token" and cls.confidence == pytest.approx(1.0)
    assert nxt.role == "next-token" and nxt.confidence >= 0.95
    assert "argmax_prev" in prev.decided_by and "to_special" in cls.decided_by
    assert set(roles.role) <= set(ROLES)


def test_closed_form_feature_values():
    feats = head_features([make_maps(four_heads(), **BERTISH)])
    u = feats.iloc[1]  # uniform over n = 10 keys, 8 non-special query rows
    assert u.n_rows == 8 and u.n_examples == 1
    assert u.entropy == pytest.approx(math.log(N), abs=1e-5)
    assert u.entropy_ratio == pytest.approx(1.0, abs=1e-5)
    assert u.max_attention == pytest.approx(1 / N)
    assert u.to_cls == pytest.approx(1 / N) and u.to_sep == pytest.approx(1 / N)
    assert u.to_special == pytest.approx(2 / N) and u.to_punct == pytest.approx(1 / N)
    for name in ("prev2", "prev", "self", "next", "next2"):
        assert u[name] == pytest.approx(1 / N)
    p = feats.iloc[0]  # previous-token: every non-special row i puts 1 on i-1
    assert p.prev == pytest.approx(1.0) and p.self == 0 and p.argmax_prev == 1.0
    assert p.positional_share == 1.0 and p.positional_offset == -1
    assert p.to_cls == pytest.approx(1 / 8)  # only row 1 attends [CLS]
    assert p.to_punct == 0  # only [SEP] (a special row, not counted) attends '.'
    c = feats.iloc[3]
    assert c.to_cls == 1.0 and c.to_sep == 0 and c.entropy == pytest.approx(0.0, abs=1e-6)
    # an encoder has no duplicate-token / induction scores
    assert feats["duplicate"].isna().all() and feats["induction"].isna().all()


def test_word_level_features_follow_clark_aggregation():
    # words: w0 = (t0, t1), w1 = t2; a token previous-token head is "self" for w0 and "prev" for w1
    m = make_maps(
        previous_token(3), tokens=["a", "##b", "c"], special=[False] * 3, word_ids=[0, 0, 1], words=["ab", "c"]
    )
    word = head_features([m], level="word").iloc[0]
    assert word.prev == pytest.approx(1.0)  # one row (w1) has a previous word
    assert word.self == pytest.approx(0.5)  # w0 → itself (1), w1 → itself (0)
    tok = head_features([m], level="token").iloc[0]
    assert tok.prev == pytest.approx(1.0) and tok.self == pytest.approx(1 / 3)
    # level="word": the word features decide, the token ones ride along with a prefix
    clf = RoleClassifier(level="word", min_examples=1).fit([m])
    assert clf.features_.self.iloc[0] == pytest.approx(0.5)
    assert clf.features_.token_self.iloc[0] == pytest.approx(1 / 3)


def test_causal_induction_and_duplicate_closed_form():
    # <s> a b c d a b c d: second copy positions 5..8 repeat 1..4
    tokens = ["<s>", "a", "b", "c", "d", "a", "b", "c", "d"]
    special = [True] + [False] * 8
    n, L = len(tokens), 4
    ind = torch.zeros(n, n)
    dup = torch.zeros(n, n)
    for i in range(n):
        if i > L:  # second copy: induction → after previous occurrence, duplicate → the occurrence
            ind[i, i - L + 1] = 1
            dup[i, i - L] = 1
        else:
            ind[i, 0] = 1
            dup[i, 0] = 1
    a = torch.stack([ind, dup, uniform(n, causal=True)[0, 0]])[None]
    m = make_maps(a, tokens=tokens, special=special, kind="causal")
    feats = head_features([m])
    assert feats.induction.tolist()[:2] == pytest.approx([1.0, 0.0])
    assert feats.duplicate.tolist()[:2] == pytest.approx([0.0, 1.0])
    u = feats.iloc[2]
    assert u.entropy_ratio == pytest.approx(1.0, abs=1e-5)
    assert math.isnan(u.next) and math.isnan(u.argmax_next)  # no future in causal attention
    roles = head_roles([m], min_examples=1)
    assert roles.role.tolist() == ["induction", "duplicate-token", "broad"]
    # the induction head of this sequence also puts its first rows on <s>: evidence listed
    assert "special-token" in role_of(roles, 0, 0).also


def test_examples_shorter_than_the_offsets_count_no_offset_rows():
    """A one-token example (a decoder without BOS reading "Thanks") has no row at offset ±2:
    the features skip those rows instead of failing (SmolLM2's report on EWT dev failed its
    roles section with torch.arange's "upper bound and lower bound inconsistent")."""
    long = make_maps(previous_token(6), kind="causal")
    one, two = make_maps(all_on(1, 0), kind="causal"), make_maps(previous_token(2), kind="causal")
    feats = head_features([long, one, two])
    alone = head_features([long])
    # the short examples add rows at offsets −1/0 only: −2 keeps the long example's 4 rows
    assert feats.prev2.iloc[0] == pytest.approx(alone.prev2.iloc[0])
    assert feats.prev.iloc[0] == pytest.approx(1.0)  # every row with a previous token attends to it


def test_no_special_tokens_drops_the_special_role():
    m = make_maps(torch.cat([all_on(6, 0), previous_token(6)], 1), kind="causal")
    roles = head_roles([m], min_examples=1)
    assert roles.to_special.isna().all() and roles.to_cls.isna().all()
    assert "special-token" not in set(roles.role)
    assert role_of(roles, 0, 1).role == "previous-token"
    assert role_of(roles, 0, 0).role != "special-token"


def test_rare_word_with_given_and_corpus_frequencies():
    sents = [["the", "cat", "zebra", "the"], ["the", "dog", "sat", "okapi"]]
    maps = []
    for words in sents:
        rare = [i for i, w in enumerate(words) if w in ("zebra", "okapi")][0]
        a = torch.stack([all_on(4, rare)[0, 0], uniform(4)[0, 0]])[None]
        maps.append(make_maps(a, tokens=words))
    freqs = {"the": 1000, "cat": 50, "dog": 60, "sat": 70, "zebra": 2, "okapi": 1}
    feats = head_features(maps, frequencies=freqs)
    assert feats.argmax_rare.iloc[0] == 1.0 and feats.to_rare.iloc[0] == pytest.approx(1.0)
    assert feats.to_rare.iloc[1] == pytest.approx(0.25)
    assert feats.rare_chance.iloc[0] == pytest.approx(0.25)
    roles = head_roles(maps, frequencies=freqs, min_examples=1)
    assert roles.role.tolist() == ["rare-word", "broad"]
    # corpus frequencies: every word but "the" is a hapax, so the "rarest" set is large
    own = head_features(maps)
    assert own.rare_chance.iloc[0] == pytest.approx(0.5 * (2 / 4 + 3 / 4))
    assert token_frequencies(maps)["the"] == 3


def test_punctuation_head():
    tokens = ["[CLS]", "yes", ",", "no", ".", "[SEP]"]
    a = all_on(6, 2)
    a[0, 0, 4:, :] = 0
    a[0, 0, 4:, 4] = 1
    m = make_maps(a, tokens=tokens, special=[True, False, False, False, False, True])
    r = head_roles([m], min_examples=1).iloc[0]
    assert r.role == "punctuation" and r.to_punct == pytest.approx(1.0)
    assert is_punctuation("Ġ,") and is_punctuation("##.") and not is_punctuation("a.b")


def test_syntax_evidence_labels_heads():
    feats = head_features([make_maps(four_heads(), **BERTISH)])
    syntax = pd.DataFrame(
        [
            dict(
                relation="nsubj",
                direction="dep->head",
                layer=0,
                head=1,
                accuracy=58.5,
                baseline_offset=1,
                baseline_accuracy=45.5,
                count=500,
            ),  # +13 points: syntactic
            dict(
                relation="amod",
                direction="dep->head",
                layer=0,
                head=2,
                accuracy=75.6,
                baseline_offset=1,
                baseline_accuracy=68.3,
                count=500,
            ),  # +7.3: not enough
            dict(
                relation="det",
                direction="dep->head",
                layer=0,
                head=3,
                accuracy=94.3,
                baseline_offset=1,
                baseline_accuracy=51.7,
                count=20,
            ),  # too few instances
            dict(
                relation="coref",
                direction="mention->antecedent",
                layer=0,
                head=4,
                accuracy=65.0,
                baseline_offset=-1,
                baseline_accuracy=27.0,
                count=300,
            ),
        ]
    )
    roles = assign_roles(feats, syntax=syntax)
    assert role_of(roles, 0, 1).role == "syntactic (nsubj)"
    assert role_of(roles, 0, 1).confidence == pytest.approx(0.585)
    assert base_role(role_of(roles, 0, 1).role) == "syntactic"
    assert role_of(roles, 0, 2).role == "self"
    assert role_of(roles, 0, 3).role == "special-token"
    assert role_of(roles, 0, 4).role == "coreference"
    # accuracies as fractions are read the same
    frac = syntax.assign(accuracy=syntax.accuracy / 100, baseline_accuracy=syntax.baseline_accuracy / 100)
    assert assign_roles(feats, syntax=frac).role.tolist() == roles.role.tolist()
    loose = assign_roles(feats, RoleThresholds(syntactic_margin=5), syntax=syntax)
    assert role_of(loose, 0, 2).role == "syntactic (amod)"
    # probe.analyses.structure.coref's best() table: the stronger baseline must be beaten by 10 points
    coref = pd.DataFrame(
        [
            dict(
                setting="same_sentence",
                layer=0,
                head=0,
                accuracy=0.65,
                nearest_mention=0.27,
                nearest_agreeing=0.52,
                count=400,
            ),
            dict(
                setting="earlier_sentence",
                layer=0,
                head=1,
                accuracy=0.60,
                nearest_mention=0.27,
                nearest_agreeing=0.52,
                count=400,
            ),
        ]
    )
    with_coref = assign_roles(feats, coreference=coref)
    assert role_of(with_coref, 0, 0).role == "coreference" and "nearest" not in role_of(with_coref, 0, 0).also
    assert role_of(with_coref, 0, 1).role == "broad"  # 60 vs 52: +8 points only
    counts = role_counts(roles)
    assert counts.heads.sum() == 5 and dict(zip(counts.role, counts.heads))["syntactic"] == 1


def test_bad_input(caplog):
    m = make_maps(four_heads(), **BERTISH)
    with caplog.at_level(logging.WARNING, logger="probe.analyses.patterns.roles"):
        clf = RoleClassifier(min_examples=10).fit([m, m])
    assert clf.n_examples_ == 2
    assert "2 example(s), fewer than 10" in caplog.text
    with pytest.raises(ValueError, match="unknown threshold"):
        RoleClassifier(positionl=0.8)
    with pytest.raises(ValueError, match="between 0 and 1"):
        RoleClassifier(positional=1.5)
    with pytest.raises(ValueError, match="level"):
        RoleClassifier(level="sentence")
    with pytest.raises(ValueError, match="no examples"):
        head_roles([])
    from probe.maps import AttentionMaps

    cross = AttentionMaps(
        attentions=torch.full((1, 1, 2, 3), 1 / 3),
        tokens=["a", "b", "c"],
        word_ids=[0, 1, 2],
        special_mask=torch.zeros(3, dtype=torch.bool),
        kind="cross",
        query_tokens=["x", "y"],
    )
    with pytest.raises(NotApplicable, match="cross-attention"):
        head_roles([cross])
    other = make_maps(four_heads()[:, :2], **BERTISH)
    with pytest.raises(ValueError, match="one model's capture"):
        head_roles([m, other])
    with pytest.raises(ValueError, match="best.csv"):
        assign_roles(head_features([m]), syntax=pd.DataFrame({"layer": [0]}))


def test_store_streams_the_same_answer(tmp_path):
    from probe.store.directory import Store, write_store

    maps = [
        make_maps(
            four_heads(n),
            tokens=["[CLS]"] + [f"w{i % 3}" for i in range(1, n - 1)] + ["[SEP]"],
            special=[True] + [False] * (n - 2) + [True],
        )
        for n in (6, 8, 9)
    ]
    store = write_store(tmp_path / "s", enumerate(maps), manifest={"model": "hand"}, shard_size=2)
    assert isinstance(store, Store)
    a, b = head_roles(store, min_examples=1), head_roles(maps, min_examples=1)
    pd.testing.assert_frame_equal(a, b)
    assert token_frequencies(store) == token_frequencies(maps)


# ---- clustering ------------------------------------------------------------------------
def test_js_divergence_closed_form_and_clusters():
    n = 8
    # heads: prev, prev (copy), identity, identity (copy), uniform
    a = torch.cat([previous_token(n), previous_token(n), identity(n), identity(n), uniform(n)], 1)
    m = make_maps(a)
    d = head_divergence([m, m]).matrix
    assert d.shape == (5, 5) and np.allclose(d, d.T) and np.allclose(np.diag(d), 0)
    assert d[0, 1] == pytest.approx(0.0, abs=1e-6) and d[2, 3] == pytest.approx(0.0, abs=1e-6)
    # rows 1..7: disjoint one-hots → 1 bit; row 0: both attend key 0 → 0
    assert d[0, 2] == pytest.approx(7 / 8, abs=1e-5)
    # one-hot vs uniform over n: JS = 1 − (n+1)/(2n)·log2(n+1) + log2(n)/2 ... computed directly:
    p, q = np.eye(n)[0], np.full(n, 1 / n)
    mm = (p + q) / 2
    kl = lambda x, y: np.sum(np.where(x > 0, x * np.log2(np.where(x > 0, x, 1) / y), 0))  # noqa: E731
    assert d[2, 4] == pytest.approx(0.5 * kl(p, mm) + 0.5 * kl(q, mm), abs=1e-5)
    hc = head_clusters([m], n_clusters=3)
    labels = hc.cluster
    assert labels[0] == labels[1] and labels[2] == labels[3] and len(set(labels)) == 3
    assert np.allclose(hc.xy[0], hc.xy[1], atol=1e-3) and np.allclose(hc.xy[2], hc.xy[3], atol=1e-3)
    frame = hc.to_frame()
    assert list(frame.columns) == ["layer", "head", "mds_x", "mds_y", "cluster"] and len(frame) == 5
    with pytest.raises(ValueError, match="symmetric"):
        cluster_heads(np.array([[0, 1], [2, 0]]))
    assert embed_heads(np.zeros((2, 2))).shape == (2, 2)


# ---- the zoo ---------------------------------------------------------------------------
def _zoo(task):
    from probe.models.zoo import WEIGHTS_DIR

    if not (WEIGHTS_DIR / task).is_dir():
        pytest.skip(f"zoo:{task} weights are not committed yet")
    from probe.models import load_model

    return load_model(f"zoo:{task}")


@pytest.mark.slow
def test_zoo_prev_token_head_is_found():
    from probe.models.zoo import eval_examples
    from probe.runs.capture import capture

    adapter = _zoo("prev-token")
    texts = [e["text"] for e in eval_examples("prev-token", n=120)]
    roles = head_roles(capture(adapter, texts, batch_size=64), min_examples=100)
    # the head that moves word i-1 to i: the one with most attention on the previous word
    doer = roles.loc[roles["prev"].idxmax()]
    assert doer.prev > 0.9
    assert doer.role == "previous-token" and doer.confidence >= 0.95


def test_zoo_constructed_heads_are_named():
    """zoo:constructed has hand-set weights: head 0.0 previous-token, head 0.1 [CLS]."""
    from probe.models.zoo import eval_examples
    from probe.runs.capture import capture

    adapter = _zoo("constructed")
    texts = [e["text"] for e in eval_examples("constructed", n=40)]
    roles = head_roles(capture(adapter, texts, batch_size=40), min_examples=10)
    assert role_of(roles, 0, 0).role == "previous-token" and role_of(roles, 0, 0).confidence >= 0.95
    assert role_of(roles, 0, 1).role == "special-token" and role_of(roles, 0, 1).to_cls >= 0.95


@pytest.mark.slow
def test_zoo_induction_and_previous_token_heads_are_found():
    from probe.models.zoo import eval_examples
    from probe.runs.capture import capture

    adapter = _zoo("induction")
    texts = [e["text"] for e in eval_examples("induction", n=120)]
    roles = head_roles(capture(adapter, texts, batch_size=64), min_examples=100)
    ind = roles[roles.role == "induction"]
    prev = roles[roles.role == "previous-token"]
    assert len(ind) >= 1 and len(prev) >= 1
    # the circuit of Olsson et al.: a previous-token head feeds a later induction head
    assert prev.layer.min() < ind.layer.max()


# ---- the bundled model on real data --------------------------------------------------------
@pytest.mark.slow
def test_minilm_on_ewt(minilm, ewt_dev):
    from probe.runs.capture import capture
    from probe.inputs.readers import read_conllu

    sents = read_conllu(ewt_dev, limit=40)
    maps = capture(minilm, [s.text for s in sents], word_spans=[s.spans for s in sents], batch_size=20)
    clf = RoleClassifier(min_examples=30).fit(maps)
    roles, feats = clf.roles_, clf.features_
    assert len(roles) == minilm.n_layers * minilm.n_heads and clf.n_examples_ == 40
    # features are shares of attention
    for col in ("to_cls", "to_sep", "to_punct", "prev", "word_prev", "entropy_ratio"):
        assert feats[col].between(0, 1).all()
    summary = layer_summary(feats)
    assert list(summary.layer) == list(range(minilm.n_layers))
    # every head gets exactly one known role; heads sharing the one-on-the-left pattern exist
    assert set(roles.role.map(base_role)) <= set(ROLES)
    prev = roles[roles.role == "previous-token"]
    assert len(prev) >= 1 and (prev.argmax_prev >= 0.9).all()
    assert role_counts(roles).heads.sum() == len(roles)
    # special-token sinks: middle layers send more to [CLS]/[SEP] than the first layer
    by_layer = feats.groupby("layer").to_special.mean()
    assert by_layer.iloc[1:-1].mean() > by_layer.iloc[0]


# ---- CLI and figures ---------------------------------------------------------------------
def test_cli_writes_tables_and_figures_from_a_store(tmp_path):
    from click.testing import CliRunner

    from probe.app.cli import command

    roles_cmd = command("roles")
    from probe.store.directory import write_store

    maps = [
        make_maps(
            four_heads(n),
            tokens=["[CLS]"] + [f"w{i}" for i in range(1, n - 1)] + ["[SEP]"],
            special=[True] + [False] * (n - 2) + [True],
        )
        for n in (7, 9, 10)
    ]
    write_store(tmp_path / "s", enumerate(maps), manifest={"model": "hand"})
    out = tmp_path / "res"
    r = CliRunner().invoke(roles_cmd, ["--store", str(tmp_path / "s"), "--out", str(out), "--clusters", "3"])
    assert r.exit_code == 0, r.output
    assert "from 3 examples" in r.output and "previous-token 1" in r.output
    table = pd.read_csv(out / "roles.csv")
    assert list(table.columns[:4]) == ["layer", "head", "role", "confidence"]
    assert {"mds_x", "mds_y", "cluster", "word_prev", "to_sep"} <= set(table.columns)
    assert table.role.tolist() == ["previous-token", "broad", "self", "special-token", "next-token"]
    for name in ("layers.csv", "counts.csv", "distances.csv", "roles.json", "roles.png", "roles.mds.png"):
        assert (out / name).stat().st_size > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["res", "s"]  # nothing beside --out
    layers = pd.read_csv(out / "layers.csv")
    assert list(layers.columns) == ["layer", "to_cls", "to_sep", "to_punct"]
    bad = CliRunner().invoke(
        roles_cmd, ["--store", str(tmp_path / "s"), "--out", str(out), "--force", "--threshold", "positionl=0.5"]
    )
    assert bad.exit_code != 0 and "unknown threshold" in bad.output
    missing = CliRunner().invoke(roles_cmd, ["--store", str(tmp_path / "nope"), "--out", str(out), "--force"])
    assert missing.exit_code == 1 and "is not a store" in missing.output
