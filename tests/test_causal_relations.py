"""A causal model cannot attend a relation whose head lies to the right of its dependent
(dependent → head), nor one whose head lies to the left (head → dependent): the report shows
those as "not applicable (causal)", never as 0% (issue 43), in the syntax tables, the
structure claim and every head page; each direction is scored over the instances it can
reach, against the offsets on that side."""

from __future__ import annotations

import html
import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest

SAMPLE = Path(__file__).resolve().parents[1] / "app" / "report" / "sample" / "sample.conllu"


def _random_gpt2(tokenizer):
    import torch
    import transformers as T_

    from conftest import _tiny_configs
    from probe.models import ModelAdapter

    torch.manual_seed(0)
    model = T_.GPT2LMHeadModel(_tiny_configs(len(tokenizer))["gpt2"]).eval()
    return ModelAdapter(name="random-gpt2", model=model, tokenizer=tokenizer, family="gpt2")


def _right_headed(path: Path) -> tuple:
    """``(relations whose every dependent has its head on the right, relations with a head on the left)``
    in the treebank (``punct``/``root`` left out)."""
    from probe.inputs.readers import read_conllu

    right: dict = {}
    for s in read_conllu(str(path)):
        for i, (h, rel) in enumerate(zip(s.heads, s.deprels)):
            if h > 0:
                right.setdefault(rel, set()).add(h - 1 > i)
    only_right = {r for r, sides in right.items() if sides == {True}} - {"punct", "root"}
    some_left = {r for r, sides in right.items() if False in sides} - {"punct", "root"}
    return only_right, some_left


@pytest.fixture(scope="module")
def causal_report(bert_tokenizer, tmp_path_factory):
    from probe.app.report import build_report

    out = tmp_path_factory.mktemp("causal") / "r"
    build_report(
        out, adapter=_random_gpt2(bert_tokenizer), conllu=str(SAMPLE), sections=["syntax", "claims"], null="none"
    )
    return out


def test_causal_relations_are_not_applicable_in_the_tables(causal_report):
    only_right, some_left = _right_headed(SAMPLE)
    assert {"det", "amod"} <= only_right and "obj" in some_left  # the sample has both kinds
    rel = pd.read_csv(causal_report / "tables" / "syntax_relations.csv", keep_default_na=False)
    dep = rel[rel["direction"] == "dep_to_head"]
    for r in only_right:
        rows = dep[dep["relation"] == r]
        assert len(rows) and (rows["note"] == "not applicable (causal)").all(), r
        assert (rows["accuracy"] == "").all() and (rows["count"] == 0).all(), r  # no accuracy, not 0%
    for r in some_left:
        rows = dep[dep["relation"] == r]
        assert (rows["note"] == "").all() and (rows["count"].astype(int) > 0).all(), r
    # each direction's count is the instances it reaches: the two add up to every instance
    both = rel.groupby(["relation", "layer", "head"])["count"].sum()
    from probe.inputs.readers import read_conllu

    per_rel: dict = {}
    for s in read_conllu(str(SAMPLE)):
        for h, r in zip(s.heads, s.deprels):
            if h > 0:
                per_rel[r] = per_rel.get(r, 0) + 1
    for (r, _, _), c in both.items():
        if r != "all":
            assert c == per_rel[r], r
    best = pd.read_csv(causal_report / "tables" / "syntax_best.csv", keep_default_na=False)
    det = best[(best["relation"] == "det") & (best["direction"] == "dep_to_head")].iloc[0]
    assert det["note"] == "not applicable (causal)" and det["accuracy"] == "" and det["baseline_accuracy"] == ""
    summary = json.loads((causal_report / "summary.json").read_text())
    syntax = next(x for x in summary["sections"] if x["name"] == "syntax")
    assert any("not applicable (causal)" in n and "det (dep to head)" in n for n in syntax["notes"])


def test_causal_relations_are_not_applicable_on_head_pages_and_claims(causal_report):
    only_right, _ = _right_headed(SAMPLE)
    summary = json.loads((causal_report / "summary.json").read_text())
    for h in summary["heads"]:
        page = html.unescape(re.sub(r"<[^>]+>", " ", (causal_report / h["page"]).read_text()))
        for r in only_right:
            # never an accuracy for a relation the head cannot attend from the dependent
            assert not re.search(rf"\b{re.escape(r)}: accuracy", page), (h["page"], r)
        if "Per relation (dependent → head)" in page:
            assert "not applicable (causal)" in page and "det" in page.split("not applicable (causal)", 1)[1][:400]
        st = h["claims"]["structure"]
        if st["status"] in ("holds", "does not hold"):
            rel, direction = st["statement"].rsplit(" (", 1)
            assert not (rel in only_right and direction.startswith("dep to head")), st["statement"]
            assert "not applicable (causal)" in st["reason"]
            eff = st["effect"]
            assert eff is not None and math.isfinite(eff)
