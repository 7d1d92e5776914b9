"""The report's look and views without a browser: rounding, the one palette and colour
map, ranked tables, the trivial-token split of score figures, evidence in sentences, and
the notebook entry point ``probe.show``."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import make_maps, previous_token, uniform


def test_numbers_are_rounded_to_their_uncertainty():
    from probe.app.report.style import number

    assert number(0.19699999690055847, (0.12, 0.27)) == "0.20 [0.12, 0.27]"
    assert number(0.0012116, (0.00092, 0.00156), signed=True) == "+0.0012 [+0.0009, +0.0016]"
    assert number(0.51, (0.40, 0.62), percent=True) == "51% [40%, 62%]"
    assert number(0.19699999690055847) == "0.197" and number(0.00999, digits=2) == "0.010"
    assert number(-1.74e-08) == "-1.74e-8" and number(float("nan")) == "—" and number(None) == "—"
    assert number(3) == "3" and number(True) == "yes"
    assert number(1.0, percent=True, digits=2) == "100%" and number(2.4e-7, percent=True) == "<0.1%"
    assert number(12345.6) == "12346" and number(2e-5) == "2.00e-5"


def test_one_palette_and_one_colour_map_everywhere():
    from probe.app.report import heatmaps, pages, roles_figures, style

    assert roles_figures.ROLE_COLORS is style.ROLE_COLOURS
    assert pages.ROLE_COLOURS is style.ROLE_COLOURS
    assert heatmaps.CMAP == style.ATTENTION_CMAP
    stops = style.cmap_stops(8)
    assert len(stops) == 8 and stops[0] != stops[-1] and all(s.startswith("#") and len(s) == 7 for s in stops)


def test_trivial_tokens_are_split_from_the_words():
    from probe.app.report.score_figures import split_top

    tokens = ["[CLS]", "the", "law", ",", "is", "[SEP]"]
    row = np.array([0.6, 0.05, 0.1, 0.08, 0.02, 0.15])
    words, trivial = split_top(tokens, row, position=0, k=2)
    assert [t for _, t, _ in words] == ["law", "the"]
    assert [t for _, t, _ in trivial] == ["[CLS]", "[SEP]", ","]


def test_score_figures_bars_and_heatmap(tmp_path):
    from probe.analyses.common.token_scores import TokenScores
    from probe.app.report.score_figures import token_scores_heatmap

    tokens = ["[CLS]", "the", "law", ",", "is", "[SEP]"]
    one = TokenScores(tokens, (0,), np.array([[0.6, 0.05, 0.1, 0.08, 0.02, 0.15]]), "rollout")
    every = TokenScores(tokens, tuple(range(6)), np.full((6, 6), 1 / 6), "flow")
    assert token_scores_heatmap(one, tmp_path / "a.png").stat().st_size > 5_000
    assert token_scores_heatmap(every, tmp_path / "b.png").stat().st_size > 5_000


def test_ranked_tables_put_the_strongest_trusted_rows_first():
    from probe.analyses.claims import thresholds as T
    from probe.app.report.tables import ranked, ranked_table

    best = pd.DataFrame(
        {
            "relation": ["expl", "det", "amod", "obj"],
            "direction": ["dep_to_head"] * 4,
            "layer": [0, 1, 2, 3],
            "head": [0, 1, 2, 3],
            "accuracy": [1.0, 0.9, 0.6, 0.7],
            "baseline_accuracy": [0.0, 0.4, 0.5, 0.1],
            "baseline_offset": [1, 1, -1, 2],
            "count": [2, 40, 30, 12],
        }
    )
    # the section's own minimum (5) gives way to the structure claim's (20): obj (12) is greyed too
    t = ranked("syntax", "best", best, min_count=5)
    assert T.STRUCTURE_MIN_COUNT == 20
    assert list(t["relation"]) == ["det", "amod", "expl", "obj"]  # margin 0.5, 0.1; under 20: 1.0, 0.6
    html = ranked_table("syntax", "best", best, min_count=5)
    rows = re.findall(r"<tr( class=\"few\"[^>]*)?><td>(\w+)</td>", html)
    assert [(r, bool(few)) for few, r in rows] == [("det", False), ("amod", False), ("expl", True), ("obj", True)]
    assert "fewer than 20 instances (the structure claim's minimum)" in html and 'class="scroll"' in html
    # the per-head × relation table is sorted by margin over the relation's best offset, not by accuracy
    rel = best.drop(columns="baseline_offset").assign(direction="head_to_dep")
    assert list(ranked("syntax", "relations", rel)["relation"]) == ["det", "amod", "expl", "obj"]
    # the structure claim's table (margins already computed): same order, same minimum
    claim_t = best.assign(margin=best["accuracy"] - best["baseline_accuracy"]).rename(
        columns={"baseline_accuracy": "baseline"}
    )
    assert list(ranked("claims", "structure", claim_t)["relation"]) == ["det", "amod", "expl", "obj"]
    assert ranked_table("claims", "structure", claim_t).count('class="few"') == 2
    abl = pd.DataFrame(
        {
            "layer": [0, 0, 1],
            "head": [0, 1, 0],
            "metric": "loss",
            "delta": [0.01, -0.3, 0.1],
            "ci_low": [0.0, -0.4, 0.05],
            "ci_high": [0.02, -0.2, 0.15],
        }
    )
    assert list(ranked("ablation", "ablation", abl)["delta"]) == [-0.3, 0.1, 0.01]


def _maps(n=6):
    a = torch.cat([previous_token(n, 1, 1), uniform(n, 1, 1)], 1)
    return make_maps(
        torch.cat([a, uniform(n, 1, 2)], 0),
        tokens=["[CLS]", "a", "b", ",", "c", "[SEP]"],
        special=[True, False, False, False, False, True],
    )


def test_show_returns_views_that_render_offline():
    import probe

    m = _maps()
    head = probe.show(m, 0, 0)
    html = head._repr_html_()
    assert (
        "data-probe-head-view" in html
        and "ProbeViews" in html
        and "http" not in html.replace("http://www.w3.org/2000/svg", "")
    )
    assert head.weights()[0, 0, 2, 1] == 1.0  # previous-token head, query 2 → key 1
    assert head.data()["examples"][0]["trivial"] == [True, False, False, True, False, True]
    model = probe.show([m, m])
    assert type(model).__name__ == "ModelView" and "data-probe-model-view" in model._repr_html_()
    assert len(model.data()["examples"]) == 2 and len(model.data()["cmap"]) == 32
    with pytest.raises(ValueError, match="unknown view"):
        probe.show(m, view="graph")


def test_evidence_speaks_in_sentences(tmp_path):
    from probe.app.report.build import analyse
    from probe.app.registry import open_run
    from probe.app.report.evidence import evidence_html
    from probe.inputs.corpus import Corpus

    m = _maps()
    ctx = open_run(None, Corpus(texts=("a b , c",) * 2), maps=[m, m])
    data = analyse(ctx, sections=["roles"], strict=True)
    html = evidence_html(data, 0, 0)
    assert "Role: <b>previous-token</b>" in html and "previous token" in html and "<svg" in html
    assert "positional_share" not in html and "to_cls" not in html
