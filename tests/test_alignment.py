"""Cross-attention as word alignment (Och & Ney 2003 AER): closed-form link sets, a
hand-built cross map with multi-token words, the zoo translation models against their
gold alignments, the heatmap figure and ``probe alignment``."""

from __future__ import annotations

import pandas as pd
import pytest

from probe.errors import NotApplicable
import torch

from probe.analyses.paper.alignment import (
    aer,
    alignment_error_rates,
    best_head,
    cross_word_attention,
    gold_links,
    predicted_alignment,
    produced_words,
    zoo_cross_maps,
)
from probe.maps import AttentionMaps


def test_aer_closed_form():
    s = {(0, 0), (1, 1)}
    assert aer(s, s) == 0.0
    assert aer({(0, 1), (1, 0)}, s) == 1.0
    assert aer({(0, 0), (1, 0)}, s) == pytest.approx(0.5)  # 1 − 2·1/(2+2)
    assert aer({(0, 0)}, s) == pytest.approx(1 - 2 / 3)  # precision 1, recall 1/2
    # a possible link counts in the numerator only: 1 − (1 + 2)/(2 + 1) = 0
    assert aer({(0, 0), (1, 0)}, {(0, 0)}, possible={(1, 0)}) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="undefined"):
        aer(set(), set())


def _cross(rows, query_tokens=("<s>", "x", "y1", "y2"), query_word_ids=(None, 0, 1, 1), query_words=("x", "y")):
    """Source a b1 b2 </s> (words a, b); target words x, y (y in two tokens) + </s>."""
    a = torch.tensor(rows, dtype=torch.float32)[None, None]
    return AttentionMaps(
        attentions=a,
        tokens=("a", "b1", "b2", "</s>"),
        word_ids=(0, 1, 1, None),
        special_mask=[False, False, False, True],
        words=("a", "b"),
        kind="cross",
        query_tokens=query_tokens,
        query_word_ids=query_word_ids,
        query_special_mask=[True] + [False] * (len(query_tokens) - 1),
        query_words=query_words,
    )


ROWS = [
    [0.7, 0.1, 0.1, 0.1],  # produces x
    [0.1, 0.4, 0.4, 0.1],  # produces y1
    [0.3, 0.2, 0.2, 0.3],  # produces y2
    [0.0, 0.0, 0.0, 1.0],
]  # produces </s>


def test_rows_are_grouped_by_the_word_they_produce():
    m = _cross(ROWS)
    assert produced_words(m) == [0, 1, 1, None]
    w = cross_word_attention(m)
    # x: row 0 → a 0.7, b 0.1 + 0.1; y: mean of rows 1, 2 → a 0.2, b 0.6
    assert w.shape == (1, 1, 2, 2)
    assert w[0, 0].flatten().tolist() == pytest.approx([0.7, 0.2, 0.2, 0.6])
    ws = cross_word_attention(m, special_column=True)
    assert ws[0, 0, :, 2].tolist() == pytest.approx([0.1, 0.2])
    assert ws[0, 0].sum(-1).tolist() == pytest.approx([1.0, 1.0])
    assert predicted_alignment(w)[0, 0].tolist() == [0, 1]
    # no end-of-sequence token among the targets: the last row produces the last word
    m2 = _cross(ROWS[:2], query_tokens=("<s>", "x"), query_word_ids=(None, 0))
    assert produced_words(m2) == [0, 1]
    assert cross_word_attention(m2)[0, 0, 1].tolist() == pytest.approx([0.1, 0.8])


def test_aer_table_on_the_hand_built_map():
    m = _cross(ROWS)
    right = alignment_error_rates([m, m], [[0, 1], [(0, 0), (1, 1)]])
    assert right.loc[0, ["aer", "precision", "recall"]].tolist() == [0.0, 1.0, 1.0]
    assert right.loc[0, "gold_mass"] == pytest.approx((0.7 + 0.6) / 2)
    assert right.loc[0, ["n_pred", "n_gold", "n_correct"]].tolist() == [4, 4, 4]
    wrong = alignment_error_rates([m], [[1, 0]])
    assert wrong.loc[0, "aer"] == 1.0 and wrong.loc[0, "gold_mass"] == pytest.approx(0.2)
    # score target word 1 only; and two gold links for word 0 (one predicted): 1 − 2·1/(2+3)
    assert alignment_error_rates([m], [[1, 1]], keep=[[1]]).loc[0, "aer"] == 0.0
    assert alignment_error_rates([m], [[(0, 0), (0, 1), (1, 1)]]).loc[0, "aer"] == pytest.approx(1 - 4 / 5)
    assert best_head(right)["aer"] == 0.0


def test_alignment_refuses_bad_input():
    m = _cross(ROWS)
    with pytest.raises(ValueError, match="2 entries for 3 target words|gold alignment has"):
        gold_links([0, 1], 3, 2)
    with pytest.raises(ValueError, match="outside 2 target × 2 source"):
        alignment_error_rates([m], [[0, 2]])
    with pytest.raises(ValueError, match="1 maps but 2 gold"):
        alignment_error_rates([m], [[0, 1], [0, 1]])
    with pytest.raises(ValueError, match="no sentence pairs"):
        alignment_error_rates([], [])
    selfmap = AttentionMaps(
        attentions=torch.full((1, 1, 2, 2), 0.5),
        tokens=("a", "b"),
        word_ids=(0, 1),
        special_mask=[False, False],
        words=("a", "b"),
    )
    with pytest.raises(NotApplicable, match="stack='cross'"):
        cross_word_attention(selfmap)
    with pytest.raises(NotApplicable, match="zoo translation models"):
        zoo_cross_maps("induction", [{"text": "a", "target_text": "b"}])


def test_alignment_heatmaps_writes_a_figure(tmp_path):
    import matplotlib.image as mpimg

    from probe.app.report.paper_figures import alignment_heatmaps

    path = alignment_heatmaps(_cross(ROWS), tmp_path / "h.png", gold=[0, 1], aer={(0, 0): 0.0})
    img = mpimg.imread(path)
    assert img.shape[0] > 100 and img.shape[1] > 100
    with pytest.raises(ValueError, match="outside"):
        alignment_heatmaps(_cross(ROWS), tmp_path / "h2.png", gold=[0, 5])


@pytest.fixture(scope="module")
def translate_pairs():
    from probe.models import zoo

    torch.set_num_threads(1)
    ex = zoo.eval_examples("translate", n=100)
    return ex, {t: zoo_cross_maps(t, ex) for t in ("translate", "translate-rnn")}


@pytest.mark.slow
def test_zoo_aer_against_gold_alignments(translate_pairs):
    """The GRU's additive attention aligns every word (AER ≤ 0.01); so does the
    transformer's best cross-attention head (layer 1), the moved sentence-final verb
    included (AER ≤ 0.01 with and without it, most attention on the gold word); the other
    layer is far worse."""
    from probe.models import zoo

    ex, maps = translate_pairs
    verbs = set(zoo.task_module("translate").VERBS)
    gold = [e["alignment"] for e in ex]
    non_verb = [[j for j, s in enumerate(e["alignment"]) if e["words"][s] not in verbs] for e in ex]
    rnn = alignment_error_rates(maps["translate-rnn"], gold)
    assert len(rnn) == 1 and rnn.aer.iloc[0] <= 0.01 and rnn.gold_mass.iloc[0] > 0.9
    tr = alignment_error_rates(maps["translate"], gold)
    best = best_head(tr)
    assert best.layer == 1 and best.aer <= 0.01 and best.gold_mass > 0.9
    assert tr.aer.max() > 0.3
    assert alignment_error_rates(maps["translate"], gold, keep=non_verb).aer.min() <= 0.01


@pytest.mark.slow
def test_zoo_aer_agrees_with_the_token_level_argmax(translate_pairs):
    """Word-level AER = 1 − the share of target words whose token-level row argmax over
    source words is gold (one token per word in the zoo; row j produces word j), as
    tests/test_zoo.py reads it."""
    ex, maps = translate_pairs
    table = alignment_error_rates(maps["translate"], [e["alignment"] for e in ex]).set_index(["layer", "head"])
    for (layer, h), row in table.iterrows():
        hits = total = 0
        for m, e in zip(maps["translate"], ex):
            for j, src in enumerate(e["alignment"]):
                hits += int(m.attentions[layer, h, j, : len(e["words"])].argmax().item() == src)
                total += 1
        assert row.aer == pytest.approx(1 - hits / total, abs=1e-12)


@pytest.mark.slow
def test_alignment_cli(tmp_path):
    from click.testing import CliRunner

    from probe.app.cli import command

    alignment_cmd = command("alignment")

    res = CliRunner().invoke(alignment_cmd, ["--limit", "20", "--example", "3", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    t = pd.read_csv(tmp_path / "aer.csv")
    assert len(t) == 6 and set(t.model) == {"zoo:translate", "zoo:translate-rnn"}
    assert set(t.subset) == {"all", "non-verb"} and (t.n_pred == t.n_gold).all()
    assert t[(t.model == "zoo:translate-rnn") & (t.subset == "all")].aer.iloc[0] <= 0.05
    for task in ("translate", "translate-rnn"):
        assert (tmp_path / f"alignment_{task}.png").stat().st_size > 5_000
    bad = CliRunner().invoke(alignment_cmd, ["--limit", "5", "--example", "5", "--out", str(tmp_path / "b")])
    assert bad.exit_code == 1 and "--example 5 is not among the first 5" in bad.output
