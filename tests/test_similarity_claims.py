"""Similarity attributions on the bundled sentence model, pairs files, and head pages that
render exactly the evidence summary.json holds."""

from __future__ import annotations

import html
import re

import numpy as np
import pytest

LIMIT = 8


# ---- pairs files -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "content, words",
    [
        ("A dog runs.\tA dog is running.\nOnly one side here\n", ":2: a pair is two sentences"),
        ("A dog runs.\t   \n", ":1: the second sentence is empty"),
        ("# comment\n\n" + "word " * 600 + "\tshort one\n", ":3: the first sentence has"),
    ],
)
def test_bad_pairs_file_names_file_and_line(minilm, tmp_path, content, words):
    from probe.analyses.explanation.pairs import read_pairs

    f = tmp_path / "pairs.tsv"
    f.write_text(content)
    with pytest.raises(ValueError, match=re.escape(f"{f}{words}")):
        read_pairs(f, minilm)


def test_bad_pairs_file_one_error_line_nothing_written(minilm, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from probe import models
    from probe.app.cli import command

    monkeypatch.setattr(models, "load_model", lambda *a, **k: minilm)
    f = tmp_path / "pairs.tsv"
    f.write_text("A dog runs.\tA dog is running.\nno tab on this line\n")
    out = tmp_path / "out"
    r = CliRunner().invoke(
        command("faithfulness"),
        ["--text", "A dog runs.", "--objective", "similarity", "--pairs", str(f), "--out", str(out)],
    )
    assert r.exit_code == 1, r.output
    errors = [line for line in r.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and f"{f}:2:" in errors[0] and "Traceback" not in r.output
    assert not out.exists() or not any(out.iterdir())


def test_similarity_target_explains_the_pairs_cosine(minilm, tmp_path):
    from probe.analyses.explanation.attributions import attribute
    from probe.analyses.explanation.pairs import similarity_target

    f = tmp_path / "pairs.tsv"
    f.write_text(
        "A man is playing a guitar.\tA person plays an instrument.\n"
        "The stock market fell sharply.\tShares dropped on Monday.\n"
    )
    target, corpus, info = similarity_target(minilm, None, str(f))
    assert len(corpus) == 2 and "mean pooling" in info["pooling"]
    encs = [minilm.encode(t) for t in corpus.texts]
    attrs = attribute(minilm, target, encs, methods=("ig",), n_steps=32)
    comp = attrs.completeness()
    assert (comp["relative_error"] < 0.05).all()  # IG sums to f(x) − f(baseline)
    e = minilm.model(**minilm.batch([minilm.encode("A man is playing a guitar.")])).last_hidden_state.mean(1)
    o = minilm.model(**minilm.batch([minilm.encode("A person plays an instrument.")])).last_hidden_state.mean(1)
    cos = float(
        np.dot(e[0].detach().numpy(), o[0].detach().numpy())
        / np.linalg.norm(e[0].detach().numpy())
        / np.linalg.norm(o[0].detach().numpy())
    )
    assert attrs.examples[0].value == pytest.approx(cos, abs=1e-4)


# ---- the report: one source of numbers ------------------------------------------------------
@pytest.fixture(scope="module")
def small_report(minilm_report_8):
    """MiniLM's report on the first 8 bundled sentences with the faithfulness and claims
    sections (and syntax, ablation and roles: the session's shared report, tests/conftest.py)."""
    out, summary = minilm_report_8
    assert len(summary["heads"]) == 72 and summary["corpus"]["examples"] == LIMIT
    assert {"faithfulness", "claims"} <= {s["name"] for s in summary["sections"]}
    return out, summary


def _claims_items(page: str) -> dict:
    block = page.split("<h2>Claims</h2>", 1)[1].split("</ul>", 1)[0]
    out = {}
    for li in re.findall(r"<li>(.*?)</li>", block, flags=re.S):
        title = re.search(r"<b>(.*?)</b>", li).group(1)
        text = html.unescape(re.sub(r"<[^>]+>", "", li.split("</span>: ", 1)[1]))
        out[title] = text
    return out


@pytest.mark.slow
def test_every_number_on_a_head_page_is_summary_json(small_report):
    from probe.analyses.claims.evidence import fmt, pct
    from probe.analyses.claims.protocol import claim_test

    out, summary = small_report
    powered = 0
    assert summary["claims"]["counts"]["attribution"]["not tested"] == 0  # tested for every head
    for h in summary["heads"]:
        page = (out / h["page"]).read_text()
        items = _claims_items(page)
        for kind, c in h["claims"].items():
            ev = c["evidence"]
            assert items[claim_test(kind).title] == ev["text"], (h["page"], kind)
            if c["status"] == "does not hold" and (kind != "redundancy" or "detectable" in c["extra"]):
                assert ev["detectable"] is not None, (h["page"], kind)  # power: stated, with the same number
                shown = (
                    fmt(ev["detectable"]) if kind in ("necessity", "weights", "redundancy") else pct(ev["detectable"])
                )
                assert f"could have detected: {shown}" in items[claim_test(kind).title], (h["page"], kind)
                assert ev["detectable"] == c["extra"]["detectable"]
                powered += 1
            if kind in ("necessity", "weights"):
                assert ev["count"] == c["count"] == LIMIT
                assert f"over {LIMIT} examples" in ev["text"]
                assert fmt(c["effect"], True) in ev["text"] and fmt(c["ci_low"], True) in ev["text"]
                assert f"floor {fmt(c['null'])}" in ev["text"]
                assert f"p={fmt(c['extra']['p'])}" in ev["text"]
        # the evidence block's necessity paragraph is the same object's text, with its count
        need = page.split("<h3>Does the model need it?</h3>", 1)[1].split("</p>", 1)[0]
        assert html.unescape(re.sub(r"<[^>]+>", "", need)).rstrip(".") == h["claims"]["necessity"]["evidence"]["text"]
    assert powered
    md = (out / "report.md").read_text()
    first = summary["heads"][0]["claims"]["necessity"]["evidence"]["text"]
    assert first.replace("|", "\\|") in md


def test_embeddings_batched_by_length_are_each_texts_own(minilm):
    """``embed`` batches texts of similar length together (not in the order given): every
    row is still its own text's embedding, as if embedded alone."""
    import torch

    from probe.analyses.common.pooling import model_pooling
    from probe.analyses.explanation.pairs import embed

    texts = [
        "A dog.",
        "The committee postponed the vote until the report on the budget was read.",
        "Yes.",
        "It rained all day in the small town by the sea.",
    ]
    pooling = model_pooling(minilm)
    together = embed(minilm, texts, pooling, batch_size=2)
    alone = torch.cat([embed(minilm, [t], pooling) for t in texts])
    assert torch.allclose(together, alone, atol=1e-5)
    assert not torch.allclose(together[0], together[1], atol=1e-2)


def test_permutations_restarted_at_the_layer_equal_full_forwards(minilm):
    """Permuted-attention forwards restarted at the head's layer's output projection from
    the clean run's cached stream give the full forwards' effects (the same permutations)."""
    from probe.analyses.explanation.counterfactual import permutation_effects
    from probe.analyses.explanation.pairs import similarity_target
    from probe.app.report.bundled import sample_corpus

    target, corpus, _ = similarity_target(minilm, sample_corpus(limit=6))
    encs = [minilm.encode(t) for t in corpus.texts[:3]]
    heads = [(0, 3), (2, 7), (5, 10)]
    fast = permutation_effects(minilm, target, encs, heads=heads, n_permutations=4, restart=True)
    full = permutation_effects(minilm, target, encs, heads=heads, n_permutations=4, restart=False)
    a, b = fast.per_example, full.per_example
    assert (a[["example", "layer", "head"]].values == b[["example", "layer", "head"]].values).all()
    assert np.allclose(a["abs_delta"], b["abs_delta"], atol=2e-6) and b["abs_delta"].max() > 1e-3


def test_the_report_states_why_the_claims_objective_was_chosen(small_report):
    """The claims section resolves ``auto`` itself and hands the objective on: the notes and
    summary.json say why it was chosen (a sentence encoder), not "given"."""
    _, summary = small_report
    claims = next(s for s in summary["sections"] if s["name"] == "claims")
    why = claims["summary"]["objective"]["why"]
    assert "sentence encoder" in why and why != "given"
    assert any("— a sentence encoder" in n for n in claims["notes"])
