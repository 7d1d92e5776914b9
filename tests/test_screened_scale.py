"""The report's causal path at a large head count (issue 54 item 4): ``--causal auto`` screens
above :data:`probe.app.registry.analyses._shared.SCREEN_ABOVE_HEADS` heads, and the screened
verdicts agree with the exhaustive path's, on a tiny random Llama with 160 heads (10 layers ×
16 heads, built from a config: no download)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from probe.analyses.common.metrics import as_corpus

SENTENCES = [
    "the cat sat on the mat",
    "a dog ran home after school",
    "birds fly south in the winter months",
    "she gave him the old red book yesterday",
    "we will meet at the station at noon",
    "the children played in the park all day",
    "my brother lives in a small town",
    "rain fell on the quiet street",
]
#: 24 examples (one block of the sequential test: an exactly removed head takes every one)
CORPUS = [f"{a} and {b}" for a in SENTENCES for b in SENTENCES[:3]]
#: heads whose output projection is scaled up, so that removing them harms the loss
STRONG = [(2, 5), (5, 0), (8, 11)]
#: the report test's loss floor: the model's three largest mean-ablation harms are 0.20–0.23
#: nats, the next 0.12 (its random heads all harm the loss by more than the 0.01 default)
FLOOR = 0.16


@pytest.fixture
def floor(monkeypatch):
    from probe.analyses.claims import thresholds as T

    monkeypatch.setitem(T.MIN_EFFECT, "loss", FLOOR)


@pytest.fixture(scope="module")
def many_heads(tmp_path_factory):
    """``hf:<folder>`` of a random LlamaForCausalLM with 10 layers × 16 heads (head size 4), the
    heads :data:`STRONG` writing 20× louder."""
    import transformers as T

    from probe.models.registry import minilm_path

    tok = T.AutoTokenizer.from_pretrained(str(minilm_path()), local_files_only=True)
    torch.manual_seed(0)
    cfg = T.LlamaConfig(
        hidden_size=64,
        num_hidden_layers=10,
        num_attention_heads=16,
        num_key_value_heads=4,
        intermediate_size=64,
        vocab_size=len(tok),
        pad_token_id=0,
        initializer_range=0.3,
    )
    path = tmp_path_factory.mktemp("many-heads-llama")
    model = T.LlamaForCausalLM(cfg)
    with torch.no_grad():  # a few heads that matter: their output projections ×20 (head size 4)
        for layer, head in STRONG:
            model.model.layers[layer].self_attn.o_proj.weight[:, 4 * head : 4 * head + 4] *= 20
    model.save_pretrained(path, safe_serialization=True)
    tok.save_pretrained(path)
    return f"hf:{path}"


@pytest.fixture(scope="module")
def llama(many_heads):
    from probe.models import load_model

    return load_model(many_heads)


def test_auto_screens_above_the_head_count_rule(llama):
    """``auto``: screened above 144 heads whatever the corpus; at or under it, sequential where
    the cap cuts the corpus, else exhaustive; a path chosen by name is kept."""
    from probe.app.registry.analyses._shared import SCREEN_ABOVE_HEADS, causal_path, head_count

    assert head_count(llama) == 160 > SCREEN_ABOVE_HEADS == 144
    assert causal_path("auto", 24, 128, head_count(llama)) == "screened"
    assert causal_path(None, 2001, 128, 270) == "screened"
    assert causal_path("auto", 2001, 128, 144) == "sequential"
    assert causal_path("auto", 24, 128, 72) == "exhaustive"
    assert causal_path("exhaustive", 24, 128, 270) == "exhaustive"


def test_screened_verdicts_equal_the_exhaustive_ones_with_fewer_removals(llama, monkeypatch):
    """On next-token loss (against a floor alone, no null model; the floor chosen from the
    exhaustive harms so that some heads hold and most do not): the screened path calls
    necessary exactly the heads the exhaustive path does, a head it removed exactly has the
    exhaustive sweep's mean harm (its block is the whole corpus). On this random model the
    floor that lets some head hold is low, and the screen confirms all 160 heads (its
    first-order estimates overestimate: 0.36 against an exact 0.12 for L0H0), so this test
    shows the agreement, not the saving."""
    from probe.analyses.claims import thresholds as T
    from probe.analyses.claims.necessity import necessity_claims
    from probe.analyses.claims.removal import removal_sweep
    from probe.analyses.claims.screened import screened_necessity
    from probe.analyses.common.objective import resolve_objective

    corpus = as_corpus(CORPUS)
    obj, _ = resolve_objective("loss", llama, corpus)
    heads = [(layer, h) for layer in range(10) for h in range(16)]
    sweep = removal_sweep(llama, corpus, obj, units=heads, modes=("mean",), batch_size=8)
    # the floor: the largest of half the 3rd, 4th, … largest mean harm at which the exhaustive test
    # holds some head (chosen on the exhaustive side alone, before the screen runs)
    for candidate in np.sort(sweep.harm["mean"].mean(1))[::-1][2:]:
        monkeypatch.setitem(T.MIN_EFFECT, "loss", float(candidate) / 2)
        want = necessity_claims(sweep, None, null=None)
        if any(c.holds for c in want.values()):
            break
    got = screened_necessity(llama, corpus, obj, heads, batch_size=8)
    assert 0 < sum(c.holds for c in want.values()) < len(heads) / 4  # the comparison is not all one verdict
    assert {k: c.holds for k, c in got.claims.items()} == {k: c.holds for k, c in want.items()}
    exact = got.table[got.table.role != "screened out"]
    assert len(exact) > 0  # at this low floor the screen confirms every head here (its savings: the report test)
    for r in exact.itertuples():
        assert r.exact_harm == pytest.approx(want[(r.layer, r.head)].effect, rel=1e-4, abs=1e-6)
    assert got.info["exact_removals"] <= got.info["exhaustive_removals"]
    held = {k for k, c in want.items() if c.holds}
    assert held <= set(zip(exact["layer"], exact["head"]))  # the screen confirmed every head that holds
    assert np.isfinite(got.table.screened).all()


def test_report_takes_the_screened_path_and_the_claims_reuse_the_ablation(many_heads, tmp_path, floor, monkeypatch):
    """``probe report`` with the default ``--causal auto`` on 160 heads: the ablation section's
    table is the screen's (every head; the confirmed ones exact), the claims take its run
    (``reused``) instead of screening again, the settings state the rule, and the weights of a
    screened-out head are not tested with the reason; the confirmed heads' weights read the
    first :data:`SCREENED_EXAMPLES` of the model-run examples (here 6 of 16), whose clean
    readouts every claims sweep takes from the screen instead of a clean forward."""
    from click.testing import CliRunner

    from probe.analyses.claims import removal, screened_claims
    from probe.app.cli import main

    monkeypatch.setattr(screened_claims, "SCREENED_EXAMPLES", 6)
    known: list = []
    real = removal.removal_sweep
    monkeypatch.setattr(removal, "removal_sweep", lambda *a, **k: (known.append(k.get("known")), real(*a, **k))[1])

    out = tmp_path / "report"
    args = ["report", "--model", many_heads, "--sections", "ablation,claims", "--null", "none", "--out", str(out)]
    for text in CORPUS[:16]:
        args += ["--text", text]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    sections = {s["name"]: s for s in summary["sections"]}
    causal = sections["claims"]["summary"]["causal"]
    assert causal["path"] == "screened" and causal["reused"] is True and causal["heads"] == 160
    assert causal["examples_screened"] == 16 and "miss_rate_upper" in causal
    assert sections["ablation"]["summary"]["path"].startswith("screened")
    assert "more than 144" in json.dumps(summary["settings"])
    weights = [h["claims"]["weights"] for h in summary["heads"]]
    assert sum(w["status"] == "not tested" for w in weights) == 160 - causal["confirmed"]
    tested = [w for w in weights if w["status"] != "not tested"]
    assert tested and all(w["count"] == 6 for w in tested), tested[:2]
    assert known and all(k is not None and k.shape == (6,) and np.isfinite(k).all() for k in known), known
    # every claim's evidence a reader sees is written from numbers it has: no Python None, no empty
    # interval (a screened-out head's necessity once read "changes  by — [—, —] … over None heads")
    for h in summary["heads"]:
        for kind, c in h["claims"].items():
            text = c["evidence"]["text"]
            assert "None" not in text and "[—, —]" not in text and "  " not in text, (h["layer"], h["head"], kind, text)


def test_faithfulness_permutes_the_screened_heads_on_a_sample_of_the_explained_examples():
    """Above :data:`SCREEN_ABOVE_HEADS` heads the faithfulness section permutes
    :data:`PERMUTED_AT_SCALE` heads (without the ablation's screen at hand), each on
    :data:`PERMUTED_EXAMPLES_AT_SCALE` explained examples, and says so; at 72 heads every head
    on every explained example, as before. A permuted forward per head, permutation and
    example made SmolLM2's section alone cost more than the rest of the report."""
    from types import SimpleNamespace

    from probe.app.registry.analyses import faithfulness as F

    def ctx(layers, heads):
        return SimpleNamespace(
            params={"heads": None, "permutations": 5, "seed": 0},
            adapter=SimpleNamespace(n_layers=layers, n_heads=heads),
            report=SimpleNamespace(overrides={}),
            corpus=SimpleNamespace(whole=list(range(40))),
            result_of=lambda kind: None,
            stage=lambda stage, analysis: None,
        )

    heads, said, on = F._permuted_heads(ctx(30, 9))
    assert len(heads) == F.PERMUTED_AT_SCALE == 32 and on == F.PERMUTED_EXAMPLES_AT_SCALE == 16
    assert f"each on {on} of the explained examples drawn at random" in said[0]
    assert F._permutations({"permutations": 5}, heads, on)["permute_examples"] == 16
    assert F._permuted_heads(ctx(6, 12)) == (None, [], None)


def test_faithfulness_explains_a_capped_number_of_examples_above_the_head_count_rule():
    """Sized by power the report explains 71 examples (the attribution claim's rule); above
    :data:`SCREEN_ABOVE_HEADS` heads :data:`EXPLAINED_AT_SCALE` (integrated gradients through
    SmolLM2's 30 layers need up to 64 steps an example), said on the settings line;
    ``--explained-examples`` still fixes the number at any scale."""
    from probe.app.registry.analyses import faithfulness as F

    sized = {"sized_by_power": True}
    assert F._explained(sized, 72)[0] == 71 and F._explained(sized, 270)[0] == F.EXPLAINED_AT_SCALE == 16
    assert "asks 71" in F._explained(sized, 270)[1]
    assert F._explained({"explain_limit": 40, "sized_by_power": True}, 270)[0] == 40
    line = F.explained_setting(256, sized, 270)
    assert line.startswith("16 of 256 explained, a compute cap above 144 heads"), line
    assert F.explained_setting(256, sized, 72).startswith("71 of 256 explained, as many as the attribution claim")


def test_the_weights_bar_gives_the_null_uniform_weights_on_a_sample_of_the_examples(llama, monkeypatch):
    """The screened path's weights claims: the null model's sampled heads are given uniform
    weights on :data:`NULL_WEIGHT_EXAMPLES` of the examples only (its sweep sees that many), the
    claim's source says so, and the bar is the one the exhaustive null sweep gives on those
    examples: its per-example 95% quantile there, the sampled quantiles' mean elsewhere, the
    Wilcoxon p against that, and the largest sampled head's mean."""
    from probe.analyses.claims import removal, screened_claims
    from probe.analyses.claims.null_model import null_model_for, null_quantile
    from probe.analyses.claims.screened import null_examples
    from probe.analyses.claims.statistics import paired_greater
    from probe.analyses.claims.claim import Claim
    from probe.analyses.common.objective import resolve_objective

    monkeypatch.setattr(screened_claims, "NULL_WEIGHT_HEADS", 4)
    monkeypatch.setattr(screened_claims, "NULL_WEIGHT_EXAMPLES", 5)
    corpus = as_corpus(CORPUS[:12])
    obj, _ = resolve_objective("loss", llama, corpus)
    nad = null_model_for(llama, None, 0)
    heads = [(layer, h) for layer in range(10) for h in range(16)]
    exact = list(STRONG)
    necessity = {h: Claim("necessity", "holds", effect=0.3) for h in exact}
    seen: list = []
    real = removal.removal_sweep
    monkeypatch.setattr(
        removal, "removal_sweep", lambda a, c, *r, **k: (seen.append((a is nad, len(c))), real(a, c, *r, **k))[1]
    )
    claims, _ = screened_claims._weights(
        llama, nad, corpus, obj, heads, exact, necessity, {}, seed=0, runner=None, progress=False
    )
    # the model's heads on every example, the null's on the sample, in two halves (this random
    # null's first half reaches 0.1 × the floor, so the second half runs)
    assert seen == [(False, 12), (True, 5), (True, 5)]
    monkeypatch.setattr(removal, "removal_sweep", real)
    sample = null_examples(12, 5, 0)
    pick = sorted(np.random.default_rng(0).choice(len(heads), 4, replace=False).tolist())
    whole = real(nad, corpus, obj, units=[heads[i] for i in pick], modes=("uniform",)).harm["uniform"]  # [4, 12]
    sampled = null_quantile(whole[:, sample])
    level = np.full(12, sampled.mean())
    level[sample] = sampled
    model = real(llama, corpus, obj, units=exact, modes=("uniform",)).harm["uniform"]
    for i, h in enumerate(exact):
        e = claims[h].extra
        assert "on 5 of the 12 examples" in e["null_source"] and "4 of its heads" in e["null_source"]
        assert e["null_quantile"] == pytest.approx(
            sampled.mean(), rel=1e-4
        )  # batches of other lengths: float32 rounding
        assert e["null_max"] == pytest.approx(whole[:, sample].mean(1).max(), rel=1e-4)
        assert e["p_null"] == pytest.approx(paired_greater(model[i], level), rel=1e-3)
    assert sum(c.status == "not tested" for c in claims.values()) == len(heads) - len(exact)
    assert "drawn not run" not in claims[exact[0]].extra["null_source"]


def test_the_null_uniform_sample_stops_at_half_where_its_harms_are_negligible(llama, monkeypatch):
    """The null's uniform-weights heads run in two halves of the draw: where every harm of
    the first half is within :data:`NULL_WEIGHT_NEGLIGIBLE` × the floor the second is not run,
    the bar is the first half's (its quantiles and largest mean), and the source says so with
    the largest harm; where one is beyond it, both halves run and give the whole draw's rows."""
    from probe.analyses.claims import removal, screened_claims
    from probe.analyses.claims import thresholds as T
    from probe.analyses.claims.null_model import null_model_for
    from probe.analyses.common.objective import resolve_objective

    monkeypatch.setattr(screened_claims, "NULL_WEIGHT_HEADS", 4)
    corpus = as_corpus(CORPUS[:6])
    obj, _ = resolve_objective("loss", llama, corpus)
    nad = null_model_for(llama, None, 0)
    heads = [(layer, h) for layer in range(10) for h in range(16)]
    drawn = np.random.default_rng(0).choice(len(heads), 4, replace=False)
    first = [heads[i] for i in sorted(drawn[:2].tolist())]
    whole = removal.removal_sweep(
        nad, corpus, obj, units=[heads[i] for i in sorted(drawn.tolist())], modes=("uniform",)
    )
    half = removal.removal_sweep(nad, corpus, obj, units=first, modes=("uniform",))
    part = half.harm["uniform"]
    largest = float(part.max())
    floor = T.min_effect(obj.name)

    monkeypatch.setattr(screened_claims, "NULL_WEIGHT_NEGLIGIBLE", 1.001 * largest / floor)  # just within
    ns, n_drawn, got = screened_claims._null_uniform(nad, corpus, obj, heads, 0)
    assert (n_drawn, list(ns.units)) == (4, list(half.units))
    assert got == pytest.approx(largest) and np.allclose(ns.harm["uniform"], part, atol=1e-6)

    monkeypatch.setattr(screened_claims, "NULL_WEIGHT_NEGLIGIBLE", 0.999 * largest / floor)  # just beyond
    ns, n_drawn, _ = screened_claims._null_uniform(nad, corpus, obj, heads, 0)
    assert list(ns.units) == list(whole.units) and np.allclose(ns.harm["uniform"], whole.harm["uniform"], atol=1e-6)

    monkeypatch.setattr(screened_claims, "NULL_WEIGHT_NEGLIGIBLE", 1e6)
    from probe.analyses.claims.claim import Claim

    exact = list(STRONG)
    necessity = {h: Claim("necessity", "holds", effect=0.3) for h in exact}
    claims, _ = screened_claims._weights(
        llama, nad, corpus, obj, heads, exact, necessity, {}, seed=0, runner=None, progress=False
    )
    e = claims[exact[0]].extra
    assert "2 of its heads at random; the other 2 of the 4 drawn not run" in e["null_source"], e["null_source"]
    assert f"the largest {largest:.3g}" in e["null_source"]
    assert e["null_max"] == pytest.approx(part.mean(1).max(), rel=1e-4)


def test_a_null_under_the_floor_on_every_example_never_tests_above_the_floor():
    """Why the null's second half may be skipped: a per-example null at or under the floor
    gives a Wilcoxon p at most the floor test's (the signed-rank statistic counts positive
    Walsh averages, which a lower null only adds to), so ``max(p_floor, p_null)`` is the
    floor's p; checked on continuous harms at the exact (n ≤ 50) and normal sizes."""
    from probe.analyses.claims.statistics import floor_test, paired_greater

    rng = np.random.default_rng(0)
    for n in (6, 32, 64, 200):
        for _ in range(25):
            harm = rng.normal(0.01, 0.02, n)
            null = 0.01 - rng.exponential(0.005, n)  # every example at or under the floor 0.01
            assert paired_greater(harm, null) <= floor_test(harm, 0.01) + 1e-12


def test_the_importance_section_reads_the_screens_gate_gradients(many_heads, tmp_path, monkeypatch):
    """On the screened path the ablation section's screen differentiates the loss at every
    head's output (the mean mode's ``−Σ g·z``), which is Michel et al.'s gate gradient: the
    importance section reads it (its note says so) instead of a forward and backward of its
    own, and gives the values the section computes alone (no ablation section, so no screen),
    to the float rounding that the section's own batch size moves them by."""
    from click.testing import CliRunner

    from probe.analyses.necessity import importance
    from probe.app.cli import main

    ran: list = []
    real = importance.gradient_importance
    monkeypatch.setattr(importance, "gradient_importance", lambda *a, **k: (ran.append(1), real(*a, **k))[1])
    got = {}
    for sections in ("ablation,importance", "importance"):
        out = tmp_path / sections.replace(",", "-")
        args = ["report", "--model", many_heads, "--sections", sections, "--null", "none", "--out", str(out)]
        for text in CORPUS[:12]:
            args += ["--text", text]
        args += ["--max-model-examples", "8"]  # importance on the first 8 of the 12 screened
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 0, r.output
        summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
        got[sections] = next(s for s in summary["sections"] if s["name"] == "importance"), summary["heads"], len(ran)
    (read, heads_read, n_read), (own, heads_own, n_own) = got["ablation,importance"], got["importance"]
    assert n_read == 0 and n_own == 1  # the screen's gradients were read; alone, the section ran its own
    assert any("read from the ablation section's screen" in n for n in read["notes"])
    assert not any("read from the ablation section's screen" in n for n in own["notes"])
    assert read["summary"]["examples"] == own["summary"]["examples"] == 8
    a = np.array([h["facts"]["importance"]["importance"] for h in heads_read], dtype=float)
    b = np.array([h["facts"]["importance"]["importance"] for h in heads_own], dtype=float)
    assert a.shape == (160,) and np.isfinite(b).all() and b.std() > 0.01
    # float rounding: the section's own values move by up to 6e-5 (relative) with its batch size alone
    np.testing.assert_allclose(a, b, rtol=2e-4, atol=0)
    rank = lambda heads: [h["facts"]["importance"]["importance_rank"] for h in heads]  # noqa: E731
    assert rank(heads_read) == rank(heads_own)
