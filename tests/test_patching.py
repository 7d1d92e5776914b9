"""Activation patching: batched restart equals one patch per forward; closed-form ends;
bad input; zoo:induction (skips until its weights are committed)."""

from __future__ import annotations

import numpy as np
import pytest

from probe.errors import NotApplicable
import torch

from probe.analyses.common.metrics import as_corpus
from probe.analyses.common.objective import get_metric
from probe.analyses.necessity.patching import corrupt_zoo, patch_heads
from probe.interventions.heads import HeadIntervention, HeadOutputRecorder
from probe.tracing.edits import Patch

CLEAN = ["The cat sat on the mat today.", "A dog barked at the old man."]
CORRUPT = ["The dog ran to the car today.", "A cat hissed at the young boy."]


@pytest.fixture(scope="module")
def gpt2_lm(bert_tokenizer):
    import transformers as T

    from probe.models import ModelAdapter

    torch.manual_seed(0)
    cfg = T.GPT2Config(
        n_embd=32, n_layer=2, n_head=4, vocab_size=len(bert_tokenizer), pad_token_id=0, initializer_range=0.2
    )
    return ModelAdapter(name="tiny-gpt2-lm", model=T.GPT2LMHeadModel(cfg), tokenizer=bert_tokenizer, family="gpt2")


def test_patching_equals_one_forward_per_head(gpt2_lm):
    a = gpt2_lm
    res = patch_heads(a, CLEAN, CORRUPT, get_metric("embedding-drift", a), batch_size=2)
    assert res.path == "layer-restart"
    metric = get_metric("embedding-drift", a)
    cb = metric.make_batch(a, as_corpus(CLEAN), [0, 1])
    kb = metric.make_batch(a, as_corpus(CORRUPT), [0, 1])
    with torch.no_grad():
        with HeadOutputRecorder(a) as rec:
            ref = metric.reference(metric.forward(a, cb), cb)
        for j, (layer, head) in enumerate(res.heads):
            edit = Patch(value=rec.outputs[layer][:, :, head], head=head)
            with HeadIntervention(a, {layer: edit}):
                s = metric.score(metric.forward(a, kb), kb, ref)
            np.testing.assert_allclose(res.patched[j], s.numpy(), atol=1e-5)
    assert np.allclose(res.clean, 0, atol=1e-6) and (res.corrupted > 1e-3).all()
    t = res.table
    np.testing.assert_allclose(t["restored"], (t["patched"] - t["corrupted"]) / (t["clean"] - t["corrupted"]))


def test_group_of_one_head_equals_the_single_head_tools(gpt2_lm):
    from probe.analyses.necessity.ablation import sweep_heads
    from probe.analyses.necessity.head_groups import ablate_group, patch_group

    a = gpt2_lm
    sweep = sweep_heads(a, CLEAN, get_metric("loss", a), "zero", batch_size=2)
    patch = patch_heads(a, CLEAN, CORRUPT, get_metric("loss", a), batch_size=2)
    for j, (layer, head) in enumerate(sweep.heads):
        g = ablate_group(a, CLEAN, [(layer, head)], get_metric("loss", a))
        np.testing.assert_allclose(g.intervened, sweep.ablated[j], atol=1e-5)
        p = patch_group(a, CLEAN, CORRUPT, [(layer, head)], get_metric("loss", a))
        np.testing.assert_allclose(p.intervened, patch.patched[j], atol=1e-5)
        assert p.effect == pytest.approx(float(patch.table["restored"][j]), abs=1e-4)


def test_zero_ablating_a_whole_layer_equals_zeroing_its_output_projection(gpt2_lm):
    """A group covering every head of layer 1 removes the attention's contribution
    except the projection bias: the same as zeroing ``c_proj.weight`` on a copy."""
    import copy

    from probe.analyses.necessity.head_groups import ablate_group

    a = gpt2_lm
    group = ablate_group(a, CLEAN, [(1, h) for h in range(a.n_heads)], get_metric("loss", a))
    single = ablate_group(a, CLEAN, [(1, 0)], get_metric("loss", a))
    assert not np.allclose(group.intervened, single.intervened)
    b = copy.deepcopy(a)
    with torch.no_grad():
        b.model.transformer.h[1].attn.c_proj.weight.zero_()
    metric = get_metric("loss", b)
    batch = metric.make_batch(b, as_corpus(CLEAN), [0, 1])
    with torch.no_grad():
        expected = metric.score(metric.forward(b, batch), batch)
    np.testing.assert_allclose(group.intervened, expected.numpy(), atol=1e-5)
    assert group.ci_low <= group.effect <= group.ci_high


def test_group_bad_input(gpt2_lm):
    from probe.analyses.necessity.head_groups import ablate_group, patch_group

    with pytest.raises(ValueError, match="at least one"):
        ablate_group(gpt2_lm, CLEAN, [], get_metric("loss", gpt2_lm))
    with pytest.raises(ValueError, match="head"):
        ablate_group(gpt2_lm, CLEAN, [(0, 9)], get_metric("loss", gpt2_lm))
    with pytest.raises(NotApplicable, match="does not change"):
        patch_group(gpt2_lm, CLEAN, CLEAN, [(0, 1)], get_metric("loss", gpt2_lm))


def test_patching_a_pair_with_itself_is_undefined_and_lengths_must_match(gpt2_lm):
    with pytest.raises(NotApplicable, match="does not change"):
        patch_heads(gpt2_lm, CLEAN, CLEAN, get_metric("embedding-drift", gpt2_lm))
    with pytest.raises(ValueError, match="pair 0: .*different lengths"):
        patch_heads(gpt2_lm, CLEAN, ["A short one.", CORRUPT[1]], get_metric("embedding-drift", gpt2_lm))
    with pytest.raises(ValueError, match="in pairs"):
        patch_heads(gpt2_lm, CLEAN, CORRUPT[:1], get_metric("embedding-drift", gpt2_lm))


def test_patching_loss_table_and_interval(gpt2_lm):
    """Loss targets come from the clean input; the bootstrap CI brackets each estimate."""
    res = patch_heads(gpt2_lm, CLEAN, CORRUPT, get_metric("loss", gpt2_lm), batch_size=2)
    assert len(res.table) == 8
    assert res.clean.mean() != pytest.approx(res.corrupted.mean())
    t = res.table
    assert ((t["ci_low"] <= t["restored"] + 1e-9) & (t["restored"] <= t["ci_high"] + 1e-9)).all()


def test_corrupt_zoo_induction_keeps_second_copy():
    from probe.models.zoo import eval_examples

    ex = eval_examples("induction", n=5)
    bad = corrupt_zoo("induction", ex)
    for e, b in zip(ex, bad):
        L = e["prefix_len"]
        assert b["words"][L:] == e["words"][L:]
        assert not set(b["words"][:L]) & set(e["words"][:L])
        assert len(b["words"]) == len(e["words"])
    with pytest.raises(ValueError, match="no built-in corruption"):
        corrupt_zoo("prev-token", ex)


@pytest.mark.slow
def test_zoo_induction_ablation_destroys_copying_and_patching_restores_it():
    """The circuit of Olsson et al. (2022) in zoo:induction, found by the roles classifier
    and tested causally: the single previous-token head of layer 0 is necessary; the four
    layer-1 induction heads are redundant one by one but together necessary, and patching
    them from the clean run restores copying on inputs whose first copy was replaced."""
    from probe.models import load_model
    from probe.runs.capture import capture
    from probe.inputs.corpus import load_corpus
    from probe.analyses.necessity.ablation import sweep_heads
    from probe.analyses.necessity.head_groups import ablate_group, patch_group
    from probe.analyses.patterns.roles import head_roles

    try:
        a = load_model("zoo:induction")
    except ValueError as exc:
        pytest.skip(f"zoo:induction not available: {exc}")
    clean = load_corpus(model="zoo:induction", limit=100)
    roles = head_roles(capture(a, list(clean.texts), batch_size=64), min_examples=100)
    ind = [(int(r.layer), int(r.head)) for r in roles.itertuples() if r.role == "induction"]
    prev = [(int(r.layer), int(r.head)) for r in roles.itertuples() if r.role == "previous-token"]
    assert ind and prev and {l for l, _ in ind} == {1} and {l for l, _ in prev} == {0}

    sweep = sweep_heads(a, clean, get_metric("accuracy", a), "zero", batch_size=50).table.sort_values("delta")
    worst = (int(sweep["layer"].iloc[0]), int(sweep["head"].iloc[0]))
    assert sweep["clean"].iloc[0] > 99
    assert worst in prev and sweep["ablated"].iloc[0] < 50  # no other head can write "previous token"
    alone = sweep.set_index(["layer", "head"]).loc[ind, "delta"]
    assert alone.min() > -5  # each induction head alone is redundant …
    together = ablate_group(a, clean, ind, get_metric("accuracy", a))
    assert together.intervened.mean() < 10  # … all of them together are not (chance is 1/26–1/34)

    bad = corrupt_zoo("induction", clean.examples)
    corrupted = as_corpus(clean).__class__(texts=tuple(e["text"] for e in bad), examples=tuple(bad))
    restored = patch_group(a, clean, corrupted, ind, get_metric("accuracy", a))
    assert restored.corrupted.mean() < 5 and restored.effect > 0.95 and restored.ci_low > 0.9
    # the previous-token head's clean output points layer 1 at the right position, but the
    # token found there is the corrupted one: patching it alone restores nothing
    assert abs(patch_group(a, clean, corrupted, prev, get_metric("accuracy", a)).effect) < 0.05
    single = patch_heads(a, clean, corrupted, get_metric("accuracy", a), heads=ind[:1], batch_size=50).table
    one = patch_group(a, clean, corrupted, ind[:1], get_metric("accuracy", a))
    assert one.effect == pytest.approx(single["restored"][0], abs=1e-9)


def test_cli_groups(tmp_path):
    """``--group`` writes groups.csv: on zoo:prev-token, ablating both heads together is at
    least as bad as ablating the task head alone; a malformed group is refused in one line."""
    import pandas as pd
    from click.testing import CliRunner

    from probe.app.cli import command

    ablate_cmd = command("ablate")

    out = tmp_path / "abl"
    res = CliRunner().invoke(
        ablate_cmd,
        [
            "--model",
            "zoo:prev-token",
            "--objective",
            "accuracy",
            "--limit",
            "40",
            "--group",
            "0.0,0.1",
            "--group",
            "0.1",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    groups = pd.read_csv(out / "groups.csv").set_index("heads")
    sweep = pd.read_csv(out / "ablation.csv").set_index(["layer", "head"])
    assert groups.loc["L0H1", "effect"] == pytest.approx(sweep.loc[(0, 1), "delta"], abs=1e-6)
    assert groups.loc["L0H0+L0H1", "intervened"] < 20 and groups.loc["L0H0+L0H1", "clean"] > 99
    res = CliRunner().invoke(
        ablate_cmd,
        [
            "--model",
            "zoo:prev-token",
            "--objective",
            "accuracy",
            "--limit",
            "5",
            "--group",
            "0/1",
            "--out",
            str(tmp_path / "bad"),
        ],
    )
    assert res.exit_code == 2 and "L2H8" in res.output
    res = CliRunner().invoke(
        ablate_cmd,
        [
            "--model",
            "zoo:prev-token",
            "--objective",
            "accuracy",
            "--limit",
            "5",
            "--group",
            "0.7",
            "--out",
            str(tmp_path / "bad2"),
        ],
    )
    assert res.exit_code != 0 and "head" in res.output and not (tmp_path / "bad2" / "groups.csv").exists()


def test_one_pair_gives_no_interval(minilm):
    from probe.analyses.necessity.patching import patch_heads

    res = patch_heads(
        minilm,
        ["The cat sat on the mat."],
        ["mat the on sat cat The."],
        get_metric("embedding-drift", minilm),
        heads=[(5, 11), (2, 3)],
    )
    assert res.table["restored"].notna().all()
    assert res.table[["ci_low", "ci_high"]].isna().all().all()
