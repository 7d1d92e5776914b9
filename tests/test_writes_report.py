"""The report's "writes" section (issue 55): on a causal LM, each head's direct logit
attribution to the corpus's own next tokens (mean, bootstrap interval) and the tokens it
promotes, on its head page and the index; skipped with its reason on an encoder."""

from __future__ import annotations

import pytest
import torch

from probe.analyses.writes.answers import Target
from probe.analyses.writes.corpus import corpus_writes
from probe.analyses.writes.dla import attribute
from probe.analyses.writes.stream import decompose

from test_transformer_lens import _tiny
from test_writes import WRITER, hand_set_writer

TEXTS = ("the cat sat on the mat", "a cat and a dog", "the dog saw the cat", "cat cat cat")


def _report(adapter, texts, tmp_path, sections=("writes",)):
    from probe.app.registry import open_run
    from probe.app.report.build import analyse, write_report
    from probe.inputs.corpus import Corpus

    data = analyse(open_run(adapter.name, Corpus(texts=texts), adapter=adapter), sections=list(sections), strict=True)
    return data, write_report(data, tmp_path / "report")


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_corpus_writes_is_the_mean_over_texts_of_each_positions_dla_to_its_next_token(kind, bert_tokenizer):
    """Against the one-position attribution (:func:`attribute` at each position, the next
    token as the answer): the per-head mean over positions, then over texts, and an interval
    around it."""
    adapter = _tiny(kind, bert_tokenizer)
    texts = list(TEXTS) + ["cat"]  # [CLS] cat [SEP]: two positions read
    w = corpus_writes(adapter, texts, k=3, n_boot=200)
    per_text = []
    for text in texts:
        stream = decompose(adapter, text)
        rows = [
            attribute(adapter, stream, Target(int(stream.ids[p + 1])), p).heads()["dla"].to_numpy()
            for p in range(len(stream.ids) - 1)
        ]
        per_text.append(sum(rows) / len(rows))
    expected = sum(per_text) / len(per_text)
    torch.testing.assert_close(torch.tensor(w.table["dla"].to_numpy()), torch.tensor(expected), atol=1e-9, rtol=1e-7)
    assert (w.table["ci_low"] <= w.table["dla"]).all() and (w.table["dla"] <= w.table["ci_high"]).all()
    assert (w.table["ci_high"] > w.table["ci_low"]).any()
    assert w.n_texts == 5 and w.skipped == 0 and w.n_positions == sum(len(decompose(adapter, x).ids) - 1 for x in texts)
    assert len(w.table) == 8 and set(w.promoted["rank"]) <= {0, 1, 2}


def test_the_section_names_the_hand_set_writer_and_the_token_it_writes(bert_tokenizer, tmp_path):
    """The GPT-2 whose only writing head, L1H2, writes ' cat' (tests/test_writes.py): the
    section's largest writer is L1H2, every other head writes 0, its output raises 'cat' most
    and the others raise nothing; the head page and the tinted index table say so."""
    adapter, t = hand_set_writer(bert_tokenizer)
    data, out = _report(adapter, TEXTS, tmp_path)
    (o,) = data.outcomes
    assert o.status == "ran", o.reason
    table = o.result.tables["heads"].set_index(["layer", "head"])
    assert table["dla"].idxmax() == WRITER and table.at[WRITER, "ci_low"] > 0.1
    assert table["dla"].drop(WRITER).abs().max() < 1e-9
    promoted = o.result.tables["promoted"]
    assert promoted[promoted["rank"] == 0][["layer", "head", "token"]].values.tolist() == [[*WRITER, t]]
    copied = o.result.tables["copied"]
    assert copied[(copied["layer"] == 1) & (copied["head"] == 2)]["token"].iloc[0] == t
    page = (out / "heads" / "L1H2.html").read_text()
    assert "<h3>What it writes</h3>" in page and "its output raises &#x27;cat&#x27;" in page
    assert "Its OV circuit copies &#x27;cat&#x27;" in page
    index = (out / "index.html").read_text()
    assert 'style="background:rgba(214,39,40,0.60)"' in index  # the largest writer's cell, deepest red


def test_the_section_is_skipped_with_its_reason_on_an_encoder(tiny_models, tmp_path):
    from probe.app.registry import open_run
    from probe.app.report.build import analyse
    from probe.inputs.corpus import Corpus

    adapter = tiny_models["bert"]
    data = analyse(open_run(adapter.name, Corpus(texts=TEXTS), adapter=adapter), sections=["writes"])
    (o,) = data.outcomes
    assert o.status == "skipped" and "next-token logits" in o.reason, o.reason


def test_the_section_reads_the_first_texts_within_the_model_run_cap(bert_tokenizer):
    """One traced forward per text: the section takes the report's model-run cap
    (``--max-model-examples``, 128 by default) as the other model-running sections do, and says
    so; its table is :func:`corpus_writes` of those first texts. On SmolLM2 every one of
    EWT dev's 256 sentences took a forward of its own."""
    from probe.app.registry import open_run
    from probe.app.registry.context import ReportState
    from probe.app.report.build import _overrides, analyse
    from probe.inputs.corpus import Corpus

    adapter = _tiny("gpt2", bert_tokenizer)
    ctx = open_run(adapter.name, Corpus(texts=TEXTS), adapter=adapter, report=ReportState(overrides=_overrides(2)))
    (o,) = analyse(ctx, sections=["writes"], strict=True).outcomes
    want = corpus_writes(adapter, list(TEXTS[:2]), k=5, n_boot=1000)
    got = o.result.tables["heads"]
    torch.testing.assert_close(torch.tensor(got["dla"].to_numpy()), torch.tensor(want.table["dla"].to_numpy()))
    assert got["count"].eq(2).all() and "texts on the first 2 of 4 examples" in o.result.notes[0], o.result.notes
