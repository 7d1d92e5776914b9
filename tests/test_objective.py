"""Objectives: the model's own pooling, ``auto`` per model kind, refusals before any forward,
the similarity structure checked against an independent computation on MiniLM."""

from __future__ import annotations

import numpy as np
import pytest

from probe.errors import NotApplicable
import torch

from probe.analyses.common.objective import resolve_objective
from probe.analyses.common.similarity import (
    SimilarityStructure,
    neighbour_changed,
    pairwise_rank_harm,
    row_rank_harm,
)
from probe.analyses.common.pooling import Pooling, model_pooling
from probe.analyses.common.objective import get_metric


@pytest.fixture(scope="module")
def minilm():
    from probe.models.registry import load_model

    return load_model("minilm")


@pytest.fixture(scope="module")
def sample():
    from probe.app.report.bundled import sample_corpus

    return sample_corpus(limit=10)


def test_rank_harm_closed_form():
    rng = np.random.default_rng(0)
    e = rng.normal(size=(6, 5))
    assert np.allclose(row_rank_harm(e, e), 0.0)
    assert pairwise_rank_harm(e, e) == pytest.approx(0.0)
    assert not neighbour_changed(e, e).any()
    # rotating every embedding by one orthogonal matrix keeps every cosine: no harm
    q, _ = np.linalg.qr(rng.normal(size=(5, 5)))
    assert np.allclose(row_rank_harm(e, e @ q), 0.0, atol=1e-12)
    # on a circle, moving one point past its neighbours reorders their rankings
    angles = np.array([0.0, 0.5, 1.0, 1.5, 2.0])
    c = np.stack([np.cos(angles), np.sin(angles)], 1)
    moved = c.copy()
    moved[0] = [np.cos(1.75), np.sin(1.75)]
    h = row_rank_harm(c, moved)
    assert h[0] > 1.0 and np.all(h >= 0) and neighbour_changed(c, moved)[0] == 1.0


def test_minilm_pooling_read_from_its_folder(minilm):
    p = model_pooling(minilm)
    assert p.mode == "mean" and p.normalize
    assert "1_Pooling/config.json" in p.source
    h = torch.arange(12.0).reshape(1, 3, 4)
    mask = torch.tensor([[1, 1, 0]])
    assert torch.allclose(Pooling("mean").pool(h, mask), h[0, :2].mean(0, keepdim=True))
    assert torch.allclose(Pooling("cls").pool(h, mask), h[:, 0])
    assert Pooling("mean").reads(3) == (0, 1, 2) and Pooling("cls").reads(3) == (0,)


def test_auto_is_the_similarity_structure_for_minilm(minilm, sample):
    obj, why = resolve_objective("auto", minilm, sample)
    assert isinstance(obj, SimilarityStructure) and "sentence encoder" in why and "mean pooling" in why


def test_an_objective_that_does_not_fit_is_refused_before_any_forward(minilm, sample, monkeypatch):
    def boom(*a, **k):
        raise AssertionError("the model ran")

    monkeypatch.setattr(minilm.model, "forward", boom)
    with pytest.raises(NotApplicable, match="next-token-loss.*objectives that fit it: .*similarity-structure"):
        resolve_objective("next-token-loss", minilm, sample)
    with pytest.raises(ValueError, match="unknown objective"):
        resolve_objective("bleu", minilm, sample)


@pytest.mark.parametrize(
    "command",
    [
        ["report", "--sections", "claims"],
        ["report"],
        ["claims"],
    ],
)
def test_cli_refuses_an_objective_that_does_not_fit_before_any_forward(command, tmp_path, monkeypatch):
    """``--objective next-token-loss`` on the bundled encoder: one Error line naming what fits,
    exit 1, nothing written, and the model's forward never called (counted on the class)."""
    import transformers
    from click.testing import CliRunner

    from probe.app.cli import main

    calls = []
    real = transformers.BertModel.forward

    def counted(self, *a, **k):
        calls.append(1)
        return real(self, *a, **k)

    monkeypatch.setattr(transformers.BertModel, "forward", counted)
    texts = tmp_path / "s.txt"
    texts.write_text("".join(f"Sentence number {i} is here.\n" for i in range(6)))
    out = tmp_path / "out"
    args = command + ["--model", "minilm", "--file", str(texts), "--objective", "next-token-loss", "--out", str(out)]
    r = CliRunner().invoke(main, args)
    lines = [ln for ln in r.output.splitlines() if ln.startswith("Error:")]
    assert r.exit_code == 1, r.output
    assert len(lines) == 1 and "next-token-loss" in lines[0]
    assert "objectives that fit it: similarity-structure, embedding-drift" in lines[0]
    assert calls == [] and not out.exists()


def test_auto_on_zoo_and_decoder():
    from probe.models.registry import load_model

    zoo = load_model("zoo:prev-token")
    from probe.inputs.corpus import load_corpus

    obj, why = resolve_objective("auto", zoo, load_corpus(model="zoo:prev-token", limit=8))
    assert obj.name == "loss" and "zoo task" in why


def _independent_similarity_harm(minilm, texts, heads, baseline="per-kind"):
    """1 − ρ̂ per sentence (Spearman's r_s and Kendall's τ from scipy, corrected for the corpus's
    size) under mean-ablation with plain transformers forward pre-hooks on the attention output
    projection, mean pooling.

    The mean, written here from its definition (Wang et al. 2022: what the head writes on average
    at that position) and not from the toolkit: ``per-kind`` — one mean per special token
    ([CLS] apart from [SEP]) and one over the content positions (padding never a position);
    ``one`` — one mean over every position; ``pooled`` — words / special tokens pooled ([CLS] and
    [SEP] together: what the toolkit did before issue 58)."""
    from scipy.stats import kendalltau, spearmanr

    model, tok = minilm.model, minilm.tokenizer
    enc = tok(list(texts), padding=True, return_tensors="pt")
    valid = enc["attention_mask"].bool()
    ids = enc["input_ids"]
    kind = torch.zeros_like(ids)  # 0: content
    if baseline == "per-kind":
        kind[(ids == tok.cls_token_id) & valid] = 1
        kind[(ids == tok.sep_token_id) & valid] = 2
    elif baseline == "pooled":
        kind[((ids == tok.cls_token_id) | (ids == tok.sep_token_id)) & valid] = 1
    dh = model.config.hidden_size // model.config.num_attention_heads
    rec = {}

    def pooled():
        with torch.no_grad():
            h = model(**enc).last_hidden_state
        m = enc["attention_mask"].unsqueeze(-1).float()
        return torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=-1).double().numpy()

    dense = [model.encoder.layer[l].attention.output.dense for l in range(model.config.num_hidden_layers)]
    hooks = [
        d.register_forward_pre_hook(lambda m, a, l=l: rec.__setitem__(l, a[0].detach().clone()))
        for l, d in enumerate(dense)
    ]
    clean = pooled()
    for h in hooks:
        h.remove()
    out = {}
    for layer, head in heads:
        z = rec[layer]
        means = torch.stack([z[valid & (kind == k)].mean(0) for k in range(int(kind.max()) + 1)])

        def pre(m, a, layer=layer, head=head, means=means):
            x = a[0].clone()
            sl = slice(head * dh, (head + 1) * dh)
            x[..., sl] = means[kind][..., sl]
            return (x,)

        hook = dense[layer].register_forward_pre_hook(pre)
        try:
            ablated = pooled()
        finally:
            hook.remove()
        c0, c1 = clean @ clean.T, ablated @ ablated.T
        n = len(texts)
        k = n - 1  # each row's others; ρ̂ = ((k + 1) r_s − 3τ) / (k − 2) corrects r_s for k (Kendall & Gibbons)
        rs = np.array([spearmanr(np.delete(c0[i], i), np.delete(c1[i], i)).statistic for i in range(n)])
        tau = np.array([kendalltau(np.delete(c0[i], i), np.delete(c1[i], i)).statistic for i in range(n)])
        out[(layer, head)] = 1 - ((k + 1) * rs - 3 * tau) / (k - 2)
    return out


def test_necessity_effects_equal_an_independent_computation(minilm, sample):
    from probe.analyses.claims.necessity import necessity_claims
    from probe.analyses.claims.removal import removal_sweep

    heads = [(5, 10), (0, 2), (4, 5), (2, 7), (0, 9)]  # L0H9: large at [CLS], small at [SEP] (issue 58)
    sweep = removal_sweep(
        minilm, sample, resolve_objective("similarity-structure", minilm)[0], units=heads, modes=("mean",)
    )
    claims = necessity_claims(sweep)
    ref = _independent_similarity_harm(minilm, sample.texts, heads)
    for i, k in enumerate(heads):
        assert np.allclose(sweep.harm["mean"][i], ref[k], atol=2e-4), k
        assert claims[k].effect == pytest.approx(ref[k].mean(), abs=1e-4)
        assert claims[k].count == len(sample) == 10
    assert claims[(5, 10)].effect > 3 * claims[(0, 2)].effect  # the head the issue found matters most


def test_removal_modes_differ_and_zero_matches_its_definition(minilm, sample):
    from probe.analyses.claims.removal import removal_sweep

    sweep = removal_sweep(
        minilm,
        sample,
        resolve_objective("similarity-structure", minilm)[0],
        units=[(5, 10)],
        modes=("mean", "zero", "resample", "uniform", "random"),
    )
    assert set(sweep.harm) == {"mean", "zero", "resample", "uniform", "random"}
    assert all(np.all(h >= -1e-9) or h.mean() > 0 for h in sweep.harm.values())
    assert not np.allclose(sweep.harm["mean"], sweep.harm["zero"])
    assert sweep.measures["mean"]["neighbour_changed"].shape == (1, 10)


def test_ablation_values_read_from_the_claims_removals_equal_their_own_sweep(minilm, sample):
    """The report's ablation section reads its per-head values from the claims' removal
    sweep (same heads, examples, mode) instead of running the forwards again: the
    embedding drift of a mean-pooled similarity-structure sweep equals the zero-ablation
    sweep of ``embedding-drift`` run on its own."""
    from probe.analyses.claims.removal import derives, removal_sweep, single_head_values
    from probe.analyses.common.objective import resolve_objective
    from probe.analyses.necessity.ablation import sweep_heads

    heads = [(5, 10), (0, 2), (3, 1)]
    obj, _ = resolve_objective("auto", minilm, sample)
    drift, loss = get_metric("embedding-drift", minilm), resolve_objective("loss", None, use="per-example")[0]
    assert derives(obj, drift) and not derives(obj, loss)
    for mode in ("zero", "mean"):
        sweep = removal_sweep(minilm, sample, obj, units=heads, modes=(mode,))
        clean, ablated = single_head_values(sweep, drift, mode)
        own = sweep_heads(minilm, sample, drift, mode, heads)
        assert np.allclose(clean, own.clean, atol=1e-6)
        assert np.allclose(ablated, own.ablated, atol=2e-5), mode
        assert ablated[0].mean() > 0.01  # L5H10 moves the embedding: not a vacuous match


def test_claims_reuse_a_sweep_without_running_its_mode_again(minilm, sample):
    """``removal_sweep(reuse=…)`` takes the modes an earlier sweep of the same heads,
    examples and objective measured (the same harms) and runs only the others: fewer
    model forwards. Another corpus is not reused."""
    from probe.analyses.claims.removal import removal_sweep

    heads = [(5, 10), (1, 3)]
    calls = []
    model = minilm.model
    hook = model.register_forward_pre_hook(lambda m, a: calls.append(1))
    try:
        zero = removal_sweep(
            minilm, sample, resolve_objective("similarity-structure", minilm)[0], units=heads, modes=("zero",)
        )
        calls.clear()
        both = removal_sweep(
            minilm, sample, resolve_objective("similarity-structure", minilm)[0], units=heads, modes=("zero", "mean")
        )
        fresh = len(calls)
        calls.clear()
        reused = removal_sweep(
            minilm,
            sample,
            resolve_objective("similarity-structure", minilm)[0],
            units=heads,
            modes=("zero", "mean"),
            reuse=zero,
        )
        fewer = len(calls)
        other = sample.subset(range(8), reason="test")
        calls.clear()
        removal_sweep(
            minilm,
            other,
            resolve_objective("similarity-structure", minilm)[0],
            units=heads,
            modes=("zero",),
            reuse=zero,
        )
        not_reused = len(calls)
    finally:
        hook.remove()
    assert fewer < fresh and not_reused > 0
    for mode in ("zero", "mean"):
        assert np.allclose(reused.harm[mode], both.harm[mode], atol=1e-6), mode


def test_removal_batches_split_between_workers_give_the_same_harms(minilm, sample):
    """The claims' removal sweep on an engine: the driver makes the plan (objective,
    units, head means), the batches run in blocks elsewhere (here: three blocks, the last
    first, each result pickled as a Ray actor hands it back) and the harms are computed
    from the placed readouts. Every mode, the random ones included (each batch draws from
    its own number), equals the sweep run in one process."""
    import pickle

    from probe.analyses.claims.removal import MODES, removal_sweep

    heads = [(5, 10), (0, 2), (3, 1)]
    seen = []

    def runner(job, batches):  # a runner of probe.runs.blocks: one batch per block, the last first
        starts = list(range(len(batches)))[::-1]
        seen.append(len(starts))
        job = pickle.loads(pickle.dumps(job))  # what a worker receives: the plan travels in the job
        parts = {s: pickle.loads(pickle.dumps(job.run(minilm, batches[s : s + 1], [s]))) for s in starts}
        return [parts[s] for s in sorted(parts)]

    here = removal_sweep(
        minilm, sample, resolve_objective("similarity-structure", minilm)[0], units=heads, batch_size=4
    )
    there = removal_sweep(
        minilm, sample, resolve_objective("similarity-structure", minilm)[0], units=heads, batch_size=4, runner=runner
    )
    assert seen == [3]  # 10 sentences in batches of 4, one block each
    for mode in MODES:
        assert np.allclose(there.harm[mode], here.harm[mode], rtol=0, atol=1e-9), mode
        for k, v in here.measures[mode].items():
            assert np.allclose(there.measures[mode][k], v, rtol=0, atol=1e-9), (mode, k)
    assert here.harm["resample"].std() > 0 and here.harm["random"].mean() > 0  # the random modes really ran
