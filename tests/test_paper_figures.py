"""Heads behind the appendix figures of Vaswani et al. (2017): ranking on hand-built maps
with known answers, on the bundled model (MiniLM) for the two appendix sentences, the
paper-style figure and ``probe paper-figures``."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from probe.errors import NotApplicable
import torch

from probe.analyses.paper.paper_heads import SENTENCES, find_word, paper_rankings, rank_heads, top_heads
from probe.maps import AttentionMaps

from conftest import LAW, MAKING

# [CLS] the la ##w its [SEP]: words the / Law (two tokens) / its
TOKENS = ("[CLS]", "the", "la", "##w", "its", "[SEP]")
WORD_IDS = (None, 0, 1, 1, 2, None)
WORDS = ("the", "Law", "its")


def _maps():
    """2 layers × 2 heads; every row uniform except the row of "its" (token 4):
    (0,0): 0.3 + 0.3 on la/##w, 0.4 on [CLS]  → Law 0.6, argmax Law
    (0,1): 0.9 on [CLS], 0.1 on the           → Law 0.0, argmax the (special excluded)
    (1,0): 0.7 on its, 0.2 on the, 0.1 on la  → Law 0.1, argmax the (itself excluded)
    (1,1): 0.5 on [SEP], 0.25 + 0.25 on Law   → Law 0.5, argmax Law"""
    a = torch.full((2, 2, 6, 6), 1 / 6)
    rows = {
        (0, 0): [0.4, 0, 0.3, 0.3, 0, 0],
        (0, 1): [0.9, 0.1, 0, 0, 0, 0],
        (1, 0): [0, 0.2, 0.1, 0, 0.7, 0],
        (1, 1): [0, 0, 0.25, 0.25, 0, 0.5],
    }
    for (layer, h), row in rows.items():
        a[layer, h, 4] = torch.tensor(row)
    return AttentionMaps(
        attentions=a,
        tokens=TOKENS,
        word_ids=WORD_IDS,
        special_mask=[True, False, False, False, False, True],
        words=WORDS,
    )


def test_rank_heads_on_known_rows():
    r = rank_heads(_maps(), "its", "Law")
    assert list(zip(r.layer, r["head"])) == [(0, 0), (1, 1), (1, 0), (0, 1)]
    assert r.weight.tolist() == pytest.approx([0.6, 0.5, 0.1, 0.0])
    assert r.is_argmax.tolist() == [True, True, False, False]
    assert r.argmax_word.tolist() == ["Law", "Law", "the", "the"]
    assert r.argmax_weight.tolist() == pytest.approx([0.6, 0.5, 0.2, 0.1])
    assert r["rank"].tolist() == [1, 2, 3, 4]
    assert r.uniform.tolist() == pytest.approx([0.5] * 4)  # one target among two candidate words
    assert top_heads(r, 2) == [(0, 0), (1, 1)]
    # several targets: weights add up; word lookup is case-insensitive as a fallback
    r2 = rank_heads(_maps().word_level(), "ITS", ["law", "the"])
    assert r2.set_index(["layer", "head"]).loc[(1, 0), "weight"] == pytest.approx(0.3)
    assert r2.is_argmax.all()


def test_rank_heads_refuses_bad_input():
    with pytest.raises(ValueError, match="not a word of this sentence; its words are: the Law its"):
        rank_heads(_maps(), "it", "Law")
    with pytest.raises(ValueError, match="cannot also be a target"):
        rank_heads(_maps(), "its", ["Law", "its"])
    with pytest.raises(ValueError, match="not a word"):
        rank_heads(_maps(), 0, "Law")  # unit 0 is [CLS]
    with pytest.raises(ValueError, match="occurs 2 times"):
        find_word(("a", "b", "a"), [False] * 3, "a")
    with pytest.raises(ValueError, match="k must be"):
        top_heads(rank_heads(_maps(), "its", "Law"), 0)
    cross = AttentionMaps(
        attentions=torch.full((1, 1, 2, 2), 0.5),
        tokens=("a", "</s>"),
        word_ids=(0, None),
        special_mask=[False, True],
        words=("a",),
        kind="cross",
        query_tokens=("<s>", "x"),
        query_word_ids=(None, 0),
        query_words=("x",),
    )
    with pytest.raises(NotApplicable, match="probe.analyses.paper.alignment"):
        rank_heads(cross, "a", "x")


def test_paper_figure_draws_one_colour_per_head(tmp_path):
    import matplotlib.image as mpimg

    from probe.app.report.paper_figures import COLORS, paper_figure

    path = paper_figure(_maps(), "its", [(0, 0), (1, 1)], tmp_path / "f.png", targets=["Law"])
    img = (mpimg.imread(path)[..., :3] * 255).astype(int)

    def has(color):
        rgb = np.array([int(color[i : i + 2], 16) for i in (1, 3, 5)])
        return bool((np.abs(img - rgb).max(-1) <= 6).any())

    assert has(COLORS[0]) and has(COLORS[1])
    assert not has(COLORS[2])  # a third head was not drawn
    with pytest.raises(ValueError, match=r"head \(2, 0\) is not in these maps"):
        paper_figure(_maps(), "its", [(2, 0)], tmp_path / "g.png")
    with pytest.raises(ValueError, match="1..8"):
        paper_figure(_maps(), "its", [], tmp_path / "g.png")


@pytest.fixture(scope="module")
def minilm_rankings(minilm):
    torch.set_num_threads(1)
    return paper_rankings(minilm)


@pytest.mark.slow
def test_minilm_has_heads_like_the_papers(minilm_rankings):
    """On the bundled model, for both appendix sentences, some head's argmax (words only,
    the query word excluded) is a target, and the best head puts far more than the
    uniform share on the targets. Heads are scanned, not hard-coded."""
    assert set(minilm_rankings) == {"its", "making"}
    for name, (_maps, r) in minilm_rankings.items():
        assert len(r) == 6 * 12
        assert r.is_argmax.sum() >= 1, name
        best = r.iloc[0]
        assert best.is_argmax, name
        assert best.weight > 0.5 and best.weight > 5 * best.uniform, name


@pytest.mark.slow
def test_minilm_ranking_weight_matches_token_level_rows(minilm_rankings):
    """Independent check of the word-level weight: the best head's token-level row of the
    query word, summed over the target words' token columns."""
    for name, (maps, r) in minilm_rankings.items():
        s = SENTENCES[name]
        assert maps.text == {"its": LAW, "making": MAKING}[name]
        words = list(maps.words)
        q_tok = [k for k, w in enumerate(maps.word_ids) if w is not None and words[w] == s.query]
        t_tok = [k for k, w in enumerate(maps.word_ids) if w is not None and words[w] in s.targets]
        best = r.iloc[0]
        row = maps.head(int(best.layer), int(best["head"]))[q_tok].mean(0)
        assert float(row[t_tok].sum()) == pytest.approx(best.weight, abs=1e-5)


@pytest.mark.slow
def test_paper_figures_cli(tmp_path, minilm_rankings):
    from click.testing import CliRunner

    from probe.app.cli import command

    paper_figures_cmd = command("paper-figures")

    res = CliRunner().invoke(paper_figures_cmd, ["--out", str(tmp_path), "--top", "2"])
    assert res.exit_code == 0, res.output
    for name, (_, r) in minilm_rankings.items():
        csv = pd.read_csv(tmp_path / f"heads_{name}.csv")
        assert list(zip(csv.layer, csv["head"]))[:5] == list(zip(r.layer, r["head"]))[:5]
        assert csv.weight.iloc[0] == pytest.approx(r.weight.iloc[0], abs=1e-6)
        assert (tmp_path / f"paper_{name}.png").stat().st_size > 10_000
        assert f"best L{r.layer.iloc[0]}H{r['head'].iloc[0]}" in res.output
    bad = CliRunner().invoke(paper_figures_cmd, ["--out", str(tmp_path), "--top", "0"])
    assert bad.exit_code == 2 and "--top" in bad.output
