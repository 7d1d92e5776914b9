"""Several sequential tests in one pass over the corpus (issue 44): families that share each
block's clean forward decide exactly as each alone; e-BH stops a set of heads together;
a clean forward whose output is known stops after the layers it restarts from."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import tiny_llama_lm

from probe.analyses.necessity.sequential import (
    Family,
    e_bh,
    sequential_block_test,
    sequential_families,
    sequential_test,
)


def _bernoulli(means: np.ndarray, n: int, seed: int):
    rng = np.random.default_rng(seed)
    x = rng.random((len(means), n)) < (means[:, None] + 1) / 2
    return (2.0 * x - 1.0).astype(float)  # harms in {-1, 1} with mean ``means``


def test_two_families_in_one_pass_decide_as_each_alone():
    """A betting family and another (its own floor, bounds and e-BH count) share a pass: each
    decision, e-value and count equals the family's own test, and the harms are asked once per
    block for both while either has a head left."""
    n = 320
    a, b = _bernoulli(np.array([0.6, 0.0, -0.5, 0.3]), n, 1), _bernoulli(np.array([0.9, 0.1, -0.2]), n, 2)
    asked = []

    def harms(lives, examples):
        asked.append((tuple(map(len, lives)), len(examples)))
        return [a[np.ix_(lives[0], examples)], b[np.ix_(lives[1], examples)]]

    fams = [Family(4, 0.0, bounds=(-1, 1)), Family(3, 0.2, bounds=(-1, 1), tests=5, q=0.1)]
    joint = sequential_families(harms, fams, n, kind="betting", block=16)
    alone = [
        sequential_test(lambda h, e: a[np.ix_(h, e)], 4, n, floor=0.0, bounds=(-1, 1), block=16),
        sequential_test(lambda h, e: b[np.ix_(h, e)], 3, n, floor=0.2, bounds=(-1, 1), block=16, tests=5, q=0.1),
    ]
    for got, want in zip(joint, alone):
        assert got.decision == want.decision
        np.testing.assert_array_equal(got.n_used, want.n_used)
        np.testing.assert_allclose(got.e_value, want.e_value, rtol=1e-12)
    assert len(asked) == max(max(r.n_used) for r in alone) // 16
    for t, (lives, size) in enumerate(asked):  # block t goes to the heads of each family still undecided
        assert size == 16 and lives == tuple(int((r.n_used > 16 * t).sum()) for r in alone)


def test_e_bh_stops_a_set_of_heads_that_no_lone_threshold_would_stop():
    """Ten heads whose block means sit clearly above the floor: each passes e-BH's threshold
    for ten rejections, m/(10 q), blocks before a lone head's m/q, so the pass stops them
    together there; every head stopped is in the final e-BH set (the rule's guarantee)."""
    m, q, floor = 12, 0.05, 0.02
    means = np.r_[np.full(10, 0.024), np.full(2, 0.005)]

    def harms(live, examples):
        return means[live], np.full(len(live), 0.0015**2)

    r = sequential_block_test(harms, m, 64 * 40, floor=floor, q=q, block=64)
    assert r.decision[:10] == ("necessary",) * 10 and r.decision[10:] == ("not necessary",) * 2
    stopped_at = r.n_used[:10]
    assert (stopped_at < 64 * 40).all()
    # at the block they stopped, each e-value cleared m/(10 q) and none had cleared m/q
    assert (r.e_value[:10] >= m / (10 * q)).all() and (r.e_value[:10] < m / q).all()
    assert e_bh(np.r_[r.e_value[:10], np.zeros(2)], q)[:10].all()


def test_the_trace_stops_a_forward_before_a_layer_and_keeps_what_it_read(minilm):
    """``Trace(stop_before=l)``: the sites of layers before ``l`` equal a full forward's, no
    layer from ``l`` on runs, the forward returns nothing and ``stopped`` says so; a layer
    outside 1..L−1 is refused in one line."""
    from probe.errors import InputError
    from probe.models.sites import layer_modules
    from probe.tracing.trace_context import Trace

    ids = minilm.batch([minilm.encode("the cat sat on the mat"), minilm.encode("a dog ran")])
    read = [("resid_pre", 0), ("resid_pre", 1), ("proj_in", 1), ("z", 1)]
    with Trace(minilm, read=read, path="hooks") as full:
        minilm.model(**ids)
    ran = []
    hook = layer_modules(minilm)[2].register_forward_hook(lambda m, a, o: ran.append(1))
    out = "unset"
    try:
        with Trace(minilm, read=read, path="hooks", stop_before=2) as tr:
            out = minilm.model(**ids)
    finally:
        hook.remove()
    assert tr.stopped and out == "unset" and not ran
    for site in read:
        assert torch.equal(tr.cache[site], full.cache[site])
    with pytest.raises(InputError, match=r"stop before layers 1–5 or after the last \(6\), not 7"):
        Trace(minilm, read=read, stop_before=7)


def _counting(counts: dict, key: str):
    """A forward hook adding one to ``counts[key]`` per call."""

    def hook(module, args, output) -> None:
        counts[key] += 1

    return hook


def test_a_trace_stops_after_the_last_layer_and_the_head_means_need_nothing_after_it(minilm, monkeypatch):
    """``Trace(stop_before=L)`` (TransformerLens's ``stop_at_layer=n_layers``): every layer runs
    and its sites equal a full forward's, nothing after the last layer runs (a language
    model's final norm and vocabulary projection, MiniLM's pooler), ``trace`` returns its
    patterns without an output (and refuses ``grad=``, which needs one); the mean-ablation
    head means, whose forwards stop there, equal those of full forwards on both models."""
    from probe.analyses.common.objective import resolve_objective
    from probe.analyses.necessity import ablation
    from probe.app.report.bundled import sample_corpus
    from probe.interventions import heads as head_views
    from probe.errors import InputError
    from probe.models.sites import layer_modules
    from probe.tracing.trace import trace
    from probe.tracing.trace_context import Trace

    llama = tiny_llama_lm(minilm.tokenizer)
    corpus = sample_corpus(12)
    for a, after in ((minilm, minilm.model.pooler), (llama, llama.model.lm_head)):
        L = a.n_layers
        ids = a.batch([a.encode("the cat sat on the mat"), a.encode("a dog ran")])
        read = [("z", L - 1), ("resid_post", L - 1)]
        with Trace(a, read=read, path="hooks") as full:
            a.model(**ids)
        ran: dict = {"last": 0, "after": 0}
        hooks = [
            layer_modules(a)[-1].register_forward_hook(_counting(ran, "last")),
            after.register_forward_hook(_counting(ran, "after")),
        ]
        out = "unset"
        try:
            with Trace(a, read=read, path="hooks", stop_before=L) as tr:
                out = a.model(**ids)
        finally:
            for h in hooks:
                h.remove()
        assert tr.stopped and out == "unset" and ran == {"last": 1, "after": 0}
        for site in read:
            assert torch.equal(tr.cache[site], full.cache[site])
        cache = trace(a, ids, read="pattern", stop_before=L)  # as the decoder taxonomy's probes read them
        assert cache.output is None and torch.equal(
            cache.stack("pattern"), trace(a, ids, read="pattern").stack("pattern")
        )
        with pytest.raises(InputError, match="grad= needs the model's output"):
            trace(a, ids, read=read, stop_before=L, grad=lambda out: out[0].sum())
        obj, _ = resolve_objective("auto", a, corpus)
        ran["after"] = 0
        hook = after.register_forward_hook(_counting(ran, "after"))
        try:
            stopped = ablation.position_kind_means(a, corpus, obj, 4)
            assert ran["after"] == 0  # no forward of the means reached the head
            monkeypatch.setattr(head_views, "after_last_layer", lambda *args: None)
            whole = ablation.position_kind_means(a, corpus, obj, 4)
            monkeypatch.undo()
            assert ran["after"] == 3  # three batches of 4, each through the head
        finally:
            hook.remove()
        assert stopped.counts == whole.counts and torch.equal(stopped.values, whole.values)
        assert float(stopped.values.abs().max()) > 0


def test_a_decided_pass_of_both_modes_equals_each_mode_alone(minilm, monkeypatch):
    """MiniLM, bundled 24 in blocks of 8: necessity (mean) and weights (uniform) of three heads
    in one pass decide, count and measure exactly as two passes, on half the clean forwards."""
    from probe.analyses.claims.decided import Decide, decided_pass, decided_removals
    from probe.analyses.common.objective import resolve_objective
    from probe.analyses.claims import removal
    from probe.analyses.common.similarity import drift
    from probe.app.report.bundled import sample_corpus

    corpus = sample_corpus(24)
    obj, _ = resolve_objective("similarity-structure", minilm, corpus)
    heads = [(0, 9), (3, 1), (5, 10)]
    cleans = []
    original = removal.clean_run

    def counted(*a, **k):
        cleans.append(1)
        return original(*a, **k)

    monkeypatch.setattr(removal, "clean_run", counted)
    common = dict(block=8, batch_size=8)
    alone = [
        decided_removals(minilm, corpus, obj, heads, mode="mean", measures={"d": drift}, **common),
        decided_removals(minilm, corpus, obj, heads, mode="uniform", **common),
    ]
    n_alone = len(cleans)
    asks = [Decide(heads, "mean", measures={"d": drift}), Decide(heads, "uniform")]
    joint = decided_pass(minilm, corpus, obj, asks, **common)
    n_joint = len(cleans) - n_alone
    for got, want in zip(joint, alone):
        assert got.mode == want.mode and got.result.decision == want.result.decision
        np.testing.assert_array_equal(got.result.n_used, want.result.n_used)
        np.testing.assert_allclose(got.harm, want.harm, atol=1e-12, equal_nan=True)
    np.testing.assert_allclose(joint[0].measured["d"], alone[0].measured["d"], atol=1e-12, equal_nan=True)
    blocks = [int(r.result.n_used.max()) // 8 for r in alone]  # one batch of 8 per block
    assert n_alone == sum(blocks) and n_joint == max(blocks)  # one clean forward per block, not per mode


def test_known_clean_readouts_stop_the_clean_forward_and_change_nothing(minilm):
    """The redundancy groups' pass given the single heads' clean readouts: each batch's clean
    forward stops after the groups' layer (layer 1 here: layers 2–5 never run in it) and the
    harms, decisions and counts equal the pass that runs every clean forward."""
    from probe.analyses.claims.decided import Decide, decided_pass
    from probe.analyses.common.objective import resolve_objective
    from probe.app.report.bundled import sample_corpus
    from probe.models.sites import layer_modules

    corpus = sample_corpus(24)
    obj, _ = resolve_objective("similarity-structure", minilm, corpus)
    first = decided_pass(minilm, corpus, obj, [Decide([(5, 10)], "mean")], block=8)[0]
    assert np.isfinite(first.clean[list(first.first)]).all()
    groups = [[(1, 0), (1, 1), (1, 5)], [(1, 6), (1, 9)]]
    asks = [Decide(groups, "mean")]
    ran = []
    hook = layer_modules(minilm)[3].register_forward_hook(lambda m, a, o: ran.append(a[0].shape[0]))
    try:
        full = decided_pass(minilm, corpus, obj, asks, block=8)[0]
        n_full = len(ran)
        known = decided_pass(minilm, corpus, obj, asks, block=8, known=first.clean)[0]
    finally:
        hook.remove()
    taken = np.isfinite(first.clean).all(1).sum()
    assert taken == 24  # the single head took every block, so every batch of the groups' pass is known
    assert len(ran) - n_full < n_full  # the clean forwards no longer reach layer 3; the removals still do
    assert known.result.decision == full.result.decision
    np.testing.assert_array_equal(known.result.n_used, full.result.n_used)
    np.testing.assert_allclose(known.harm, full.harm, atol=1e-9, equal_nan=True)


def test_a_plan_removes_each_unit_only_in_its_own_modes(minilm):
    """``RemovalPlan(unit_modes=…)``: a unit reads NaN in the modes it is not removed in, and
    its readouts in its own mode equal a plan of that mode alone."""
    from probe.analyses.claims.removal import RemovalPlan, block_batches, run_removal_batches
    from probe.analyses.common.objective import resolve_objective
    from probe.analyses.necessity.ablation import position_kind_means
    from probe.app.report.bundled import sample_corpus

    corpus = sample_corpus(8)
    obj, _ = resolve_objective("similarity-structure", minilm, corpus)
    means = position_kind_means(minilm, corpus, obj, 8, minilm.default_stack)
    batches = block_batches(minilm, corpus, range(8), 8)
    units = (((0, 9),), ((5, 10),))
    mixed = RemovalPlan(
        corpus, obj, units, ("mean", "uniform"), means, 0, None, 8, unit_modes=(("mean",), ("uniform",))
    )
    got = run_removal_batches(minilm, mixed, batches)
    assert torch.isnan(got.perturbed["mean"][1]).all() and torch.isnan(got.perturbed["uniform"][0]).all()
    for j, mode in enumerate(("mean", "uniform")):
        alone = run_removal_batches(
            minilm, RemovalPlan(corpus, obj, units[j : j + 1], (mode,), means, 0, None, 8), batches
        )
        torch.testing.assert_close(got.perturbed[mode][j], alone.perturbed[mode][0], rtol=0, atol=1e-6)
        torch.testing.assert_close(got.clean, alone.clean, rtol=0, atol=0)


def test_a_known_batch_whose_modes_remove_nothing_still_reads_its_clean_readouts(minilm):
    """A plan whose every batch is known (its clean forwards stop) and whose only unit is not
    removed in the plan's mode: the batches still hand back the known clean readouts, in
    order, and no perturbed readout."""
    from probe.analyses.claims.removal import RemovalPlan, block_batches, run_removal_batches
    from probe.analyses.common.objective import resolve_objective
    from probe.app.report.bundled import sample_corpus

    corpus = sample_corpus(8)
    obj, _ = resolve_objective("similarity-structure", minilm, corpus)
    batches = block_batches(minilm, corpus, range(8), 4)
    known = {i: np.full(3, float(i), dtype=np.float32) for i in range(8)}
    plan = RemovalPlan(corpus, obj, (((2, 0),),), ("mean",), None, 0, None, 4, unit_modes=(("uniform",),), known=known)
    got = run_removal_batches(minilm, plan, batches)
    assert got.perturbed == {}
    assert got.clean is not None and got.clean.dtype == torch.float32
    np.testing.assert_array_equal(got.clean.numpy(), np.stack([known[i] for i in got.indices]))
