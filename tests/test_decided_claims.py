"""The causal claims decided head by head on the whole corpus (issue 44,
:mod:`probe.analyses.claims.decided`): the report's default path where its model-run
limit would cut the corpus, what summary.json and the notes state, the same claims on
every engine."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from probe.app.cli import main
from probe.analyses.common.objective import resolve_objective


def _report(tmp_path, name: str, args: list) -> dict:
    out = tmp_path / name
    r = CliRunner().invoke(main, ["report", *args, "--sections", "claims", "--out", str(out)])
    assert r.exit_code == 0, r.output
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    return next(s for s in summary["sections"] if s["name"] == "claims")


@pytest.fixture(scope="module")
def cut_claims(tmp_path_factory) -> dict:
    """The claims section of MiniLM's report on the bundled 24 with a model-run limit of 16
    (``--causal auto``, the default; the local engine, which ``--engine auto`` picks here),
    built once: the auto path's test reads it and the Ray test compares its own with it (each
    built it, the same command, ~40–60 s on 2 cores)."""
    args = ["--max-model-examples", "16", "--causal", "auto", "--engine", "local"]
    return _report(tmp_path_factory.mktemp("cut"), "cut", args)


def test_auto_decides_every_head_on_the_whole_corpus_where_the_limit_would_cut_it(tmp_path, cut_claims):
    """MiniLM on the bundled sample (24 sentences) with a model-run limit of 16: the claims
    take the sequential path on all 24 (the similarity structure in blocks, the block test),
    every necessity and weights claim states the examples its head took and why it stopped;
    without the cut (limit 0) the path is the exhaustive one."""
    claims = cut_claims
    causal = claims["summary"]["causal"]
    assert causal["path"] == "sequential" and causal["examples"] == 24 and causal["heads"] == 72
    assert causal["test"] == "normal-mixture e-processes on block means"
    assert causal["removals"] <= causal["exhaustive_removals"] and causal["block"] == 64
    for mode in ("mean", "uniform"):
        s = causal["modes"][mode]
        assert s["necessary"] + s["not_necessary"] + s["undecided"] == 72
        assert 1 <= s["examples_min"] <= s["examples_max"] <= 24
    assert any("decided head by head on all 24 examples" in n for n in claims["notes"])
    assert not any("first 16 of 24" in n for n in claims["notes"])  # no note says the cut it did not take
    # the null model's own heads set the bar (the re-initialised MiniLM's harm the structure
    # little, so the bar is the floor); its removals run on the null model, not the trained one
    for mode in ("mean", "uniform"):
        assert causal["null"][mode]["null_max"] < 0.01 and causal["bars"][mode] == 0.02
    # limit 0 is no limit: the path is chosen from the limit alone (a limit of 0 read as a
    # cut would take the sequential path on these 8 too), so the first 8 sentences show it
    # with a third of the exhaustive removals of all 24
    whole = _report(tmp_path, "whole", ["--limit", "8", "--max-model-examples", "0"])
    assert whole["summary"]["causal"]["path"] == "exhaustive"


def test_sequential_claims_equal_across_engines(tmp_path):
    """zoo:prev-token (16 examples, limit 8, per-example objective: the betting test): the
    stream engine (blocks on its runner, 8 examples kept) gives the local claims."""
    got = {}
    for engine in ("local", "stream"):
        args = ["--model", "zoo:prev-token", "--limit", "16", "--max-model-examples", "8", "--engine", engine]
        args += ["--kept-examples", "8"] if engine == "stream" else []
        got[engine] = _report(tmp_path, engine, args)
    for claims in got.values():
        causal = claims["summary"]["causal"]
        assert causal["path"] == "sequential" and causal["examples"] == 16
        assert causal["test"] == "betting e-processes per example"
    assert got["local"]["summary"]["causal"]["modes"] == got["stream"]["summary"]["causal"]["modes"]
    assert got["local"]["summary"]["counts"] == got["stream"]["summary"]["counts"]


def test_heads_undecided_after_every_example_are_decided_by_the_exhaustive_test():
    """A head the anytime test leaves undecided after every example is tested as the
    exhaustive path tests it (Wilcoxon against the bar, BH counting every head): one well
    above the bar holds, one at the bar does not; a head stopped early is not re-tested."""
    import numpy as np

    from probe.analyses.claims.decided import at_the_end, BlockRecord
    from probe.analyses.necessity.sequential import SequentialResult

    n, m, bar = 40, 5, 0.02
    rng = np.random.default_rng(0)
    rec = BlockRecord(m, n)
    rec.harm[0] = 0.03 + 0.005 * rng.standard_normal(n)  # above the bar on every example
    rec.harm[1] = bar + 0.005 * rng.standard_normal(n)  # at the bar
    rec.harm[2, :8] = 0.2  # stopped after one block
    res = SequentialResult(
        decision=("undecided", "undecided", "necessary", "not necessary", "not necessary"),
        n_used=np.array([n, n, 8, 8, 8]), e_value=np.ones(m), e_against=np.ones(m), mean=np.zeros(m),
        floor=bar, bounds=(), q=0.05, n=n,
    )  # fmt: skip
    end = at_the_end(res, rec, bar, m)
    assert set(end) == {0, 1}
    assert end[0][1] and end[0][0] < 1e-6
    assert not end[1][1]


def test_a_runner_of_this_process_on_another_model_is_refused(minilm):
    """A null model's removals given the run's runner (bound to the trained model) would run
    on the trained model with the null's head means: refused in one line."""
    import pytest

    from probe.analyses.claims.null_model import null_adapter
    from probe.analyses.claims.removal import removal_sweep
    from probe.analyses.necessity.sequential import sequential_necessity
    from probe.errors import InputError
    from probe.runs.blocks import InProcess

    null = null_adapter(minilm, 0, "reinit")
    texts = ["the cat sat on the mat", "a dog ran", "it rains", "we read books", "she sings"]
    with pytest.raises(InputError, match="the runner runs minilm, not minilm \\(null\\)"):
        removal_sweep(
            null,
            texts,
            resolve_objective("embedding-drift", null)[0],
            [(0, 0)],
            modes=("mean",),
            runner=InProcess(minilm),
        )
    with pytest.raises(InputError, match="runner=None"):
        sequential_necessity(
            null,
            texts,
            [(0, 0)],
            floor=0.02,
            objective=resolve_objective("similarity-structure", null)[0],
            runner=InProcess(minilm),
        )


@pytest.fixture(scope="module")
def sequential_report(tmp_path_factory) -> tuple:
    """MiniLM's report of the ablation, claims and faithfulness sections on the bundled 24 with
    a model-run limit of 16 (the sequential path), built once for the two tests that read it
    (each built its own, ~40 s on 2 cores: ablation and claims, ablation and faithfulness):
    ``(summary, removal passes, embed calls)``. Every call of
    :func:`~probe.analyses.necessity.sequential.sequential_removals` is recorded as ``(model,
    the families' modes)``, and every call of :func:`~probe.analyses.explanation.pairs.embed` as
    the count of rows it was given already embedded (``None`` when given none)."""
    import numpy as np

    import probe.analyses.explanation.pairs as P
    import probe.analyses.necessity.sequential as S

    calls, given = [], []
    removals, embed = S.sequential_removals, P.embed

    def counted(adapter, corpus, tests, **kw):
        groups = [isinstance(tuple(t.heads[0])[0], (tuple, list)) for t in tests]  # the redundancy groups' families
        calls.append((adapter.name, tuple(t.mode + (" groups" if g else "") for t, g in zip(tests, groups))))
        return removals(adapter, corpus, tests, **kw)

    def recorded(adapter, texts, pooling, known=None, **kw):
        given.append(None if known is None else np.isfinite(known).all(1).sum())
        return embed(adapter, texts, pooling, known=known, **kw)

    out = tmp_path_factory.mktemp("seq") / "r"
    args = ["report", "--sections", "ablation,claims,faithfulness", "--max-model-examples", "16", "--out", str(out)]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(S, "sequential_removals", counted)
        mp.setattr(P, "embed", recorded)
        r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    return json.loads((out / "summary.json").read_text(encoding="utf-8")), calls, given


def test_the_ablation_section_decides_each_head_and_the_claims_reuse_it(sequential_report):
    """The report's ablation section on the sequential path (MiniLM, bundled 24, limit 16):
    every head mean-ablated on the whole corpus until its necessity is decided, the
    embedding drift measured on the same removals with each head's own count; the claims
    take its removals instead of running them again (the trained model's heads are removed in
    one pass of both deciding modes; the null model's beside it)."""
    summary, calls, _ = sequential_report
    ablation = next(s for s in summary["sections"] if s["name"] == "ablation")
    assert "sequential (each head on random blocks until its necessity is decided)" in ablation["notes"][0]
    assert "24 examples (examples per head 24–24" in ablation["notes"][0]
    assert any(
        n.startswith("the claims' weights test (uniform attention weights; 1728 head × example")
        for n in ablation["notes"]
    )
    # the trained model's heads: one pass of both modes (the ablation section's), not run again by the claims
    mine = [c for c in calls if c[0] == "minilm"]
    assert mine.count(("minilm", ("mean", "uniform"))) == 1 and not any("mean" == m for c in mine[1:] for m in c[1])
    assert calls.count(("minilm (null)", ("mean",))) == 1 and calls.count(("minilm (null)", ("uniform",))) == 1
    # the redundancy groups: the null model's random groups once, the candidate groups in one pass of every size
    claims = next(s for s in summary["sections"] if s["name"] == "claims")
    groups = claims["summary"]["causal"]["redundancy"]
    assert groups["path"] == "sequential" and groups["groups"] >= 1, groups
    assert calls.count(("minilm (null)", ("mean groups",))) == 1
    assert calls.count(("minilm", ("mean groups",) * len(groups["bars"]))) == 1  # a family per group size
    # the heads and groups that hold are confirmed under the other baselines (issue 58): one pass
    # each of one mean and resample, on the trained model only
    assert calls.count(("minilm", ("one-mean", "resample"))) == 1
    assert calls.count(("minilm", ("one-mean groups", "resample groups"))) == 1
    assert len(calls) == 7, calls
    heads = {(h["layer"], h["head"]): h for h in summary["heads"]}
    assert heads[(0, 9)]["claims"]["necessity"]["count"] == 24


def test_probe_ablate_says_when_the_sequential_path_does_not_apply(tmp_path):
    """``probe ablate --causal sequential`` in zero mode (the command's default) cannot
    decide heads: it runs the exhaustive sweep and says so among its notes."""
    out = tmp_path / "a"
    args = ["ablate", "--model", "zoo:prev-token", "--limit", "8", "--causal", "sequential", "--out", str(out)]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert "--causal sequential decides heads only for mean-ablation" in r.output
    assert "this ran the exhaustive sweep" in r.output


def test_an_encoder_decoder_is_decided_on_mean_ablation_and_its_weights_not_tested(tiny_models):
    """A tiny random BART (per-example loss: the betting test): necessity decided on every
    example, the weights claim not tested with the reason (no attention replacement for an
    encoder-decoder), as the exhaustive path says; the note names the bar of the mode run."""
    from probe.analyses.claims.decided import decided_claims
    from probe.analyses.claims.null_model import null_adapter
    from probe.analyses.common.objective import resolve_objective

    adapter = tiny_models["bart"]
    texts = ["the cat sat on the mat", "a dog ran home", "it rains today", "we read the books", "she sings loud"] * 2
    obj, _ = resolve_objective("auto", adapter, texts)
    heads = [(0, 0), (1, 3)]
    nadapter = null_adapter(adapter, 0, "reinit")
    got = decided_claims(adapter, texts, obj, heads, null_adapter=nadapter, null_source="null", block=4, beside=())
    assert set(got.info["modes"]) == {"mean"} and set(got.info["bars"]) == {"mean"}
    assert all(c.status in ("holds", "does not hold") for c in got.necessity.values())
    assert all(c.status == "not tested" and "encoder-decoder" in c.reason for c in got.weights.values())
    assert "(mean) with null" in got.note()


def test_the_decided_runs_clean_embeddings_are_the_similarity_targets(minilm):
    """The ablation section's decided removals keep the clean readouts of the sentences they
    took (a sentence encoder's pooled embeddings): equal to the similarity target's own
    embeddings, so the faithfulness section reuses them (only missing rows run the model) and
    finds the same nearest neighbours."""
    import numpy as np
    import torch

    from probe.analyses.claims.decided import decided_removals
    from probe.analyses.common.objective import resolve_objective
    from probe.analyses.common.pooling import model_pooling
    from probe.analyses.explanation.pairs import embed, similarity_target
    from probe.app.report.bundled import sample_corpus

    corpus = sample_corpus(24)
    obj, _ = resolve_objective("similarity-structure", minilm, corpus)
    run = decided_removals(minilm, corpus, obj, [(0, 9), (3, 1)], block=8)
    assert run.clean is not None and run.clean.shape == (24, minilm.model.config.hidden_size)
    took = ~np.isnan(run.clean).any(1)
    assert took[run.first].all()
    own = embed(minilm, list(corpus.texts), model_pooling(minilm)).numpy()
    np.testing.assert_allclose(run.clean[took], own[took], atol=1e-5)
    partial = run.clean.copy()
    partial[:5] = np.nan  # rows not taken are embedded here
    mixed = embed(minilm, list(corpus.texts), model_pooling(minilm), known=partial).numpy()
    np.testing.assert_allclose(mixed, own, atol=1e-5)
    a = similarity_target(minilm, corpus)[0]
    b = similarity_target(minilm, corpus, known=(run.readout, partial))[0]
    assert a.pair_words == b.pair_words
    torch.testing.assert_close(a.partners, b.partners, atol=1e-5, rtol=0)
    other = similarity_target(minilm, corpus, known=("cls pooling", np.zeros_like(partial)))[0]
    assert other.pair_words == a.pair_words  # another pooling's rows are not taken


def test_the_report_hands_the_decided_pass_embeddings_to_the_similarity_target(sequential_report):
    """In the report (bundled 24, limit 16: the sequential path), the faithfulness section's
    similarity target takes the ablation section's pass's clean embeddings of every sentence:
    the model embeds none of them again."""
    summary, _, given = sequential_report
    assert next(s for s in summary["sections"] if s["name"] == "faithfulness")["status"] == "ran"
    assert given == [24]


@pytest.mark.slow
def test_the_sequential_default_on_ray_equals_local(tmp_path, cut_claims):
    """MiniLM, the bundled 24 with a limit of 16 (the sequential path: the block test, the
    redundancy groups decided too): the same claims, per head and per group, with the blocks
    of the model's removals on two Ray workers as in this process (the null model's stay here)."""
    ray = pytest.importorskip("ray", reason='Ray is an optional extra: pip install -e ".[ray]"')
    got = {"local": cut_claims}  # the same command on the local engine, built once for the module
    try:
        args = ["--max-model-examples", "16", "--engine", "ray", "--workers", "2", "--kept-examples", "8"]
        got["ray"] = _report(tmp_path, "ray", args)
    finally:
        ray.shutdown()
    local, on_ray = (got[e]["summary"]["causal"] for e in ("local", "ray"))
    assert local["path"] == on_ray["path"] == "sequential" and local["redundancy"]["groups"] >= 1
    assert local["modes"] == on_ray["modes"] and local["bars"] == on_ray["bars"]
    assert local["redundancy"]["holds"] == on_ray["redundancy"]["holds"]
    assert (
        local["removals"] == on_ray["removals"] and local["redundancy"]["removals"] == on_ray["redundancy"]["removals"]
    )
    assert got["local"]["summary"]["counts"] == got["ray"]["summary"]["counts"]
