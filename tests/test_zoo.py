"""The model zoo: generators, committed models against their cards, ground-truth
attention (previous-token head, induction circuit, cross-attention alignment), training
smoke tests and bad input."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from probe.analyses.paper.alignment import rnn_attention_maps

from probe.models import zoo
from probe.models.zoo import _common

COMMITTED = [t for t in zoo.TASKS if (zoo.WEIGHTS_DIR / t / _common.CARD).is_file()]


def _need(task):
    if task not in COMMITTED:
        pytest.skip(f"zoo:{task} has no committed weights yet")


@pytest.fixture(scope="module")
def loaded():
    cache = {}

    def get(task):
        _need(task)
        if task not in cache:
            cache[task] = zoo.load_zoo(task)
        return cache[task]

    return get


# ----------------------------------------------------------------------------- generators
@pytest.mark.parametrize("task", zoo.TASKS)
def test_eval_set_is_deterministic_and_seeded(task):
    a = zoo.eval_examples(task, n=20)
    b = zoo.eval_examples(task, n=20)
    c = zoo.eval_examples(task, n=20, seed=1)
    assert a == b
    assert [e["text"] for e in a] != [e["text"] for e in c]
    assert all(e["text"] == " ".join(e["words"]) for e in a)


def test_prev_token_truth():
    for e in zoo.eval_examples("prev-token", n=50):
        assert e["gold_prev"] == [None] + list(range(len(e["words"]) - 1))


def test_induction_truth_points_after_previous_occurrence():
    for e in zoo.eval_examples("induction", n=50):
        w, L = e["words"], e["prefix_len"]
        assert len(set(w[:L])) == L and w[:L] == w[L:]
        for j, k in e["induction_target"].items():
            j = int(j)
            prev = w.index(w[j])  # the earlier occurrence
            assert prev < j and k == prev + 1


def test_agreement_evidence_is_the_subject_noun():
    nouns = {pl: 1 for _, pl in zoo.task_module("agreement").NOUNS}
    nouns.update({sg: 0 for sg, _ in zoo.task_module("agreement").NOUNS})
    ex = zoo.eval_examples("agreement", n=300)
    with_attractor = 0
    for e in ex:
        w = e["words"]
        assert nouns[w[e["evidence_word"]]] == e["label"]
        assert w[e["mask_word"]] == "[MASK]" and e["evidence_word"] < e["mask_word"]
        assert all(w[i] in nouns for i in e["attractor_words"])
        with_attractor += any(nouns[w[i]] != e["label"] for i in e["attractor_words"])
    assert with_attractor > 100  # attractors of the other number are common


def test_brackets_arcs_match_and_conllu_roundtrip():
    import conllu

    mod = zoo.task_module("brackets")
    ex = zoo.eval_examples("brackets", n=30)
    sents = conllu.parse(mod.to_conllu(ex))
    assert len(sents) == len(ex)
    for e, s in zip(ex, sents):
        depth = 0
        assert sum(r == "root" for r in e["gold_rels"]) == 1
        for i, (w, h, r, lab) in enumerate(zip(e["words"], e["gold_heads"], e["gold_rels"], e["labels"])):
            tok = s[i]
            assert tok["head"] == h + 1 and tok["deprel"] == r
            if w == mod.CLOSE:
                # the head is the nearest opener with no closer in between at its depth
                assert r == "match" and e["words"][h] in mod.OPEN and lab == mod.OPEN[e["words"][h]]
                inner = e["words"][h + 1 : i]
                assert inner.count(mod.CLOSE) == len(inner) - inner.count(mod.CLOSE)
                depth -= 1
            else:
                depth += 1
        assert depth == 0


def test_translate_alignment_is_the_lexicon():
    mod = zoo.task_module("translate")
    for e in zoo.eval_examples("translate", n=100):
        assert sorted(e["alignment"]) == list(range(len(e["words"])))
        assert e["target_words"] == [mod.LEXICON[e["words"][i]] for i in e["alignment"]]
        assert e["target_words"][-1] == mod.LEXICON[e["words"][e["alignment"][-1]]]
        assert e["words"][e["alignment"][-1]] in mod.VERBS  # verb-final


# ----------------------------------------------------------------------------- bad input
def test_unknown_task_lists_known_ones():
    with pytest.raises(ValueError, match="known tasks: prev-token, induction"):
        zoo.load_zoo("zoo:nope")
    with pytest.raises(ValueError, match="known tasks"):
        zoo.eval_examples("nope")


def test_truncated_weights_are_reported(tmp_path):
    _need("prev-token")
    d = tmp_path / "pt"
    shutil.copytree(zoo.WEIGHTS_DIR / "prev-token", d)
    w = d / _common.WEIGHTS
    data = w.read_bytes()
    w.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"model\.safetensors is corrupted or truncated"):
        zoo.load_zoo("prev-token", d)
    w.write_bytes(b"\x00" * 4)
    with pytest.raises(ValueError, match="corrupted or truncated"):
        zoo.load_zoo("prev-token", d)


def test_load_refuses_a_card_of_another_task(tmp_path):
    _need("prev-token")
    d = tmp_path / "pt"
    shutil.copytree(zoo.WEIGHTS_DIR / "prev-token", d)
    with pytest.raises(ValueError, match="holds a zoo:prev-token model"):
        zoo.load_zoo("agreement", d)


def test_train_refuses_to_overwrite_without_force(tmp_path, monkeypatch):
    from click.testing import CliRunner

    monkeypatch.setattr(zoo.task_module("prev-token"), "N_EVAL", 16)
    from probe.app.cli.zoo import train_cmd

    out = tmp_path / "m"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    res = CliRunner().invoke(train_cmd, ["zoo:prev-token", "--out", str(out), "--steps", "2"])
    assert res.exit_code != 0 and "--force" in res.output
    assert (out / "keep.txt").exists()
    res = CliRunner().invoke(train_cmd, ["zoo:nope", "--out", str(tmp_path / "x")])
    assert res.exit_code != 0 and "prev-token" in res.output
    res = CliRunner().invoke(train_cmd, ["zoo:prev-token", "--out", str(out), "--steps", "2", "--force"])
    assert res.exit_code == 0, res.output
    assert not (out / "keep.txt").exists() and (out / _common.CARD).is_file()


# ----------------------------------------------------------------------------- training smoke
@pytest.mark.parametrize("task", zoo.TASKS)
def test_training_smoke(task, tmp_path, monkeypatch):
    mod = zoo.task_module(task)
    monkeypatch.setattr(mod, "N_EVAL", 16)  # keep the smoke test to seconds
    card = zoo.train(task, tmp_path / task, steps=3, seed=1)
    assert card["task"] == task and card["train_steps"] == 3 and card["seed"] == 1
    assert 0.0 <= card["accuracy"] <= 100.0
    again = zoo.load_zoo(task, tmp_path / task)
    assert json.loads((tmp_path / task / _common.CARD).read_text())["accuracy"] == card["accuracy"]
    ex = mod.generate(16, mod.EVAL_SEED)
    assert abs(100 * mod.accuracy(again.model, again.tokenizer, ex) - card["accuracy"]) <= 0.005


@pytest.mark.parametrize("task", [t for t in zoo.TASKS if zoo.task_module(t).STEPS > 0])  # not the hand-set ones
def test_training_is_deterministic_given_the_seed(task, tmp_path, monkeypatch):
    """Same seed → bit-identical weights (one torch thread, CPU); another seed → other
    weights. This is what makes `probe train zoo:<task>` reproduce a committed card."""
    from safetensors.torch import load_file

    monkeypatch.setattr(zoo.task_module(task), "N_EVAL", 8)
    weights = []
    for run, seed in (("a", 5), ("b", 5), ("c", 6)):
        zoo.train(task, tmp_path / run, steps=4, seed=seed)
        weights.append(load_file(str(next((tmp_path / run).glob("*.safetensors")))))
    a, b, c = weights
    assert a.keys() == b.keys() == c.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


# ----------------------------------------------------------------------------- committed models
@pytest.mark.slow
@pytest.mark.parametrize("task", zoo.TASKS)
def test_committed_model_reproduces_its_card(task):
    _need(task)
    res = zoo.evaluate(task)
    assert res["card_accuracy"] >= 99.0
    assert abs(res["accuracy"] - res["card_accuracy"]) <= 0.5
    assert res["n_eval"] == zoo.load_zoo(task).card["n_eval"]


def test_evaluate_cli_json(loaded):
    from click.testing import CliRunner

    from probe.app.cli.zoo import evaluate_cmd

    card = loaded("prev-token").card
    res = CliRunner().invoke(evaluate_cmd, ["--model", "zoo:prev-token", "--json", "--n", "200"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)  # stderr carries transformers progress bars
    assert out["n_eval"] == 200 and out["card_accuracy"] == card["accuracy"]
    assert out["accuracy"] >= 99.0
    res = CliRunner().invoke(evaluate_cmd, ["--model", "minilm"])
    assert res.exit_code != 0 and "zoo:" in res.output


def test_list_zoo_shows_cards():
    rows = {r["name"]: r for r in zoo.list_zoo()}
    assert set(rows) == {f"zoo:{t}" for t in COMMITTED}
    for r in rows.values():
        assert r["card"]["accuracy"] >= 99.0 and r["layers"] >= 1 and r["heads"] >= 1


# ----------------------------------------------------------------------------- ground truth
def _captured(task, texts, **kw):
    """Attention of a zoo model through the toolkit's own adapter and capture."""
    from probe.models import load_model
    from probe.runs.capture import capture

    _need(task)
    return capture(load_model(f"zoo:{task}"), texts, **kw)


def test_prev_token_head_attends_to_previous_word():
    ex = zoo.eval_examples("prev-token", n=100)
    maps = _captured("prev-token", [e["text"] for e in ex])
    words = [m.word_level(keep_special=False).attentions for m in maps]  # [L, H, W, W]
    n_layers, n_heads = words[0].shape[:2]
    best = max(
        torch.cat([w[layer, h].diagonal(-1) for w in words]).mean().item()
        for layer in range(n_layers)
        for h in range(n_heads)
    )
    assert best >= 0.9


def test_induction_circuit_is_visible():
    """Layer 0 has a previous-token head; layer 1 has a head attending to the word after
    the previous occurrence of the current word (Olsson et al. 2022)."""
    ex = zoo.eval_examples("induction", n=100)
    maps = _captured("induction", [e["text"] for e in ex])
    words = [m.word_level(keep_special=False).attentions for m in maps]  # [2, H, W, W]

    def score(layer, h, pairs_of):
        return torch.stack([w[layer, h, q, k] for w, e in zip(words, ex) for q, k in pairs_of(e)]).mean().item()

    def prev_pairs(e):  # second copy: word j -> j - 1
        return [(j, j - 1) for j in range(e["prefix_len"], 2 * e["prefix_len"])]

    def induction_pairs(e):
        return [(int(j), k) for j, k in e["induction_target"].items()]

    n_heads = words[0].shape[1]
    prev = max(score(0, h, prev_pairs) for h in range(n_heads))
    ind = max(score(1, h, induction_pairs) for h in range(n_heads))
    ind_in_l0 = max(score(0, h, induction_pairs) for h in range(n_heads))
    assert prev >= INDUCTION_PREV_MIN
    assert ind >= INDUCTION_HEAD_MIN
    assert ind_in_l0 < 0.5 * ind  # one layer cannot do induction: the circuit needs both


INDUCTION_PREV_MIN = 0.8
INDUCTION_HEAD_MIN = 0.7


def _alignment_hits(maps_rows, ex):
    hits = total = 0
    for rows, e in zip(maps_rows, ex):
        for j, src in enumerate(e["alignment"]):
            hits += int(rows[j].argmax().item() == src)
            total += 1
    return hits / total


def test_translate_cross_attention_matches_gold_alignment():
    """Some cross-attention head's argmax over source words is the gold source word for
    ≥ 90% of target words, the moved sentence-final verb included. Query row j is the
    decoder step that produces target word j (its input is <start> for j = 0, else target
    word j − 1); source token k = word k (the source has no </s> to park the verb on)."""
    ex = zoo.eval_examples("translate", n=100)
    maps = _captured("translate", [e["text"] for e in ex], stack="cross", targets=[e["target_text"] for e in ex])
    assert list(maps[0].tokens) == ex[0]["words"]  # no special token on the source side
    n_layers, n_heads = maps[0].attentions.shape[:2]
    best = 0.0
    for layer in range(n_layers):
        for h in range(n_heads):
            rows = [m.attentions[layer, h, :, : len(e["words"])] for m, e in zip(maps, ex)]
            best = max(best, _alignment_hits(rows, ex))
    assert best >= 0.9


def test_translate_cross_attention_aligns_every_non_verb_word():
    """The same check restricted to target words that are not the (moved) verb."""
    mod = zoo.task_module("translate")
    ex = zoo.eval_examples("translate", n=100)
    maps = _captured("translate", [e["text"] for e in ex], stack="cross", targets=[e["target_text"] for e in ex])
    best = 0.0
    for layer in range(maps[0].attentions.shape[0]):
        for h in range(maps[0].attentions.shape[1]):
            hits = total = 0
            for m, e in zip(maps, ex):
                for j, src in enumerate(e["alignment"]):
                    if e["words"][src] in mod.VERBS:
                        continue
                    hits += int(m.attentions[layer, h, j, : len(e["words"])].argmax().item() == src)
                    total += 1
            best = max(best, hits / total)
    assert best >= 0.99


def test_translate_rnn_attention_maps_match_gold_alignment(loaded):
    zm = loaded("translate-rnn")
    ex = zoo.eval_examples("translate-rnn", n=60)
    maps = [rnn_attention_maps(zm.model, zm.tokenizer, e["text"], e["target_text"]) for e in ex]
    m = maps[0]
    assert m.kind == "cross" and m.attentions.shape[:2] == (1, 1)
    # rows: <s> y_1 … y_n (the last produces </s>); columns: the source words, no specials
    assert m.attentions.shape[2:] == (len(ex[0]["target_words"]) + 1, len(ex[0]["words"]))
    assert list(m.query_tokens) == ["<s>"] + ex[0]["target_words"] and list(m.tokens) == ex[0]["words"]
    assert torch.allclose(m.attentions.sum(-1), torch.ones(m.attentions.shape[:3]))
    rows = [mm.attentions[0, 0, :, : len(e["words"])] for mm, e in zip(maps, ex)]
    assert _alignment_hits(rows, ex) >= 0.9
    with pytest.raises(ValueError, match="at least one word"):
        rnn_attention_maps(zm.model, zm.tokenizer, " ", "x")


def test_constructed_heads_are_what_they_were_built_to_be(loaded):
    """Hand-set weights: head 0.0 puts ≥ 0.99 on i−1, head 0.1 ≥ 0.99 on [CLS], on the
    committed model and on a fresh build (no training involved)."""
    mod = zoo.task_module("constructed")
    ex = zoo.eval_examples("constructed", n=50)
    fresh, tok = mod.build(seed=3)
    for model in (loaded("constructed").model, fresh):
        enc = tok([e["text"] for e in ex], padding=True, return_tensors="pt")
        with torch.no_grad():
            a = model(**enc, output_attentions=True).attentions[0]
        prev, cls = [], []
        for b in range(len(ex)):
            n = int(enc["attention_mask"][b].sum())
            prev.append(a[b, 0, torch.arange(1, n), torch.arange(n - 1)].min())
            cls.append(a[b, 1, :n, 0].min())
        assert min(prev) >= 0.99 and min(cls) >= 0.99
        # and the other head does not do it: head 1 is not a previous-token head
        assert a[0, 1, 3, 2] < 0.01 and a[0, 0, 3, 0] < 0.01
