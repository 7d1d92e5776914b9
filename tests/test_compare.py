"""Heads across checkpoints (probe compare): closed-form statistics, a constructed pair
whose one changed head is known, identical checkpoints, MiniLM with one layer's attention
re-randomised, fine-tune attribution, and the CLI's refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from conftest import make_maps
from probe.analyses.compare.changes import head_changes, paired_change
from probe.analyses.compare.divergence import pattern_divergence, row_jsd
from probe.analyses.compare.run import compare_checkpoints
from probe.errors import InputError
from probe.inputs.corpus import load_corpus
from probe.models import load_model
from probe.models.checkpoints import Checkpoint, weights_fingerprint

BROKEN = (1, 2)  # zoo:induction's induction head L1H2, whose queries the constructed pair re-randomises


@pytest.fixture
def one_thread():
    """The tiny models run on one torch thread (two spinning threads on a shared machine
    made these forwards ten times slower)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _in_memory(models: dict):
    return [Checkpoint(label, spec=label) for label in models], lambda ck, device: models[ck.label]


def _break_query(adapter, layer: int, head: int, seed: int = 0) -> None:
    """Re-randomise one head's query weights in place (its pattern changes, no other head's
    does in that layer)."""
    att = adapter.model.model.layers[layer].self_attn
    d = att.head_dim
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        w = att.q_proj.weight
        w[head * d : (head + 1) * d] = torch.randn(d, w.shape[1], generator=g) * 0.3


# --------------------------------------------------------------------------- closed form
def test_jsd_is_zero_for_the_same_rows_and_one_for_disjoint_ones():
    p = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
    q = torch.tensor([[0.0, 1.0], [0.5, 0.5]])
    assert row_jsd(p, q).tolist() == pytest.approx([1.0, 0.0])
    a = make_maps(torch.eye(3)[None, None])
    b = make_maps(torch.eye(3).flip(0)[None, None])  # rows 0 and 2 move all their mass, row 1 stays
    assert pattern_divergence([a], [b])[0, 0, 0] == pytest.approx(2 / 3)
    assert pattern_divergence([a], [a])[0, 0, 0] == 0.0


def test_pattern_divergence_refuses_other_inputs():
    a = make_maps(torch.eye(3)[None, None])
    b = make_maps(torch.eye(4)[None, None])
    with pytest.raises(InputError, match="differ in shape"):
        pattern_divergence([a], [b])
    with pytest.raises(InputError, match="same inputs"):
        pattern_divergence([a], [a, a])


def test_paired_change_flags_the_shifted_head_only():
    rng = np.random.default_rng(0)
    a = rng.uniform(0.2, 0.4, size=(20, 4))
    b = a.copy()
    b[:, 2] += 0.3 + rng.normal(0, 0.01, 20)  # head 2 shifts by 0.3; the others are untouched
    res = paired_change(a, b, n_boot=300)
    assert res["change"][2] == pytest.approx(0.3, abs=0.01)
    assert res["ci_low"][2] > 0.28 and res["ci_high"][2] < 0.32
    assert res["p"][[0, 1, 3]].tolist() == [1.0, 1.0, 1.0]
    table = head_changes({"prev": a}, {"prev": b}, n_heads=2, floors={"prev": 0.05}, n_boot=300)
    assert table.loc[table["flagged"], ["layer", "head"]].values.tolist() == [[1, 0]]


# --------------------------------------------------------------------------- zoo pair
@pytest.mark.slow
def test_constructed_pair_flags_the_changed_head_alone(one_thread):
    a, b = load_model("zoo:induction"), load_model("zoo:induction")
    _break_query(b, *BROKEN)
    checkpoints, loader = _in_memory({"base": a, "broken": b})
    res = compare_checkpoints(checkpoints, load_corpus(model="zoo:induction", limit=16), loader=loader, n_boot=300)
    flagged = res.heads[res.heads["flagged"]]
    assert [(r.layer, r.head) for r in flagged.itertuples()] == [BROKEN]
    top = res.heads.iloc[0]
    assert (int(top["layer"]), int(top["head"])) == BROKEN and top["jsd"] > 0.5
    ind = res.changes[(res.changes["measure"] == "induction")].set_index(["layer", "head"]).loc[BROKEN]
    assert ind["a"] > 0.9 and ind["change"] < -0.5 and ind["ci_high"] < -0.5  # it stopped being an induction head
    assert not res.warnings
    # the other induction heads' weights did not move, yet they became necessary (backups take over)
    backups = res.heads[(res.heads["layer"] == 1) & ~res.heads["flagged"]]
    assert backups["necessity_flagged"].any() and (backups["jsd"] == 0).all()


def test_identical_checkpoints_flag_nothing_and_warn(one_thread):
    a = load_model("zoo:induction")
    checkpoints, loader = _in_memory({"A": a, "A again": a})
    res = compare_checkpoints(
        checkpoints, load_corpus(model="zoo:induction", limit=8), loader=loader, n_boot=100, necessity=False
    )
    assert not res.changes["flagged"].any() and not res.changes["significant"].any()
    assert (res.changes["change"].abs().fillna(0) == 0).all()
    assert len(res.warnings) == 1 and "identical weights" in res.warnings[0]


def test_weights_fingerprint_tells_weights_apart():
    a, b = load_model("zoo:induction"), load_model("zoo:induction")
    assert weights_fingerprint(a.model) == weights_fingerprint(b.model)
    _break_query(b, *BROKEN)
    assert weights_fingerprint(a.model) != weights_fingerprint(b.model)


def test_attribution_names_the_changed_head(one_thread):
    from probe.analyses.compare.attribution import attribute_change
    from probe.analyses.common.objective import resolve_objective

    a, b = load_model("zoo:induction"), load_model("zoo:induction")
    _break_query(b, *BROKEN)
    corpus = load_corpus(model="zoo:induction", limit=12)
    res = attribute_change(a, b, corpus, resolve_objective("auto", b, corpus, use="per-example")[0], n_boot=200)
    assert res.score_b > res.score_a + 0.03 and res.total_ci[1] < 0  # breaking the head costs loss
    top = res.table.iloc[0]
    assert (int(top["layer"]), int(top["head"])) == BROKEN and top["ci_high"] < 0
    # in the last layer only the broken head's output differs: patching it back gives A's
    # output exactly (all of the change), patching any other head changes nothing
    assert top["explained"] == pytest.approx(1.0, abs=1e-4)
    others = res.table[(res.table["layer"] != BROKEN[0]) | (res.table["head"] != BROKEN[1])]
    assert others["effect"].abs().max() < 1e-6


# --------------------------------------------------------------------------- MiniLM
@pytest.mark.slow
def test_minilm_with_one_layer_rerandomised_puts_that_layer_on_top(minilm, one_thread):
    layer = 2
    b = load_model("minilm")
    att = b.model.encoder.layer[layer].attention.self
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for lin in (att.query, att.key, att.value):  # BERT's initialisation: N(0, 0.02), zero bias
            lin.weight.copy_(torch.randn(lin.weight.shape, generator=g) * 0.02)
            lin.bias.zero_()
    texts = [
        "The cat sat on the mat.",
        "A quick brown fox jumps over the lazy dog.",
        "She gave him the book yesterday.",
        "Rain fell on the old town all night.",
        "They will visit their friends in Paris next week.",
        "The results were better than expected.",
        "He runs every morning before work.",
        "Our team won the final match.",
    ]  # eight: a signed-rank p of 8 examples (at best 1/256) can clear BH across 72 heads; 6 (1/64) cannot
    checkpoints, loader = _in_memory({"minilm": minilm, "layer 2 re-randomised": b})
    res = compare_checkpoints(checkpoints, load_corpus(text=texts), loader=loader, n_boot=200, necessity=False)
    ranked = res.heads.sort_values("jsd", ascending=False)
    assert set(ranked.head(minilm.n_heads)["layer"]) == {layer}
    assert res.heads[res.heads["layer"] < layer]["jsd"].max() == 0.0  # layers before it cannot change
    assert res.heads[res.heads["layer"] == layer]["flagged"].all()


# --------------------------------------------------------------------------- CLI
def test_cli_refuses_checkpoints_of_different_shape(tmp_path):
    from probe.app.cli import main

    r = CliRunner().invoke(
        main, ["compare", "zoo:induction", "zoo:prev-token", "--limit", "2", "--out", str(tmp_path / "o")]
    )
    assert r.exit_code == 1, r.output
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and "differ in shape" in lines[0] and "one architecture" in lines[0]
    assert not (tmp_path / "o").exists()


def test_cli_on_identical_checkpoints_warns_and_writes_tables_and_page(tmp_path, one_thread):
    from probe.app.cli import main

    out = tmp_path / "o"
    r = CliRunner().invoke(
        main,
        [
            "compare",
            "zoo:induction",
            "zoo:induction",
            "--limit",
            "6",
            "--no-necessity",
            "--n-boot",
            "50",
            "--out",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.output
    assert "identical weights" in r.output and "0 of 8 heads flagged" in r.output
    summary = json.loads((out / "compare.json").read_text())
    assert summary["pairs"][0]["flagged"] == [] and summary["warnings"]
    for name in ("changes.csv", "heads.csv", "scores.csv", "checkpoints.csv", "icl.csv", "compare.html"):
        assert (out / name).is_file(), name


def test_page_escapes_checkpoint_labels(one_thread):
    from probe.app.report.compare_page import compare_page

    a = load_model("zoo:induction")
    checkpoints, loader = _in_memory({"<script>alert(1)</script>": a, "b&c": a})
    res = compare_checkpoints(
        checkpoints, load_corpus(model="zoo:induction", limit=4), loader=loader, n_boot=20, necessity=False
    )
    html = compare_page(res)
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "b&amp;c" in html


# --------------------------------------------------------------------------- training dynamics
def test_trainer_saves_checkpoints_and_a_run_expands_to_them_by_step(tmp_path, one_thread):
    from probe.models import zoo
    from probe.models.checkpoints import resolve_checkpoints

    assert zoo.checkpoint_schedule(10, every=4) == [0, 4, 8, 10]
    assert zoo.checkpoint_schedule(9, n=3) == [0, 3, 6, 9]
    card = zoo.train("induction", tmp_path / "run", steps=4, seed=1, batch_size=4, checkpoints=[0, 2, 4])
    assert card["checkpoints"] == {s: f"checkpoints/step-00000{s}" for s in ("0", "2", "4")}
    resolved = resolve_checkpoints([str(tmp_path / "run")])
    assert [(c.label, c.step, c.task) for c in resolved] == [(f"step-00000{s}", s, "induction") for s in (0, 2, 4)]
    with pytest.raises(InputError, match="0..4"):
        zoo.train("induction", tmp_path / "bad", steps=4, checkpoints=[6])


@pytest.mark.slow
def test_the_induction_phase_change_in_the_first_150_steps(tmp_path, one_thread):
    """The first 150 steps of zoo:induction's own run (its learning-rate schedule, batch 64):
    the in-context-learning score and the induction heads' score move most in the same
    interval, 100 -> 150, by most of their total movement (Olsson et al. 2022's phase change;
    docs/compare.md draws the whole 1,500-step run)."""
    from probe.models import zoo
    from probe.models.checkpoints import resolve_checkpoints

    zoo.train("induction", tmp_path / "run", stop_after=150, checkpoints=[0, 50, 100, 150])
    res = compare_checkpoints(
        resolve_checkpoints([str(tmp_path / "run")]),
        load_corpus(model="zoo:induction", limit=12),
        necessity=False,
        n_boot=100,
    )
    ((layer, head),) = res.induction_heads
    assert layer == 1  # the induction head sits above the previous-token head
    icl, ind = res.phase.iloc[0], res.phase.iloc[1]
    assert (icl.from_step, icl.to_step) == (ind.from_step, ind.to_step) == (100, 150)
    assert icl.change < -1.0 and ind.change > 0.3 and icl.share > 0.4 and ind.share > 0.6
    assert res.icl["icl"].iloc[0] == pytest.approx(0.0, abs=0.1)  # at initialisation: no in-context learning
    layer0 = res.scores[(res.scores["measure"] == "induction") & (res.scores["layer"] == 0)]
    assert layer0[layer0["step"] == 150]["value"].max() < 0.1  # layer 0 heads cannot do induction


def test_cli_trains_a_run_and_compares_its_checkpoints_against_the_step(tmp_path, one_thread):
    import pandas as pd

    from probe.app.cli import main

    run, out = tmp_path / "run", tmp_path / "cmp"
    r = CliRunner().invoke(
        main,
        ["train", "zoo:induction", "--steps", "4", "--batch-size", "4", "--checkpoints", "2", "--out", str(run), "-q"],
    )
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(
        main, ["compare", str(run), "--limit", "3", "--no-necessity", "--n-boot", "20", "--out", str(out), "-q"]
    )
    assert r.exit_code == 0, r.output
    scores = pd.read_csv(out / "scores.csv")
    assert sorted(scores["step"].unique()) == [0, 2, 4]
    assert set(pd.read_csv(out / "heads.csv")["from"]) == {"step-000000", "step-000002"}
    assert (out / "dynamics.png").is_file() and (out / "phase.csv").is_file()
    summary = json.loads((out / "compare.json").read_text())
    assert [c["step"] for c in summary["checkpoints"]] == [0, 2, 4]


def test_one_sided_p_without_a_positive_difference_is_scipys_exact_one():
    """No positive difference (an unchanged head's JSD − floor): p = 1, as scipy's exact test
    gives it (it takes a permutation test over 2^n sign flips for n ≤ 13 with ties: ~1 s a
    head at n = 12, minutes over SmolLM2's 270 heads); a positive difference still goes to scipy."""
    from scipy.stats import wilcoxon

    from probe.analyses.compare.changes import _signed_rank_p

    rng = np.random.default_rng(0)
    for d in (np.full(6, -0.05), -np.abs(rng.normal(size=7)), np.r_[0.0, 0.0, -np.abs(rng.normal(size=5))]):
        assert _signed_rank_p(d, "greater") == float(wilcoxon(d, zero_method="wilcox", alternative="greater").pvalue)
    d = np.r_[0.3, -np.abs(rng.normal(size=6))]
    assert _signed_rank_p(d, "greater") == float(wilcoxon(d, zero_method="wilcox", alternative="greater").pvalue) < 1
