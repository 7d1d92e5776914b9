"""The head screen (attribution patching) against exact removals, on a model where the
first-order estimate is exact: a 2-layer GPT-2 with no LayerNorms, zero MLPs and a
frozen-softmax second layer (its queries and keys are zero, so its attention is uniform
over the causal prefix whatever its input), read by a linear objective. Every head's
output then enters the logits linearly, so removing it changes the readout by exactly
the gradient times the change of its output."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from probe.analyses.claims.removal import removal_sweep
from probe.analyses.common.metrics import as_corpus
from probe.analyses.common.objective_base import Objective
from probe.analyses.necessity.confirm import confirm_heads, plan_confirmation
from probe.analyses.necessity.screen import HeadScreen, screen_heads
from probe.tracing.edits import Zero
from probe.errors import InputError
from probe.tracing.trace import trace
from probe.analyses.common.objective import resolve_objective

TEXTS = [
    "the cat sat on the mat",
    "a dog ran",
    "birds fly south in the winter months",
    "she reads",
    "we went to the market and bought bread",
    "it rains",
    "the old man and the sea",
    "green ideas sleep furiously",
]


class LinearReadout(Objective):
    """The mask-weighted mean of the last hidden state, projected on a fixed vector
    (``[rows]``), or the mean itself (``vector``: ``[rows, d_model]``)."""

    name = "linear-readout"

    def __init__(self, w: torch.Tensor, vector: bool = False):
        self.w, self.vector = w, vector
        self.stationary_at_clean = vector  # the vector readout is screened by the sketch

    def readout(self, outputs, batch):
        h = outputs.last_hidden_state
        m = batch.inputs["attention_mask"].to(h.dtype)[..., None]
        pooled = (h * m).sum(1) / m.sum(1)
        return pooled if self.vector else pooled @ self.w

    def score(self, outputs, batch, reference=None):
        return self.readout(outputs, batch)


@pytest.fixture(scope="module")
def linear_gpt2(bert_tokenizer):
    import transformers as T

    from probe.models import ModelAdapter

    torch.manual_seed(0)
    cfg = T.GPT2Config(
        n_embd=32,
        n_layer=2,
        n_head=4,
        vocab_size=len(bert_tokenizer),
        pad_token_id=0,
        bos_token_id=101,
        eos_token_id=102,
    )
    model = T.GPT2Model(cfg).eval()
    n = cfg.n_embd
    with torch.no_grad():
        for p in model.parameters():  # weights of order 1, so heads matter
            p.normal_(0.0, 0.3)
        for block in model.h:
            block.ln_1, block.ln_2 = torch.nn.Identity(), torch.nn.Identity()
            for p in block.mlp.parameters():
                p.zero_()
        model.ln_f = torch.nn.Identity()
        attn = model.h[1].attn  # frozen softmax: q = k = 0
        attn.c_attn.weight[:, : 2 * n] = 0
        attn.c_attn.bias[: 2 * n] = 0
    return ModelAdapter(name="linear-gpt2", model=model, tokenizer=bert_tokenizer, family="gpt2")


@pytest.fixture(scope="module")
def w():
    return torch.randn(32, generator=torch.Generator().manual_seed(1))


def test_screen_equals_exact_removal_where_first_order_is_exact(linear_gpt2, w):
    obj = LinearReadout(w)
    screen = screen_heads(linear_gpt2, TEXTS, obj, batch_size=3, seed=4)
    sweep = removal_sweep(linear_gpt2, TEXTS, obj, modes=("mean", "zero", "resample"), batch_size=3, seed=4)
    assert screen.kind == "first-order"
    for mode in ("mean", "zero", "resample"):
        exact = sweep.harm[mode]  # [units, n]
        est = screen.estimate[mode].reshape(len(TEXTS), -1).T  # [L·H, n]
        assert np.abs(exact).max() > 1e-3  # the heads do matter
        np.testing.assert_allclose(est, exact, rtol=1e-3, atol=1e-4 * np.abs(exact).max())
        np.testing.assert_allclose(screen.mean(mode), exact.mean(1), rtol=1e-3, atol=1e-5)


def test_screen_is_first_order_only_on_a_nonlinear_model(tiny_models, w):
    """On a random GPT-2 (LayerNorms, MLPs, softmax) the estimate is not the exact harm:
    the equality above is a property of the model, not of the comparison."""
    a = tiny_models["gpt2"]
    obj = LinearReadout(w)
    screen = screen_heads(a, TEXTS[:4], obj, modes=("zero",), batch_size=4)
    exact = removal_sweep(a, TEXTS[:4], obj, modes=("zero",), batch_size=4).harm["zero"]
    est = screen.estimate["zero"].reshape(4, -1).T
    assert np.abs(est - exact).max() > 1e-3 * np.abs(exact).max()
    assert np.corrcoef(est.ravel(), exact.ravel())[0, 1] > 0.5  # first order still ranks


def test_sketch_estimates_the_linearised_change_of_the_normalised_readout(linear_gpt2, w):
    """``readout-sketch``: the mean of ``(uᵀ J Δz)²`` over projections is ``‖J Δz‖²`` of the
    unit-normalised readout, computed here from exact zero-removals of the linear model
    (the change ``ΔR`` is exact; normalising is linearised by hand: ``(I − R̂R̂ᵀ) ΔR / ‖R‖``)."""
    obj = LinearReadout(w, vector=True)
    texts = TEXTS[:4]
    screen = screen_heads(linear_gpt2, texts, obj, modes=("zero",), n_projections=64, batch_size=4)
    assert screen.kind == "readout-sketch" and screen.n_projections == 64
    batch = obj.make_batch(linear_gpt2, as_corpus(texts), range(4))

    def readout(edit=None):
        with torch.no_grad():
            out = trace(linear_gpt2, batch.inputs, edit=edit).output
        return obj.readout(out, batch).double()

    clean = readout()
    norm = clean.norm(dim=-1, keepdim=True)
    unit = clean / norm
    for layer in range(2):
        for h in range(4):
            d = readout({f"blocks.{layer}.attn.hook_z": Zero(head=h)}) - clean
            tangent = (d - (d * unit).sum(-1, keepdim=True) * unit) / norm
            want = (tangent**2).sum(-1).numpy()  # [4]
            got = screen.estimate["zero"][:, layer, h]
            # relative sd of a mean of k squared Gaussians: √(2/k), 18% per example, 9% over 4
            np.testing.assert_allclose(got, want, rtol=0.7)
            assert got.mean() == pytest.approx(want.mean(), rel=0.35)


def test_screen_refuses_bad_settings(linear_gpt2, w):
    with pytest.raises(InputError, match="unknown screen mode"):
        screen_heads(linear_gpt2, TEXTS, LinearReadout(w), modes=("uniform",))
    with pytest.raises(InputError, match="n_projections"):
        screen_heads(linear_gpt2, TEXTS, LinearReadout(w), n_projections=0)
    with pytest.raises(InputError, match="needs a model with logits"):
        screen_heads(linear_gpt2, TEXTS[:4], LinearReadout(w), kind="output-sketch", modes=("zero",))
    with pytest.raises(InputError, match="one number per example"):
        screen_heads(linear_gpt2, TEXTS[:4], LinearReadout(w, vector=True), kind="first-order", modes=("zero",))


def test_upper_bound_and_frame():
    est = np.zeros((4, 1, 2))
    est[:, 0, 0] = [1.0, 2.0, 3.0, 4.0]
    s = HeadScreen(estimate={"mean": est}, kind="first-order", objective="x", n=4)
    se = np.std([1, 2, 3, 4], ddof=1) / 2
    np.testing.assert_allclose(s.upper("mean", z=2.0), [2.5 + 2 * se, 0.0])
    np.testing.assert_allclose(s.upper("mean", z=0.0, slack=0.5), [3.75, 0.0])
    assert s.to_frame().shape == (2, 5) and s.heads == [(0, 0), (0, 1)]


def test_confirm_calls_necessary_only_what_it_removed_exactly(linear_gpt2, w):
    obj = LinearReadout(w)
    screen = screen_heads(linear_gpt2, TEXTS, obj, modes=("mean",), batch_size=4)
    top = np.sort(screen.mean("mean"))
    floor = float(top[-3] + top[-4]) / 2  # three heads reach it
    plan = plan_confirmation(screen.upper("mean", z=0.0), floor, audit=0.0, min_audit=2, seed=0)
    assert len(plan.confirm) == 3 and len(plan.audit) == 2
    assert not set(plan.audit) & set(plan.confirm)
    conf = confirm_heads(linear_gpt2, TEXTS, screen.heads, plan, objective=obj, mode="mean", floor=floor, batch_size=4)
    assert set(conf.necessary) <= set(plan.confirm) | set(plan.audit)
    assert set(conf.necessary) == set(plan.confirm)  # exact = screened on this model, so no misses
    assert conf.misses == () and conf.miss_rate == 0.0
    sweep = removal_sweep(
        linear_gpt2, TEXTS, obj, [screen.heads[i] for i in plan.confirm], modes=("mean",), batch_size=4
    )
    for j, i in enumerate(plan.confirm):
        np.testing.assert_allclose(conf.exact[i], sweep.harm["mean"][j])
    assert conf.summary()["audited"] == 2


def test_sequential_necessity_runs_the_exact_removals_of_the_sweep(linear_gpt2, w):
    """On the live model: with a level no 8 sentences can reach, every head takes every
    sentence (in shuffled blocks), and its mean harm is the exact sweep's."""
    from probe.analyses.necessity.sequential import sequential_necessity

    obj = LinearReadout(w)
    heads = [(0, 1), (1, 2), (1, 3)]
    exact = removal_sweep(linear_gpt2, TEXTS, obj, heads, modes=("mean",), batch_size=3).harm["mean"]
    big = float(np.abs(exact).max()) * 2
    r = sequential_necessity(
        linear_gpt2, TEXTS, heads, floor=0.0, bounds=(-big, big), objective=obj, q=1e-6, block=3, batch_size=3
    )
    assert r.decision == ("undecided",) * 3 and (r.n_used == len(TEXTS)).all()
    np.testing.assert_allclose(r.mean, exact.mean(1), rtol=1e-5, atol=1e-7)


def test_zoo_induction_output_sketch_finds_the_previous_token_head_where_first_order_cannot():
    """zoo:induction (Olsson et al. 2022; docs/zoo.md): removing the previous-token head
    L0H3 destroys copying, so its exact harm is nats, while the saturated loss (≈ 0) leaves
    first-order AtP with nothing (the failure docs/screening.md reports); the output
    sketch puts L0H3 first."""
    from probe.inputs.corpus import load_corpus
    from probe.models import load_model

    a = load_model("zoo:induction")
    corpus = load_corpus(model="zoo:induction", limit=16)
    first = screen_heads(a, corpus, resolve_objective("auto", a, corpus)[0], modes=("mean",))
    sketch = screen_heads(
        a, corpus, resolve_objective("auto", a, corpus)[0], modes=("mean",), kind="output-sketch", n_projections=4
    )
    assert first.kind == "first-order" and np.abs(first.mean("mean")).max() < 0.05
    exact = (
        removal_sweep(a, corpus, resolve_objective("auto", a, corpus)[0], [(0, 3)], modes=("mean",)).harm["mean"].mean()
    )
    assert exact > 1.0
    assert sketch.heads[int(np.argmax(sketch.mean("mean")))] == (0, 3)


@pytest.mark.slow
def test_minilm_readout_sketch_ranks_heads_as_the_exact_similarity_harm(minilm):
    """The bundled model on 8 bundled sentences, its default objective (the similarity
    structure: no gradient at the clean model): the sketch's ranking of the 72 heads
    follows the exact zero-removal harms (ρ 0.69 when written; a random ranking has
    sd 0.12; on 24 sentences the benchmark gives 0.95)."""
    from scipy.stats import spearmanr

    from probe.app.report.bundled import sample_corpus

    corpus = sample_corpus(8)
    screen = screen_heads(
        minilm, corpus, resolve_objective("auto", minilm, corpus)[0], modes=("zero",), n_projections=4
    )
    exact = (
        removal_sweep(minilm, corpus, resolve_objective("auto", minilm, corpus)[0], modes=("zero",))
        .harm["zero"]
        .mean(1)
    )
    assert screen.kind == "readout-sketch"
    assert spearmanr(screen.mean("zero"), exact).statistic > 0.5


def test_screen_on_a_runner_of_blocks_equals_one_process(linear_gpt2, w):
    """The screen's batches as jobs (what Ray's actors run): split into blocks any way,
    the estimates are this process's, also for the random parts (resample sources,
    projections), which each batch draws from its own number."""

    def split(job, items):
        items = list(items)
        return [job.run(linear_gpt2, items[:1], [0]), job.run(linear_gpt2, items[1:], list(range(1, len(items))))]

    for obj in (LinearReadout(w), LinearReadout(w, vector=True)):
        one = screen_heads(linear_gpt2, TEXTS, obj, modes=("mean", "resample"), batch_size=3, n_projections=2)
        blocks = screen_heads(
            linear_gpt2, TEXTS, obj, modes=("mean", "resample"), batch_size=3, n_projections=2, runner=split
        )
        for mode in ("mean", "resample"):
            assert np.abs(one.estimate[mode]).max() > 0
            np.testing.assert_array_equal(one.estimate[mode], blocks.estimate[mode])


#: more sentences for the claims' tests (the betting test needs a few blocks to decide)
MANY = [f"{a} {b} {c}" for a in TEXTS for b in TEXTS[:4] for c in TEXTS[:3]]  # 96


def _exhaustive_verdicts(adapter, texts, obj, heads):
    from probe.analyses.claims.necessity import necessity_claims

    sweep = removal_sweep(adapter, texts, obj, heads, modes=("mean",), batch_size=8)
    return sweep, {k: c.holds for k, c in necessity_claims(sweep).items()}


@pytest.fixture(scope="module")
def floor_at_minus_3():
    """Mean-ablation harms of a linear readout average to about 0 over a corpus (the
    replacement is the corpus mean), so the tests put the floor at -1.5: the heads' mean harms
    on :data:`MANY` under per-kind means (the first position, [CLS] and [SEP] apart) run from
    -2.04 to 0.15, one under it, seven over it (with [CLS] and [SEP] pooled: -3.4 to 0.15)."""
    from probe.analyses.claims import thresholds as T

    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(T.MIN_EFFECT, "linear-readout", -1.5)
        yield


HEADS = [(layer, h) for layer in range(2) for h in range(4)]


@pytest.fixture(scope="module")
def exhaustive(linear_gpt2, w, floor_at_minus_3):
    return _exhaustive_verdicts(linear_gpt2, MANY, LinearReadout(w), HEADS)


def test_screened_necessity_verdicts_equal_the_exhaustive_ones(linear_gpt2, w, exhaustive):
    """The linear model (first-order = exact): the screened path (screen all, confirm what
    reaches the floor, blocks until the betting test decides, e-BH) calls necessary
    exactly the heads the exhaustive path does; some heads stop before the corpus ends,
    and a head that used every example has the sweep's mean harm."""
    from probe.analyses.claims.screened import screened_necessity

    obj = LinearReadout(w)
    sweep, want = exhaustive
    assert 0 < sum(want.values()) < len(HEADS)
    got = screened_necessity(linear_gpt2, as_corpus(MANY), obj, HEADS, batch_size=8, min_top=0, min_audit=2, block=32)
    assert {k: c.holds for k, c in got.claims.items()} == want
    used = got.info["examples_per_head"]
    assert got.info["examples_screened"] == len(MANY) and got.info["exact_removals"] < len(HEADS) * len(MANY)
    # stopped when decided: under per-kind means the one floor that splits the heads sits within
    # 0.7–1.3 of seven of them (per-example spread 0.9–4.1), so 3 of 8 stop early (4 with the
    # pooled means and the floor at -3, 2.8 from most heads)
    assert sum(k < len(MANY) for k in used.values()) >= 3
    for i, (layer, h) in enumerate(HEADS):
        c = got.claims[(layer, h)]
        assert c.count == used[f"L{layer}H{h}"]
        if c.count == len(MANY):
            assert c.effect == pytest.approx(sweep.harm["mean"][i].mean(), rel=1e-5, abs=1e-6)


def test_the_decide_step_floors_each_heads_block_variance_by_its_screened_spread(linear_gpt2, w, monkeypatch):
    """The block test's variance of each exactly removed head is at least the first-order
    screen's per-example spread of that head over every example (a block that holds none of a
    skewed head's rare large harms would read its variance low exactly when its mean is), in
    blocks of :data:`SCREENED_BLOCK` by default; the decision says so."""
    from probe.analyses.claims import screened as screened_mod
    from probe.analyses.claims import thresholds as T
    from probe.analyses.necessity import sequential

    monkeypatch.setitem(T.MIN_EFFECT, "linear-readout", 0.1)  # a positive bar: the block test (a bar ≤ 0 bets)
    seen: list = []
    real = sequential.sequential_necessity
    monkeypatch.setattr(sequential, "sequential_necessity", lambda *a, **k: (seen.append(k), real(*a, **k))[1])
    got = screened_mod.screened_necessity(
        linear_gpt2, as_corpus(MANY), LinearReadout(w), HEADS, batch_size=8, min_top=0, min_audit=2, test="mixture"
    )
    assert len(seen) == 1 and seen[0]["block"] == screened_mod.SCREENED_BLOCK == 32
    exact = got.table[got.table.role != "screened out"]
    assert len(exact) > 0
    index = {tuple(h): i for i, h in enumerate(got.screen.heads)}
    est = got.screen.estimate["mean"].reshape(len(MANY), -1)
    want = [est[:, index[(int(r.layer), int(r.head))]].var(ddof=1) for r in exact.itertuples()]
    assert np.asarray(seen[0]["spread"]) == pytest.approx(want, rel=1e-12)
    assert "at least the screen's spread" in got.info["decision"]


def test_a_head_the_screen_rules_out_is_never_necessary_and_the_audit_bounds_the_misses(
    linear_gpt2, w, floor_at_minus_3, exhaustive, monkeypatch
):
    """A screen that wrongly rules out two heads the exhaustive path calls necessary
    (their estimates pushed under the floor, the upper bound without slack): one ruled-out
    head is audited, removed exactly and decided by it (a miss when it holds, counted in
    the Clopper–Pearson bound); the others, never removed, do not hold and read "not
    necessary (screened out)" with that bound, although the exhaustive path calls one of
    them necessary."""
    from probe.analyses.claims.evidence import claim_evidence
    from probe.analyses.claims.necessity import add_importance
    from probe.analyses.claims.plain import plain_sentence
    from probe.analyses.claims.screened import SCREENED_OUT, screened_necessity
    from probe.analyses.necessity import screen as screen_mod
    from probe.analyses.necessity.confirm import miss_rate_bound

    real = screen_mod.screen_heads

    def wrong(*a, **k):
        s = real(*a, **k)
        s.estimate["mean"][:, 1, 2:] = -8.0  # L1H2, L1H3
        return s

    monkeypatch.setattr(screen_mod, "screen_heads", wrong)
    obj = LinearReadout(w)
    _, want = exhaustive
    assert want[(1, 2)] and want[(1, 3)]
    got = screened_necessity(
        linear_gpt2, as_corpus(MANY), obj, HEADS, batch_size=8, min_top=0, audit=0.0, min_audit=1, block=32, slack=0.0
    )
    roles = dict(zip(zip(got.table["layer"], got.table["head"]), got.table["role"]))
    audited = [k for k, r in roles.items() if r == "audited"]
    out = [k for k, r in roles.items() if r == "screened out"]
    assert len(audited) == 1 and {(1, 2), (1, 3)} <= set(audited + out)
    misses = [k for k in audited if got.claims[k].holds]
    assert misses == [k for k in audited if want[k]]  # the exact removal decides an audited head
    for k in out:
        c = got.claims[k]
        assert not c.holds and c.statement == SCREENED_OUT and f"{miss_rate_bound(1, len(misses)):.1%}" in c.reason
    assert any(want[k] for k in out)  # the exhaustive path calls it necessary; never removed, it is not
    # what a head page says of it: the screen's estimate and bound, never an empty exact-removal sentence,
    # and no rank by a harm it never had (only the exactly removed heads are ranked, among themselves)
    claims = add_importance(dict(got.claims))
    for k in out:
        c, ev = claims[k], claim_evidence("necessity", claims[k])
        assert ev.text.startswith("never removed exactly") and "—" not in ev.text and "None" not in ev.text, ev.text
        assert f"{c.extra['screened_estimate']:+.3g}" in ev.text and f"{c.extra['screened_upper']:.3g}" in ev.text
        assert f"{miss_rate_bound(1, len(misses)):.1%} (95%)" in ev.text and "rank" not in ev.text
        assert ev.numbers["screened_upper"] == c.extra["screened_upper"] and "audit" in ev.test
        assert "not removed exactly" in plain_sentence("necessity", c)  # the claims table's sentence
    ranks = sorted(claims[k].extra["removal_rank"] for k in audited + [k for k, r in roles.items() if r == "confirmed"])
    assert ranks == list(range(1, len(ranks) + 1)) and all(claims[k].extra["of"] == len(ranks) for k in audited)
    assert got.info["audit_misses"] == len(misses)
    assert got.info["miss_rate_upper"] == miss_rate_bound(1, len(misses))
    assert got.info["screened_out"] == len(out) and "screened out" in got.note()


def test_screened_necessity_on_a_runner_of_blocks_equals_one_process(linear_gpt2, w, floor_at_minus_3):
    """Every batch of the screened path (means, screen, exact blocks) runs on the runner:
    split in two blocks, as an engine's workers would, the claims are this process's."""
    from probe.analyses.claims.screened import screened_necessity

    def split(job, items):
        items = list(items)
        return [job.run(linear_gpt2, items[:1], [0]), job.run(linear_gpt2, items[1:], list(range(1, len(items))))]

    obj, texts = LinearReadout(w), as_corpus(MANY[:32])
    kw = dict(batch_size=8, min_top=0, min_audit=2, block=16)
    one = screened_necessity(linear_gpt2, texts, obj, HEADS, **kw)
    two = screened_necessity(linear_gpt2, texts, obj, HEADS, runner=split, **kw)
    assert one.info["examples_per_head"] == two.info["examples_per_head"]
    for k, c in one.claims.items():
        assert (c.status, c.count) == (two.claims[k].status, two.claims[k].count)
        assert c.effect == pytest.approx(two.claims[k].effect, rel=1e-6, abs=1e-9)


def test_screened_necessity_on_a_corpus_level_objective_is_the_exhaustive_test(tiny_models):
    """The similarity structure (corpus-level: every sentence compared with every other) on a
    tiny BERT: the confirmed heads are removed on every sentence, so with every head
    confirmed (``min_top`` = all) their claims are the exhaustive path's own, number for
    number; with 2 confirmed, the six others are screened out and BH counts all eight."""
    from probe.analyses.claims.necessity import necessity_claims
    from probe.analyses.claims.screened import SCREENED_OUT, screened_necessity
    from probe.analyses.common.objective import resolve_objective

    a, corpus = tiny_models["bert"], as_corpus(TEXTS)
    obj, _ = resolve_objective("similarity-structure", a, corpus)
    want = necessity_claims(removal_sweep(a, corpus, obj, HEADS, modes=("mean",)))
    every = screened_necessity(a, corpus, obj, HEADS, min_top=len(HEADS), min_audit=0)
    assert every.info["screen"] == "readout-sketch" and every.info["confirmed"] == len(HEADS)
    for k, c in want.items():
        got = every.claims[k]
        assert (got.status, got.count) == (c.status, c.count)
        assert got.effect == pytest.approx(c.effect, rel=1e-6) and got.extra["p"] == pytest.approx(c.extra["p"])
    two = screened_necessity(a, corpus, obj, HEADS, min_top=2, top_share=0.0, min_audit=0)
    out = [k for k, c in two.claims.items() if c.statement == SCREENED_OUT]
    assert two.info["confirmed"] >= 2 and len(out) == len(HEADS) - two.info["confirmed"]
    assert all(c.extra["tests"] == len(HEADS) for k, c in two.claims.items() if k not in out)


def test_a_head_a_sketch_ruled_out_is_not_said_to_be_under_the_bar():
    """A sketch's score ranks heads (a squared change of the readout) and the plan confirms its
    top heads; no upper bound of a harm is compared with the bar. The words of a head it ruled
    out say so, where a first-order screen's say the estimate and the bound under the bar; the
    claim's reason and its evidence are the same sentence."""
    from probe.analyses.claims.evidence import claim_evidence
    from probe.analyses.claims.screened import _screened_out

    sketch = _screened_out(0.02, 0.01, 40, 0.3, 0.95, 0.05, "cosine", "readout-sketch")
    text = claim_evidence("necessity", sketch).text
    assert text.startswith("never removed exactly: the readout-sketch screen over all 40 examples ranks it below")
    assert "attribution patching" not in text and "under the bar" not in text and "30.0% (95%)" in text
    assert text == sketch.reason and "readout-sketch screen" in claim_evidence("necessity", sketch).test
    first = _screened_out(0.02, 0.01, 40, 0.3, 0.95, 0.05, "cosine", "first-order")
    words = claim_evidence("necessity", first).text
    assert "attribution patching" in words and "+0.01 (cosine), its upper bound 0.02 under the bar 0.05" in words


def test_report_causal_screened_states_the_path_and_equals_across_engines(tmp_path):
    """``probe report --causal screened`` on zoo:prev-token (16 examples, the model-run cap at
    8): the necessity claims are screened on all 16 and summary.json says so (path,
    examples, each removed head's examples, the audit's bound); the stream engine (its
    batches on the engine's runner, 8 examples kept) gives the same claims."""
    import json

    from click.testing import CliRunner

    from probe.app.cli import main

    got = {}
    for engine in ("local", "stream"):
        out = tmp_path / engine
        args = ["report", "--model", "zoo:prev-token", "--limit", "16", "--sections", "claims", "--causal", "screened"]
        args += ["--max-model-examples", "8", "--engine", engine, "--out", str(out)]
        args += ["--kept-examples", "8"] if engine == "stream" else []
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 0, r.output
        got[engine] = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    for summary in got.values():
        claims = next(s for s in summary["sections"] if s["name"] == "claims")
        causal = claims["summary"]["causal"]
        assert causal["path"] == "screened" and causal["examples_screened"] == 16
        assert set(causal["examples_per_head"].values()) <= set(range(1, 17)) and "miss_rate_upper" in causal
        assert any("necessity by screening on all 16 examples" in n for n in claims["notes"])
    necessity = [
        [(h["layer"], h["head"], h["claims"]["necessity"]["status"]) for h in s["heads"]] for s in got.values()
    ]
    assert necessity[0] == necessity[1]


def test_pilot_flags_heads_whose_exact_pilot_harm_could_reach_the_floor():
    """``mean + 2·stderr + slack·|mean| >= floor``: a head far under the floor is not flagged,
    one whose mean is under it but whose interval reaches it is, a NaN head is."""
    from probe.analyses.claims.screened import pilot_flags

    harm = np.array(
        [
            [0.0, 0.001, -0.001, 0.0],  # mean 0, tight: ruled out
            [0.0, 0.02, 0.0, 0.02],  # mean 0.01, stderr 0.0058: upper 0.0265 reaches 0.02
            [0.05, 0.05, 0.05, 0.05],  # over the floor
            [np.nan, 0.0, 0.0, 0.0],
        ]
    )
    flags, upper = pilot_flags(harm, 0.02, slack=0.0)
    assert flags.tolist() == [False, True, True, True]
    assert upper[1] == pytest.approx(0.01 + 2 * np.std([0, 0.02, 0, 0.02], ddof=1) / 2)
    assert not pilot_flags(harm[:2], 0.03, slack=0.0)[0].any()  # the same heads against a higher floor


def test_the_exact_pilot_confirms_a_head_the_sketch_ranks_last(tiny_models, monkeypatch):
    """A sketch screen that ranks the head of largest harm last (MiniLM's L0H9 case,
    docs/screening.md), the floor just under its harm: without the pilot the two confirmed
    heads are under the floor, the confirmations stop and never reach it (screened out);
    with the pilot (every head removed exactly on half the sentences) its pilot harm
    could reach the floor, it is confirmed first, and its claim is the exhaustive path's,
    number for number."""
    from probe.analyses.claims import thresholds as T
    from probe.analyses.claims.necessity import necessity_claims
    from probe.analyses.claims.screened import SCREENED_OUT, screened_necessity
    from probe.analyses.common.objective import resolve_objective
    from probe.analyses.necessity import screen as screen_mod

    a, corpus = tiny_models["bert"], as_corpus(MANY[::2])
    obj, _ = resolve_objective("similarity-structure", a, corpus)
    want = necessity_claims(removal_sweep(a, corpus, obj, HEADS, modes=("mean",)))
    harms = {k: c.effect for k, c in want.items()}
    top = max(harms, key=harms.get)
    monkeypatch.setitem(T.MIN_EFFECT, obj.name, 0.95 * harms[top])  # under the largest head alone
    want = necessity_claims(removal_sweep(a, corpus, obj, HEADS, modes=("mean",)))
    real = screen_mod.screen_heads

    def wrong(*args, **kw):  # ranks the heads by their exact harm, but the largest last
        s = real(*args, **kw)
        for (layer, h), harm in harms.items():
            s.estimate["mean"][:, layer, h] = -1.0 if (layer, h) == top else harm
        return s

    monkeypatch.setattr(screen_mod, "screen_heads", wrong)
    kw = dict(min_top=2, top_share=0.0, min_audit=0, audit=0.0, slack=0.0)
    without = screened_necessity(a, corpus, obj, HEADS, pilot=0, **kw)
    assert without.claims[top].statement == SCREENED_OUT and not without.claims[top].holds
    got = screened_necessity(a, corpus, obj, HEADS, pilot=len(corpus) // 2, **kw)
    assert got.info["pilot"] == {"examples": len(corpus) // 2, "flagged": got.info["pilot"]["flagged"]}
    assert got.info["pilot"]["flagged"] >= 1 and f"pilot of {len(corpus) // 2} random examples" in got.note()
    c = got.claims[top]  # removed exactly on every sentence: the exhaustive path's claim
    assert c.statement != SCREENED_OUT and c.count == len(corpus) and c.status == want[top].status
    assert c.effect == pytest.approx(want[top].effect, rel=1e-6) and c.extra["screen_role"] == "confirmed"
    assert got.info["exact_removals"] >= len(HEADS) * (len(corpus) // 2)  # the pilot's removals counted


def test_graddrop_is_the_direct_effect_on_the_linear_model(linear_gpt2, w):
    """AtP*'s GradDrop (Kramár et al. 2024) on the linear GPT-2 (additive layers ``y = x + f(x)``):
    dropping the gradient through layer 1's contribution leaves a layer-0 head its direct path
    alone, and dropping layer 0's leaves a layer-1 head all of its effect, so with L = 2 the
    estimate is ``|direct effect|`` for a layer-0 head (checked against an exact removal with
    layer 1's contribution held at its clean value, example by example) and ``|AtP|`` for a
    layer-1 head; a sketch screen refuses it."""
    from probe.analyses.necessity.ablation import position_kind_means
    from probe.models.sites import Site
    from probe.tracing.edits import Apply
    from probe.tracing.trace_context import Trace

    a, obj, corpus = linear_gpt2, LinearReadout(w), as_corpus(TEXTS)
    st = a.default_stack
    means = position_kind_means(a, corpus, obj, 8, st)
    scr = screen_heads(a, corpus, obj, modes=("mean",), means=means, graddrop=True)
    gd, atp = scr.graddrop["mean"], scr.estimate["mean"]
    np.testing.assert_allclose(gd[:, 1], np.abs(atp[:, 1]), rtol=1e-4, atol=1e-6)
    direct = np.zeros((len(corpus), 4))
    for i in range(len(corpus)):
        batch = obj.make_batch(a, corpus, [i])
        with torch.no_grad(), Trace(a, read=[Site("resid_pre", 1, st), Site("resid_post", 1, st)], stack=st) as tr:
            clean = obj.readout(obj.forward(a, batch), batch)
        layer_1 = tr.cache["resid_post", 1, st] - tr.cache["resid_pre", 1, st]  # f(x) of the clean run
        r = means.at(0, batch)
        for h in range(4):
            held: dict = {}

            def patch(z, ctx, h=h, r=r):
                z = z.clone()
                z[:, :, h] = r[:, :, h].to(z.dtype)
                return z

            def keep(x, ctx, held=held):
                held["x"] = x

            def direct_only(y, ctx, held=held, f=layer_1):  # layer 1 adds its clean contribution
                return held["x"] + f

            edit = {
                Site("z", 0, st): Apply(patch, in_place=False),
                Site("resid_pre", 1, st): Apply(keep, in_place=False),
                Site("resid_post", 1, st): Apply(direct_only, in_place=False),
            }
            with torch.no_grad(), Trace(a, edit=edit, stack=st):
                direct[i, h] = float(obj.readout(obj.forward(a, batch), batch) - clean)
    assert np.abs(direct).max() > 1e-2  # the heads' direct paths carry an effect
    np.testing.assert_allclose(gd[:, 0], np.abs(direct), rtol=1e-3, atol=1e-5)
    assert not np.allclose(gd[:, 0], np.abs(atp[:, 0]), atol=1e-3)  # the path through layer 1 is not in it
    with pytest.raises(InputError, match="GradDrop"):
        screen_heads(a, corpus, LinearReadout(w, vector=True), modes=("mean",), graddrop=True)


def test_the_null_removed_on_a_sample_sets_the_bar_from_that_sample(linear_gpt2, w, floor_at_minus_3):
    """``null_sample``: the null model's heads are removed on a random sample of the examples
    only (the report's 64: the bar is a mean over examples and the largest head's mean, so a
    sample estimates it); the bar the plan confirms at is :func:`head_bar` of the null's
    harms on exactly those examples, computed here by an independent sweep of the sample."""
    from probe.analyses.claims.necessity import head_bar
    from probe.analyses.claims.null_model import null_adapter, null_quantile
    from probe.analyses.claims.screened import null_examples, screened_necessity

    obj, nad, corpus = LinearReadout(w), null_adapter(linear_gpt2, seed=0, kind="permute"), as_corpus(MANY)
    kw = dict(null_adapter=nad, batch_size=8, min_top=0, min_audit=2, block=32, null_top=len(HEADS))
    got = screened_necessity(linear_gpt2, corpus, obj, HEADS, null_sample=24, **kw)
    sample = null_examples(len(MANY), 24, 0)
    assert got.info["null"]["examples"] == 24 and len(sample) == 24 and sample != list(range(24))
    sub = corpus.subset(sample, reason="test")
    harm = removal_sweep(nad, sub, obj, HEADS, modes=("mean",), batch_size=8).harm["mean"]  # [heads, 24]
    from probe.analyses.claims import thresholds as T

    bar, _ = head_bar(T.min_effect(obj.name), null_quantile(harm), float(harm.mean(1).max()))
    assert got.info["confirmed_at"] == pytest.approx(bar, rel=1e-6)
    whole = screened_necessity(linear_gpt2, corpus, obj, HEADS, **kw)  # every example: another bar
    assert whole.info["null"]["examples"] == len(MANY) and whole.info["confirmed_at"] != pytest.approx(bar)


def test_a_null_removed_on_some_examples_gives_the_others_its_mean_level():
    """The exhaustive test of a head still undecided at the end pairs each example's harm with
    the null's quantile there; where the null was not removed (NaN) the example takes the mean
    of the measured quantiles, and the largest null head's mean ignores the gaps."""
    from types import SimpleNamespace

    from probe.analyses.claims.necessity import NullSweep, _null_side

    harm = np.array([[1.0, np.nan, 3.0, np.nan], [2.0, np.nan, 5.0, np.nan]])
    quantiles, null_max, source = _null_side(NullSweep(SimpleNamespace(harm={"mean": harm}), "test"), "mean", 4)
    measured = np.nanquantile(harm[:, [0, 2]], 0.95, axis=0)
    np.testing.assert_allclose(quantiles, [measured[0], measured.mean(), measured[1], measured.mean()])
    assert null_max == 3.5 and source == "test"


@pytest.fixture()
def floor_at_half(monkeypatch):
    """A bar over every head's mean harm (theirs run from -2.04 to 0.15 on :data:`MANY`)."""
    from probe.analyses.claims import thresholds as T

    monkeypatch.setitem(T.MIN_EFFECT, "linear-readout", 0.5)


def test_the_block_test_stops_heads_far_under_the_bar_after_a_block(linear_gpt2, w, floor_at_half):
    """Per-example objective, every head confirmed and under a positive bar: the default
    decide step (the block test on each block's mean harm and variance) stops most heads as
    "not necessary" in blocks of 16 before the 96 sentences run out, where the betting test
    on its a-priori range (:func:`betting_bounds`) takes every sentence for all but one or two;
    the verdicts agree with the exhaustive path's (none holds)."""
    from probe.analyses.claims.screened import screened_necessity

    obj, corpus = LinearReadout(w), as_corpus(MANY)
    sweep, want = _exhaustive_verdicts(linear_gpt2, MANY, obj, HEADS)
    assert not any(want.values())
    kw = dict(batch_size=8, min_top=len(HEADS), min_audit=0, block=16)
    block = screened_necessity(linear_gpt2, corpus, obj, HEADS, **kw)
    betting = screened_necessity(linear_gpt2, corpus, obj, HEADS, test="betting", **kw)
    used = block.info["examples_per_head"]
    early = {k for k, v in used.items() if v < len(MANY)}
    # measured: the block test stopped 6 of 8 heads early (448 removals), the betting test 1 (736)
    assert len(early) >= 5 and sum(v < len(MANY) for v in betting.info["examples_per_head"].values()) <= 2
    assert sum(used.values()) < 0.7 * sum(betting.info["examples_per_head"].values())
    assert not any(c.holds for c in block.claims.values()) and not any(c.holds for c in betting.claims.values())
    for (layer, h), c in block.claims.items():
        assert c.effect < 0.5 and c.count == used[f"L{layer}H{h}"]
        if f"L{layer}H{h}" in early:
            assert c.extra["decision"] == "not necessary (stopped by the block test)" and "bounds" not in c.extra
            taken = np.random.default_rng(0).permutation(len(MANY))[: c.count]  # the pass's order (seed 0)
            harm = sweep.harm["mean"][HEADS.index((layer, h))]
            assert c.count % 16 == 0 and c.effect == pytest.approx(harm[taken].mean(), rel=1e-5, abs=1e-6)
    assert "normal-mixture" in block.info["decision"] and "betting" in betting.info["decision"]
    for run in (block, betting):  # the heads that took every example, counted in the note (not "one")
        late = sum(v == len(MANY) for v in run.info["examples_per_head"].values())
        took = sum(c.extra.get("decision") == "every example: the exhaustive test" for c in run.claims.values())
        assert late == took and f"; {took} head{'' if took == 1 else 's'} still undecided" in run.info["decision"]
    with pytest.raises(InputError, match="test must be one of"):
        screened_necessity(linear_gpt2, corpus, obj, HEADS, test="t", **kw)


def test_the_screen_reads_the_clean_readouts_so_exact_removals_stop_after_their_layer(
    linear_gpt2, w, floor_at_half, monkeypatch
):
    """The screen's forwards (their α edits at 0) read the clean readouts the exact removals
    read, example by example; given them, the decide step's clean forwards of a block whose
    heads are all in layer 0 stop before layer 1 (fewer layer-1 calls), and every claim's
    verdict, examples, harm and interval are those of the decide step that ran its clean
    forwards to the end (to float32 rounding: the two read the clean model in other batches)."""
    from probe.analyses.claims.screened import screened_necessity
    from probe.analyses.necessity import screen as screen_module

    obj, corpus = LinearReadout(w), as_corpus(MANY)
    scr = screen_heads(linear_gpt2, corpus, obj, modes=("mean",))
    sweep = removal_sweep(linear_gpt2, corpus, obj, [((1, 0),)], modes=("mean",))
    assert scr.clean is not None and scr.clean.shape == (len(MANY),)
    np.testing.assert_allclose(scr.clean, sweep.clean, rtol=1e-6, atol=1e-6)
    heads = [(0, h) for h in range(4)]
    kw = dict(batch_size=8, min_top=len(heads), min_audit=0, block=16)
    calls = []
    hook = linear_gpt2.model.h[1].register_forward_hook(lambda m, a, out: calls.append(a[0].shape[0]))
    try:
        known = screened_necessity(linear_gpt2, corpus, obj, heads, **kw)
        with_known = sum(calls)
        real = screen_module.screen_heads
        monkeypatch.setattr(
            screen_module, "screen_heads", lambda *a, **k: __import__("dataclasses").replace(real(*a, **k), clean=None)
        )
        calls.clear()
        full = screened_necessity(linear_gpt2, corpus, obj, heads, **kw)
    finally:
        hook.remove()
    assert with_known < sum(calls) - len(MANY) // 2  # no clean forward reached layer 1 in the decide step
    assert known.info["examples_per_head"] == full.info["examples_per_head"]
    for h in heads:
        a, b = known.claims[h], full.claims[h]
        assert (a.status, a.count) == (b.status, b.count)
        # the clean readouts of two batchings: equal to float32 rounding of readouts of order 1
        assert a.effect == pytest.approx(b.effect, abs=1e-6) and a.ci_low == pytest.approx(b.ci_low, abs=1e-6)


def test_sweeps_given_the_screens_clean_readouts_skip_their_clean_forwards_and_equal_full_ones(
    linear_gpt2, w, monkeypatch
):
    """``removal_sweep(known=)``: given the clean readouts a screen read (NaN rows where it
    read none), a batch of known examples stops its clean forward after the units' layer
    (no layer-1 call for layer-0 heads) and the harms equal a sweep that ran its clean
    forwards (to float32 rounding: the two read the clean model in other batches); a
    ``known`` of another length is refused. The screened path hands them on: the null
    model's sweep gets its screen's readouts of the examples it ranked on, and the claims'
    sweeps the model's screen's readouts of the corpus's first examples
    (:func:`screened_readouts`), none where the examples are not the screen's prefix."""
    from probe.analyses.claims import removal as removal_module
    from probe.analyses.claims.null_model import null_adapter
    from probe.analyses.claims.screened import screened_necessity
    from probe.analyses.claims.screened_claims import screened_readouts

    obj, corpus = LinearReadout(w), as_corpus(MANY)
    scr = screen_heads(linear_gpt2, corpus, obj, modes=("mean",))
    part = scr.clean.copy()
    unread = [i for _, idx in removal_module.sweep_batches(linear_gpt2, corpus, 8)[:5] for i in idx]
    part[unread] = np.nan  # five batches not read: they run their clean forwards to the end
    units = [((0, h),) for h in range(4)]
    calls: list = []
    hook = linear_gpt2.model.h[1].register_forward_hook(lambda m, a, out: calls.append(a[0].shape[0]))
    got = {}
    try:
        for name, known in (("none", None), ("half", part), ("all", scr.clean)):
            calls.clear()
            got[name] = (
                removal_sweep(linear_gpt2, corpus, obj, units, modes=("mean",), batch_size=8, known=known),
                sum(calls),
            )
    finally:
        hook.remove()
    (full, n_full), (half, n_half), (known, n_known) = got["none"], got["half"], got["all"]
    assert n_full - n_known == len(MANY) and n_full - n_half == len(MANY) - len(unread) == len(MANY) - 40
    for sweep in (half, known):
        np.testing.assert_allclose(sweep.harm["mean"], full.harm["mean"], rtol=0, atol=1e-6)
    assert np.abs(full.harm["mean"]).max() > 1e-2
    with pytest.raises(InputError, match="known clean readouts of 95 examples do not fit a corpus of 96"):
        removal_sweep(linear_gpt2, corpus, obj, units, modes=("mean",), known=scr.clean[:-1])
    seen: list = []
    real = removal_module.removal_sweep
    monkeypatch.setattr(
        removal_module, "removal_sweep", lambda *a, **k: (seen.append((a[0], k.get("known"))), real(*a, **k))[1]
    )
    nad = null_adapter(linear_gpt2, seed=0, kind="permute")
    screened_necessity(
        linear_gpt2, corpus, obj, HEADS, null_adapter=nad, batch_size=8, min_top=0, min_audit=2, block=32, null_top=2,
        null_sample=24, null_screen=12,
    )  # fmt: skip
    ((_, null_known),) = [(a, k) for a, k in seen if a is nad]
    assert null_known.shape == (24,) and int(np.isfinite(null_known).sum()) == 12  # the 12 the null's screen ranked on
    ran = types_ns(screen=scr)
    np.testing.assert_array_equal(screened_readouts(ran, corpus, corpus.subset(range(40))), scr.clean[:40])
    assert screened_readouts(ran, corpus, corpus.subset(range(1, 41))) is None
    assert screened_readouts(types_ns(screen=None), corpus, corpus.subset(range(40))) is None


def types_ns(**kw):
    from types import SimpleNamespace

    return SimpleNamespace(**kw)


def test_a_first_order_screen_takes_the_head_means_from_its_own_forwards(bert_tokenizer, monkeypatch):
    """The mean mode's first-order estimate is linear in the head means (``−Σ g·z + Σ_k m_k·S_k``),
    so a screen given no means sums them from its own forwards and finishes the estimates after:
    one forward per batch instead of a forward of the corpus for the means first, the same
    means and estimates as a screen given :func:`position_kind_means` (float rounding). Where
    the per-kind sums would not fit (``FOLD_BYTES``) it computes the means first, as before."""
    from conftest import tiny_llama_lm

    import probe.analyses.necessity.screen as screen_module
    from probe.analyses.necessity.ablation import position_kind_means
    from probe.analyses.necessity.screen import folds_means

    a = tiny_llama_lm(bert_tokenizer, layers=3)
    corpus = as_corpus(TEXTS)
    obj = resolve_objective("auto", a, corpus, use="per-example")[0]
    assert obj.name == "loss" and folds_means(a, "first-order", len(corpus))
    assert not folds_means(a, "readout-sketch", len(corpus)) and not folds_means(a, "first-order", 513)
    means = position_kind_means(a, corpus, obj, 3, a.default_stack)
    given = screen_heads(a, corpus, obj, modes=("mean", "zero"), batch_size=3, seed=4, means=means)
    forwards: list = []
    hook = a.model.register_forward_pre_hook(lambda m, args: forwards.append(1))
    try:
        folded = screen_heads(a, corpus, obj, modes=("mean", "zero"), batch_size=3, seed=4)
        n_folded = len(forwards)
        monkeypatch.setattr(screen_module, "FOLD_BYTES", 0)
        forwards.clear()
        first = screen_heads(a, corpus, obj, modes=("mean", "zero"), batch_size=3, seed=4)
        n_first = len(forwards)
    finally:
        hook.remove()
    assert n_folded == 3 and n_first == 6  # 8 sentences in batches of 3: the means' own 3 forwards saved
    for got in (folded, first):
        assert got.means.counts == means.counts
        torch.testing.assert_close(got.means.values, means.values, rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(got.estimate["zero"], given.estimate["zero"])
        scale = np.abs(given.estimate["mean"]).max()
        assert scale > 1e-2  # the heads matter
        np.testing.assert_allclose(got.estimate["mean"], given.estimate["mean"], rtol=0, atol=1e-6 * scale)
    with pytest.warns(UserWarning, match="averages head outputs over only 2 example"):
        screen_heads(a, TEXTS[:2], obj, modes=("mean",), batch_size=2)
