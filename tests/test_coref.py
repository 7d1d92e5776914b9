"""Coreference heads: CorefUD Entity parsing, closed-form maps, MiniLM on GUM, the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

from probe.errors import NotApplicable
import torch

from conftest import make_maps

from probe.analyses.structure.coref import coref_accuracy, coref_windows
from probe.analyses.structure.coref_mentions import Mention, parse_entity_field, read_number, sentence_mentions
from probe.analyses.structure.word_graph import word_attention
from probe.inputs.readers import Sentence, read_conllu


def test_parse_entity_field_nested_and_single_word():
    stack = []
    assert parse_entity_field("(1-person-new-x-1-sgl)(2-place-new-y-2-coref", 3, stack) == [("1", "person", 3, 3)]
    assert stack == [["2", "place", 3]]
    parse_entity_field("(3-abstract-new", 4, stack)
    assert parse_entity_field("3)2)", 6, stack) == [("3", "abstract", 4, 6), ("2", "place", 3, 6)]
    assert stack == []
    with pytest.raises(ValueError, match="never opened"):
        parse_entity_field("9)", 0, [], "f.conllu:7")


def sent(words, heads, upos, entity, number=None, doc=None):
    spans, pos = [], 0
    for w in words:
        spans.append((pos, pos + len(w)))
        pos += len(w) + 1
    misc = tuple({"Entity": e} if e else {} for e in entity)
    return Sentence(
        text=" ".join(words),
        words=tuple(words),
        spans=tuple(spans),
        heads=tuple(heads),
        deprels=("dep",) * len(words),
        upos=tuple(upos),
        misc=misc,
        meta={"newdoc id": doc} if doc else {},
    )


# "Mary met the boys . She thanked them ." — two sentences of one document
S1 = sent(
    ["Mary", "met", "the", "boys", "."],
    [2, 0, 4, 2, 2],
    ["PROPN", "VERB", "DET", "NOUN", "PUNCT"],
    ["(1-person-new-a-1-coref)", None, "(2-person-new-a-2-coref", "2)", None],
    doc="d1",
)
S2 = sent(
    ["She", "thanked", "them", "."],
    [2, 0, 2, 2],
    ["PRON", "VERB", "PRON", "PUNCT"],
    ["(1-person-giv-a-1-ana)", None, "(2-person-giv-a-1-ana)", None],
)
NUM = [("Sing", "", "", "Plur", ""), ("Sing", "", "Plur", "")]


def test_mentions_take_the_syntactic_head():
    assert sentence_mentions(S1) == [Mention(0, 0, 0, "1", "person"), Mention(2, 3, 3, "2", "person")]


def test_windows_candidates_settings_and_agreement():
    windows = coref_windows([S1, S2], NUM, context=1)
    assert [w.sentence_index for w in windows] == [1]
    w = windows[0]
    assert w.text == S1.text + " " + S2.text and w.first_word == 5
    assert w.text[slice(*w.spans[5])] == "She"
    she, them = w.pronouns
    assert (she.word, she.candidates, she.correct, she.setting) == (5, (0, 3), (True, False), "earlier_sentence")
    assert them.candidates == (0, 3, 5) and them.correct == (False, True, False)
    assert them.candidates[them.nearest_agreeing] == 3  # "She" is nearer but singular
    assert coref_windows([S1, S2], NUM, context=0) == []  # no antecedent inside one sentence
    with pytest.raises(NotApplicable, match="no coreference annotation"):
        coref_windows([sent(["a"], [0], ["X"], [None])])


def _window_maps(window, targets):
    """[CLS] words [SEP]; word i attends fully to targets.get(i, [SEP])."""
    n = len(window.words)
    a = torch.zeros(n + 2, n + 2)
    a[0, 0] = 1
    for i in range(n):
        a[i + 1, targets[i] + 1 if i in targets else n + 1] = 1
    a[n + 1, n + 1] = 1
    return make_maps(
        a[None, None], tokens=["[CLS]"] + list(window.words) + ["[SEP]"], special=[True] + [False] * n + [True]
    )


def test_closed_form_antecedent_and_nearest_maps():
    w = coref_windows([S1, S2], NUM, context=1)[0]
    right = _window_maps(w, {5: 0, 7: 3})  # She→Mary, them→boys
    nearest = _window_maps(w, {5: 3, 7: 5})  # each pronoun → nearest preceding mention head
    acc = coref_accuracy(
        [(w, word_attention(right, len(w.words))[0], (0,)), (w, word_attention(nearest, len(w.words))[0], (0,))]
    )
    df = acc.to_frame().set_index(["setting", "method"])
    assert acc.counts.tolist() == [4, 0, 4]
    assert acc.hits[0, 0, 0] == 2  # the right map twice, the nearest map never
    assert df.loc[("all", "nearest_mention"), "accuracy"] == 0.0
    # agreement rescues both: She→Mary (Sing), them→boys (Plur, skipping the nearer "She")
    assert df.loc[("all", "nearest_agreeing"), "accuracy"] == 1.0
    with pytest.raises(NotApplicable, match="no pronoun"):
        coref_accuracy([])


@pytest.mark.slow
def test_minilm_on_gum_beats_the_nearest_mention(minilm, gum_dev):
    from probe.analyses.structure.syntax_run import run_coref

    sentences = read_conllu(gum_dev, limit=60)
    numbers = read_number(gum_dev, limit=60)
    assert [len(n) for n in numbers] == [len(s) for s in sentences]
    result = run_coref(minilm, sentences, numbers, context=2)
    acc = result.accuracy
    assert acc.counts[0] == acc.counts[1] + acc.counts[2] and acc.counts[0] >= 30
    best = acc.best().set_index("setting")
    # Clark et al. (2019): a head well above the nearest-mention baseline
    assert best.loc["all", "accuracy"] > best.loc["all", "nearest_mention"] + 0.2
    # a random choice among candidates would do far worse than the best head
    chance = np.mean([np.mean(p.correct) for w in coref_windows(sentences, numbers) for p in w.pronouns])
    assert best.loc["all", "accuracy"] > chance + 0.1


def test_coref_cli_writes_tables(tmp_path, gum_dev):
    from click.testing import CliRunner

    from probe.app.cli import command

    coref_cmd = command("coref")

    res = CliRunner().invoke(coref_cmd, ["--conllu", str(gum_dev), "--limit", "12", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    import pandas as pd

    df = pd.read_csv(tmp_path / "coref.csv")
    assert {"setting", "method", "layer", "head", "accuracy", "count"} <= set(df.columns)
    assert json.loads((tmp_path / "summary.json").read_text())["pronouns"] == int(df["count"].iloc[0])


def test_coref_cli_rejects_a_treebank_without_entities(tmp_path, ewt_dev):
    from click.testing import CliRunner

    from probe.app.cli import command

    coref_cmd = command("coref")

    res = CliRunner().invoke(coref_cmd, ["--conllu", str(ewt_dev), "--limit", "5", "--out", str(tmp_path / "b")])
    assert res.exit_code == 1 and "no coreference annotation" in res.output
