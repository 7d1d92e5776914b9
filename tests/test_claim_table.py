"""A head page opens with a compact table of its claims (issue 56): one row per claim (its
title, one plain sentence, its status, its effect with the 95% interval drawn against the
floor and the null model, the count it rests on); the statistics (tests, p-values, nulls)
one click away in a ``<details>``, every number of the evidence sentences still there."""

from __future__ import annotations

import html
import re

import pytest

from probe.analyses.claims.claim import Claim
from probe.analyses.claims.plain import drawn, plain_sentence
from probe.app.report.claim_table import claims_table, effect_svg


def _necessity(status="holds", effect=0.0475, lo=0.0356, hi=0.0607):
    return Claim(
        "necessity", status, "needed alone", effect, lo, hi, 24, 0.02, "1 − ρ", "min_effect+fdr",
        extra={"objective": "similarity-structure", "null_quantile": 0.0013, "p": 1.8e-4},
    )  # fmt: skip


def _pattern_null():
    """L0H3 of the default report: the broad rule cleared, but the null model's heads clear it too."""
    return Claim(
        "pattern", "does not hold", "9% next token, 8% itself", 0.909, 0.900, 0.918, 303, 0.9, "entropy_ratio",
        "null_quantile", extra={"nearest_rule": "broad", "nearest_feature": "entropy_ratio", "nearest_share": 0.909,
                                "null_quantile": 0.998, "null_feature": "entropy_ratio"},
    )  # fmt: skip


CLAIMS = {
    "pattern": _pattern_null(),
    "structure": Claim("structure", "does not hold", "nsubj (dep to head)", -0.29, -0.46, -0.13, 31, 0.52,
                       "accuracy above the best offset", "structure_margin"),  # fmt: skip
    "necessity": _necessity(),
    "redundancy": Claim("redundancy", "not tested", reason="needed alone"),
    "weights": _necessity("does not hold", 0.0188, 0.0121, 0.0272),
    "attribution": Claim("attribution", "does not hold", "agrees with ig", 0.196, count=24, null=0.0,
                         threshold="agreement_share", extra={"significant_share": 0.17, "reference": "ig"}),
}  # fmt: skip


def test_each_claim_is_one_plain_sentence_without_statistics():
    said = {k: plain_sentence(k, c) for k, c in CLAIMS.items()}
    assert said["pattern"] == "It looks broad, but so do the null model's heads: no role is claimed."
    assert said["necessity"] == "Removing it alone harms similarity-structure."
    assert said["weights"].startswith("Where it looks is not shown to matter")
    assert said["redundancy"] == "Not tested: needed alone."
    assert "integrated gradients" in said["attribution"] and "does not" in said["attribution"]
    for k, s in said.items():
        assert not re.search(r"\d", s.replace("nsubj", "")), (k, s)  # no number, p-value or interval
        assert s.count(". ") == 0 and s.endswith("."), (k, s)  # one sentence


def test_the_picture_places_effect_interval_floor_and_null_in_order():
    d = drawn("necessity", CLAIMS["necessity"])
    assert (d.value, d.low, d.high, d.floor, d.null) == (0.0475, 0.0356, 0.0607, 0.02, 0.0013)
    svg = effect_svg(d, "holds")
    dot = float(re.search(r'<circle cx="([\d.]+)"', svg).group(1))
    tick = float(re.search(r'<line x1="([\d.]+)"[^>]*stroke="#222"', svg).group(1))
    band_x, band_w = map(float, re.search(r'<rect x="([\d.]+)" y="2" width="([\d.]+)"', svg).groups())
    bar_x, bar_w = map(float, re.search(r'<rect x="([\d.]+)" y="5.0" width="([\d.]+)"', svg).groups())
    assert band_x + band_w < tick < bar_x < dot < bar_x + bar_w  # null < floor < low < effect < high
    assert 'fill="#1a7f37"' in svg and "floor 0.02" in svg and "null model 0.0013" in svg
    # structure: the margin's interval below 0, the floor at +10%, the null (the best offset) at 0
    d = drawn("structure", CLAIMS["structure"])
    assert (d.floor, d.null, d.percent) == (0.1, 0.0, True)
    assert drawn("redundancy", CLAIMS["redundancy"]) is None
    assert drawn("attribution", CLAIMS["attribution"]).value == pytest.approx(0.17)


def test_the_table_has_one_row_per_claim_and_escapes():
    table = claims_table(CLAIMS)
    rows = re.findall(r"<tr><td><b>(.*?)</b><br><span class=\"plain\">(.*?)</span></td><td><span[^>]*>(.*?)</span>",
                      table)  # fmt: skip
    assert [(t, s) for t, _, s in rows] == [
        ("Pattern", "does not hold"), ("Structure", "does not hold"), ("Necessity", "holds"),
        ("Redundancy", "not tested"), ("Do the weights matter", "does not hold"),
        ("Agreement with attributions", "does not hold"),
    ]  # fmt: skip
    assert table.count("<svg") == 5  # every claim with an effect; none for the one not tested
    assert "null 99.8%" in table and "null 100%" not in table  # L0H3's null model, not rounded to a certainty
    assert "+0.0475 [+0.0356, +0.0607]" in table and "-29% [-46%, -13%]" in table and "303 query rows" in table
    evil = {"pattern": Claim("pattern", "does not hold", "<b>x</b> & \"y\"", 0.3, count=5,
                             threshold="no role rule cleared", extra={"nearest_rule": "<i>", "nearest_share": 0.2,
                                                                      "nearest_threshold": 0.5})}  # fmt: skip
    table = claims_table(evil)
    assert "<b>x</b>" not in table and "&lt;b&gt;x&lt;/b&gt; &amp; &quot;y&quot;" in table and "<i>" not in table


def _text(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", re.sub(r"<svg.*?</svg>", "", fragment, flags=re.S)))


def test_head_pages_open_with_the_table_and_keep_every_statistic(minilm_report_8):
    """Every head page of MiniLM's report: the claims table first (its statuses those of
    summary.json), then, folded, every claim's evidence sentence whole (each p-value,
    null and floor the page showed as paragraphs before)."""
    from probe.analyses.claims.protocol import claim_test

    out, summary = minilm_report_8
    for h in summary["heads"]:
        page = (out / h["page"]).read_text(encoding="utf-8")
        claims = page.split("<h2>Claims</h2>", 1)[1].split("<h2>", 1)[0]
        table, folded = claims.split("<details", 1)
        assert table.startswith('<table class="ctab">') and "<ul" not in table
        shown = dict(re.findall(r"<tr><td><b>(.*?)</b>.*?<td><span[^>]*>(.*?)</span>", table))
        assert shown == {claim_test(k).title: c["status"] for k, c in h["claims"].items()}, h["page"]
        said = " ".join(_text(folded).split())
        for ev in h["evidence"]:
            if ev["section"] == "claims":
                assert " ".join(ev["text"].split()) in said, (h["page"], ev["kind"])
        assert "p=" not in _text(table)  # the statistics are one click away, not in the table
