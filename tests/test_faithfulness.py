"""Agreement, evidence recovery, permuted attention and the `probe faithfulness` command."""

from __future__ import annotations

import numpy as np
import pytest

from probe.errors import InputError, NotApplicable
import torch

from probe.analyses.explanation.agreement import agreement
from probe.analyses.explanation.attention_scores import attention_scores
from probe.analyses.explanation.counterfactual import head_output, jsd, permutation_effects, permute_rows, tvd
from probe.analyses.explanation.ground_truth import evidence_recovery, gold_rank
from probe.analyses.common.targets import CallableTarget
from probe.analyses.common.word_scores import ScoreSet

from conftest import make_maps, previous_token, uniform
from probe.analyses.common.objective import parse_target


def _set(index, rows, method="m"):
    rows = np.asarray(rows, dtype=float)
    n = rows.shape[1]
    return ScoreSet(
        index=index,
        keys=tuple((f"{method}{k}", -1, -1) for k in range(len(rows))),
        scores=rows,
        word_ids=tuple(range(n)),
        words=tuple(f"w{i}" for i in range(n)),
    )


# ---- agreement (closed form) ---------------------------------------------------------------
def test_agreement_identical_and_reversed_rankings():
    x = np.arange(1, 8, dtype=float)
    att = [_set(i, [x, x[::-1]], "att") for i in range(3)]
    attr = [_set(i, [x * 10], "ig") for i in range(3)]
    res = agreement(att, attr)
    s = res.summary.set_index("method")
    assert s.loc["att0", "tau_mean"] == pytest.approx(1.0) and s.loc["att0", "rho_mean"] == pytest.approx(1.0)
    assert s.loc["att1", "tau_mean"] == pytest.approx(-1.0)
    assert s.loc["att0", "tau_significant"] == 1.0 and s.loc["att1", "tau_significant"] == 1.0
    assert s.loc["att0", "n_examples"] == 3
    assert len(res.per_example) == 3 * 2


def test_agreement_uses_magnitudes_and_counts_significance_share():
    rng = np.random.default_rng(0)
    x = np.arange(1, 9, dtype=float)
    att = [_set(0, [x]), _set(1, [x])]
    attr = [_set(0, [-x]), _set(1, [rng.permutation(x) * np.sign(rng.normal(size=8))])]
    res = agreement(att, attr)
    per = res.per_example
    assert per.loc[0, "tau"] == pytest.approx(1.0)  # |−x| ranks as x
    assert res.summary.loc[0, "tau_significant"] == pytest.approx(np.mean(per["tau_p"] < 0.05))


def test_too_few_words_for_a_significance_test_says_so():
    att, attr = [_set(0, [[1, 2, 3, 4]])], [_set(0, [[1, 2, 3, 4]])]
    with pytest.raises(NotApplicable, match="too few examples for a significance test"):
        agreement(att, attr)
    long = [_set(1, [np.arange(6.0)])]
    res = agreement(att + long, attr + long)
    assert res.skipped == 1 and res.summary.loc[0, "n_examples"] == 1


# ---- evidence recovery -------------------------------------------------------------------------
def test_gold_rank_with_ties_and_magnitudes():
    assert gold_rank([0.1, -0.9, 0.3], 1) == (1.0, True)
    assert gold_rank([0.5, 0.5, 0.1], 0) == (1.5, False)  # tied first: not "first"
    assert gold_rank([0.2, 0.2, 0.2, 0.2], 3) == (2.5, False)
    with pytest.raises(ValueError, match="out of range"):
        gold_rank([1, 2], 5)


def test_evidence_recovery_table():
    sets = [_set(0, [[0, 5, 1], [5, 0, 1]]), _set(1, [[9, 1, 0, 0], [1, 9, 0, 0]])]
    res = evidence_recovery([sets], gold=[1, 0])
    s = res.summary.set_index("method")
    assert s.loc["m0", "top1_rate"] == pytest.approx(1.0) and s.loc["m0", "mean_rank"] == pytest.approx(1.0)
    assert s.loc["m1", "top1_rate"] == pytest.approx(0.0) and s.loc["m1", "mean_rank"] == pytest.approx((3 + 2) / 2)
    assert s.loc["chance", "top1_rate"] == pytest.approx((1 / 3 + 1 / 4) / 2)


# ---- attention scores (closed form) -----------------------------------------------------------
def test_attention_scores_on_closed_form_maps():
    n = 6
    attn = torch.cat([previous_token(n, 2, 2), uniform(n, 2, 2)], 0)  # layers 0-1 previous, 2-3 uniform
    maps = make_maps(attn)
    ss = attention_scores(maps, reads=[3], methods=("attention", "rollout"))
    d = dict(zip(ss.keys, ss.scores))
    assert d[("attention", 0, 1)].tolist() == [0, 0, 1, 0, 0, 0]
    assert d[("attention", 3, -1)] == pytest.approx(np.full(n, 1 / n))
    assert d[("rollout", -1, -1)].sum() == pytest.approx(1.0)
    assert ss.word_scores().shape == (len(ss.keys), n)
    with pytest.raises(ValueError, match="out of range 0..5"):
        attention_scores(maps, reads=[9])


# ---- permuted attention -----------------------------------------------------------------------
def test_permute_rows_shuffles_valid_keys_only():
    g = torch.Generator().manual_seed(0)
    a = torch.softmax(torch.randn(2, 5, 5), -1)
    a[1, :, 3:] = 0  # example 1 has 3 tokens: padding keys carry nothing
    a[1] = a[1] / a[1].sum(-1, keepdim=True)
    p = permute_rows(a, [5, 3], causal=False, generator=g)
    assert torch.allclose(p.sum(-1), torch.ones(2, 5))
    assert (p[1, :, 3:] == 0).all()
    assert torch.equal(p.sort(-1).values, a.sort(-1).values)  # each row is a permutation
    assert not torch.equal(p, a)
    c = torch.tril(torch.rand(1, 5, 5))
    c = c / c.sum(-1, keepdim=True)
    pc = permute_rows(c, [5], causal=True, generator=g)
    assert (torch.triu(pc, 1) == 0).all() and torch.allclose(pc.sum(-1), torch.ones(1, 5))


def test_jsd_and_tvd():
    p, q = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
    assert tvd(p, q) == pytest.approx(1.0) and jsd(p, q) == pytest.approx(1.0)
    assert jsd(p, p) == pytest.approx(0.0, abs=1e-7)


@pytest.mark.parametrize("family", ["bert", "gpt2", "llama"])
def test_identity_permutation_changes_nothing_and_alpha_v_is_the_head_output(tiny_models, family):
    from probe.runs.capture import AttentionCapture
    from probe.interventions.heads import HeadOutputRecorder

    a = tiny_models[family]
    texts = ["the keys to the cabinet are here", "a dog barks"]
    encs = [a.encode(t) for t in texts]
    w = torch.linspace(-1, 1, a.config.hidden_size)  # (a plain sum of a LayerNorm output is 0)
    pos = 0 if family == "bert" else -1  # [CLS]; the last token of a decoder (reads all the others)
    target = CallableTarget(lambda out, mask: out.last_hidden_state[:, pos] @ w)
    ctrl = permutation_effects(a, target, encs, heads=[(0, 1), (1, 2)], n_permutations=2, identity=True)
    shuffled = permutation_effects(a, target, encs, heads=[(0, 1), (1, 2)], n_permutations=3, seed=1)
    assert ctrl.per_example["abs_delta"].max() < 1e-5  # float32 noise only
    # a random model's attention is near uniform, yet permuting it moves the output
    assert shuffled.per_example["abs_delta"].max() > 10 * max(ctrl.per_example["abs_delta"].max(), 1e-6)
    assert set(shuffled.summary.columns) >= {"layer", "head", "tvd_median", "jsd_median", "share_unchanged"}
    # z_h = α_h V_h reproduces the recorded head output exactly
    b = a.batch(encs)
    vals = {}
    fused = family == "gpt2"
    hook = a.value_modules()[1].register_forward_hook(
        lambda m, i, o: vals.__setitem__(1, (o[..., 2 * o.shape[-1] // 3 :] if fused else o).detach())
    )
    try:
        with AttentionCapture(a, layers=[1]) as cap, HeadOutputRecorder(a, layers=[1]) as rec, torch.no_grad():
            a.model(**b)
    finally:
        hook.remove()
    alpha = cap.layer_tensors()[1]
    v = vals[1].reshape(*b["input_ids"].shape, -1, a.head_dim)
    v = v.repeat_interleave(a.n_heads // v.shape[2], dim=2)
    z = head_output(alpha[:, 2], v[:, :, 2])
    assert torch.allclose(z, rec.outputs[1][:, :, 2], atol=1e-5)


@pytest.mark.parametrize("family", ["bert", "llama"])
def test_an_examples_permutations_do_not_depend_on_which_examples_share_its_forward(tiny_models, family):
    """Each example draws its permutations from its own generator (seed, example, head): one
    forward per example and one forward of all of them give the same effects, and a
    different seed different ones. The groups pad no more than a forward costs."""
    from probe.analyses.explanation.counterfactual import _permutation_groups

    a = tiny_models[family]
    texts = ["the keys to the cabinet are here on the shelf by the door", "a dog barks", "we met at noon"]
    encs = [a.encode(t) for t in texts]
    w = torch.linspace(-1, 1, a.config.hidden_size)
    last = lambda out, mask: out.last_hidden_state[torch.arange(len(mask)), mask.sum(1) - 1]  # noqa: E731 (not padding)
    target = CallableTarget(lambda out, mask: last(out, mask) @ w)
    kw = dict(heads=[(0, 1), (1, 2)], n_permutations=3, seed=1)
    together = permutation_effects(a, target, encs, batch_rows=64, **kw).per_example
    alone = permutation_effects(a, target, encs, batch_rows=3, **kw).per_example
    other = permutation_effects(a, target, encs, batch_rows=64, **dict(kw, seed=2)).per_example
    assert together["abs_delta"].max() > 1e-4
    assert np.allclose(together["abs_delta"], alone["abs_delta"], atol=1e-5, rtol=1e-4)
    assert not np.allclose(together["abs_delta"], other["abs_delta"], atol=1e-5, rtol=1e-4)
    # 3 short inputs share a forward; 20 of 4 tokens and 2 of 60 do not: padding the short
    # ones to 60 would cost more than a forward
    assert _permutation_groups(a, [3, 4, 5], 3, 64) == [(0, 3, 3)]
    assert _permutation_groups(a, [4] * 20 + [60, 60], 3, 64) == [(0, 20, 3), (20, 22, 3)]


def test_permutation_bad_input(tiny_models):
    a = tiny_models["bert"]
    t = CallableTarget(lambda out, mask: out.last_hidden_state[:, 0, 0])
    with pytest.raises(ValueError, match="head 9 out of range"):
        permutation_effects(a, t, [a.encode("a b")], heads=[(0, 9)])
    with pytest.raises(ValueError, match="no examples"):
        permutation_effects(a, t, [])


# ---- real data: the bundled model with the UD probe, through the CLI ----------------------------
@pytest.mark.slow
def test_cli_on_ewt_with_the_ud_probe(ewt_dev, tmp_path):
    import pandas as pd
    from click.testing import CliRunner

    from probe.app.cli import command

    faithfulness_cmd = command("faithfulness")

    out = tmp_path / "f"
    r = CliRunner().invoke(
        faithfulness_cmd,
        [
            "--conllu",
            str(ewt_dev),
            "--limit",
            "120",
            "--objective",
            "probe:subject-number",
            "--max-examples",
            "3",
            "--steps",
            "8",
            "--permutations",
            "2",
            "--heads",
            "0:0,5:1",
            "--attention-methods",
            "attention,rollout",
            "--out",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.output
    assert "held-out accuracy" in r.output
    agree = pd.read_csv(out / "agreement.csv")
    assert len(agree) == (6 * 13 + 1) * 4  # (72 heads + 6 layer means + rollout) × 4 attributions
    assert agree["tau_mean"].between(-1, 1).all()
    perm = pd.read_csv(out / "permutation.csv")
    assert sorted(zip(perm["layer"], perm["head"])) == [(0, 0), (5, 1)]
    gt = pd.read_csv(out / "ground_truth.csv")  # the subject word is the UD evidence
    assert {"ig", "blank_out", "rollout", "chance"} <= set(gt["method"])
    verdict = pd.read_csv(out / "verdict.csv")
    assert len(verdict) == 72 and verdict["verdict"].notna().all()


def test_cli_refuses_a_target_the_model_cannot_give(tmp_path):
    from click.testing import CliRunner

    from probe.app.cli import command

    faithfulness_cmd = command("faithfulness")

    r = CliRunner().invoke(
        faithfulness_cmd,
        ["--text", "The dogs bark loudly at night.", "--objective", "logit", "--out", str(tmp_path / "x")],
    )
    assert r.exit_code != 0
    assert "logits" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(
        faithfulness_cmd,
        ["--text", "The dogs bark.", "--objective", "probe:subject-number", "--out", str(tmp_path / "y")],
    )
    assert r.exit_code != 0 and "--conllu" in r.output


# ---- zoo:agreement ground truth ---------------------------------------------------------------
@pytest.mark.slow
def test_zoo_agreement_evidence_recovery():
    from probe.models import load_model
    from probe.inputs.corpus import load_corpus

    try:
        adapter = load_model("zoo:agreement")
    except ValueError as exc:
        pytest.skip(f"zoo:agreement weights are not committed yet: {exc}")
    from probe.analyses.explanation.faithfulness import run_faithfulness

    corpus = load_corpus(model="zoo:agreement", limit=24)
    rep = run_faithfulness(adapter, corpus, parse_target("logit", adapter), n_steps=20, permute=False)
    s = rep.ground_truth.summary.set_index("method")
    chance = s.loc["chance", "top1_rate"]
    # the subject noun alone decides the label: occlusion and IG must find it far above chance
    assert s.loc["blank_out", "top1_rate"] > 2 * chance
    assert s.loc["ig", "top1_rate"] > 2 * chance


def _tiny_lm(bert_tokenizer):
    """A tiny random GPT-2 with a language-model head (seed 0), on the shared BERT tokenizer."""
    import transformers as T_
    from conftest import _tiny_configs

    from probe.models import ModelAdapter

    torch.manual_seed(0)
    model = T_.GPT2LMHeadModel(_tiny_configs(len(bert_tokenizer))["gpt2"]).eval()
    return ModelAdapter(name="tiny-lm", model=model, tokenizer=bert_tokenizer, family="gpt2")


def test_examples_the_target_cannot_read_are_left_out_and_said(bert_tokenizer):
    """One example too short for the target (a one-token EWT sentence has no next-token
    loss) is left out of the explanation and said, not the whole study refused: SmolLM2's
    report on EWT dev skipped its faithfulness section for one such sentence."""
    from probe.analyses.common.metrics import as_corpus
    from probe.analyses.explanation.faithfulness import run_faithfulness

    lm = _tiny_lm(bert_tokenizer)
    texts = [
        "the cat sat on the mat by the door",
        "yes",
        "a dog ran home after the long day",
        "no",
        "we met at noon by the sea",
    ]
    rep = run_faithfulness(
        lm, as_corpus(texts), parse_target("loss:6", lm), methods=("ig",), n_steps=4, permute=False, null=False
    )
    said = rep.info["unreadable"]
    assert said["n"] == 2 and said["of"] == 5 and said["indices"] == [1, 3]
    assert "out of range" in said["why"]
    with pytest.raises(InputError, match="out of range"):  # none readable: the target's own error
        run_faithfulness(
            lm,
            as_corpus(["yes", "no"]),
            parse_target("loss:6", lm),
            methods=("ig",),
            n_steps=4,
            permute=False,
            null=False,
        )


def test_permutations_on_a_sample_of_the_explained_examples(bert_tokenizer):
    """``permute_examples``: each head is permuted on that many explained examples drawn at
    random (the report's 16 on the screened path), not on every one; the rows name the
    explained examples they were run on, and a head's median reads only those."""
    from probe.analyses.common.metrics import as_corpus
    from probe.analyses.explanation.faithfulness import run_faithfulness

    lm = _tiny_lm(bert_tokenizer)
    texts = [
        "the cat sat on the mat by the door",
        "a dog ran home after the long day",
        "we met at noon by the sea and the sky",
        "the old man read a book in the park",
        "she left the keys on the kitchen table",
    ]
    kw = dict(methods=("ig",), n_steps=4, null=False, heads=[(0, 0), (1, 1)], n_permutations=3)
    some = run_faithfulness(lm, as_corpus(texts), parse_target("loss:6", lm), permute_examples=2, **kw)
    every = run_faithfulness(lm, as_corpus(texts), parse_target("loss:6", lm), **kw)
    picked = some.info["permuted_examples"]
    assert len(picked) == 2 and set(picked) < set(range(5)) and every.info["permuted_examples"] == list(range(5))
    assert sorted(set(some.permutation.per_example["example"])) == picked
    assert some.permutation.summary["n_examples"].tolist() == [2, 2]
    assert every.permutation.summary["n_examples"].tolist() == [5, 5]


def test_permuted_forwards_project_only_the_read_positions_with_the_same_effects(bert_tokenizer, monkeypatch):
    """``loss:-1`` on a causal LM: the permutation test's clean and permuted forwards ask the
    head for the predicting positions only (``logits_to_keep``, :class:`KeptLogits`); the
    effects equal those of full-width forwards (the head on every position) to 1e-6."""
    import functools

    import probe.analyses.common.targets as targets
    from probe.analyses.common.objective import resolve_objective

    lm = _tiny_lm(bert_tokenizer)
    target, _ = resolve_objective("loss:-1", lm, use="explain")
    encs = [lm.encode(t) for t in ("the cat sat on the mat", "a dog ran home after the long day", "we met")]
    widths: list = []  # the logits' sequence width of every forward
    forward = lm.model.forward

    @functools.wraps(forward)  # its signature: the objective asks it for logits_to_keep
    def spy(*args, **kwargs):
        out = forward(*args, **kwargs)
        widths.append(out.logits.shape[1])
        return out

    monkeypatch.setattr(lm.model, "forward", spy)
    fast = permutation_effects(lm, target, encs, heads=[(0, 1), (1, 0)], n_permutations=3, seed=2)
    assert widths and max(widths) < min(len(e) for e in encs)  # never every position's logits
    widths.clear()
    monkeypatch.setattr(targets, "keeps_logits", lambda model: False)
    full = permutation_effects(lm, target, encs, heads=[(0, 1), (1, 0)], n_permutations=3, seed=2)
    assert max(widths) == max(len(e) for e in encs)
    assert fast.per_example["tvd"].min() > 5e-6  # the permutations change the prediction (a tiny random LM's)
    np.testing.assert_allclose(
        fast.per_example[["tvd", "jsd", "abs_delta"]],
        full.per_example[["tvd", "jsd", "abs_delta"]],
        rtol=1e-3,
        atol=1e-9,
    )
