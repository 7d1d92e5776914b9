"""Direct logit attribution, the logit lens and the OV circuit's top tokens against
TransformerLens on the same weights (its bridge around a copy of the model; the tiny random
GPT-2 and grouped-query Llama of tests/test_transformer_lens.py, norm gains and biases
randomised so that a fold on the wrong side of a norm shows).

TransformerLens's side: ``enable_compatibility_mode`` folds the norms into the weights
(``fold_ln``, centred writing weights; ``center_unembed=False`` and ``fold_value_biases=False``
so that its logits and per-head outputs are the model's own). Note: its ``logit_attrs``
applies the final norm's scale itself, so it is given ``stack_head_results()`` unscaled
(``stack_head_results(apply_ln=True)`` is dotted with ``tokens_to_residual_directions``
instead): both equal ours.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip(
    "transformer_lens", reason="TransformerLens is not installed: pip install -c constraints.txt -e '.[compare]'"
)

from probe.analyses.writes.answers import target_of
from probe.analyses.writes.dla import attribute
from probe.analyses.writes.logit_lens import logit_lens
from probe.analyses.writes.stream import decompose
from probe.analyses.writes.token_circuits import copying_scores, ov_top_tokens, qk_top_sources

from test_transformer_lens import _tiny, bridge_of

TEXT = "the cat sat on the mat and the dog"
TOL = dict(atol=1e-4, rtol=1e-4)


def _folded_bridge(adapter):
    bridge = bridge_of(adapter)
    bridge.enable_compatibility_mode(disable_warnings=True, center_unembed=False, fold_value_biases=False)
    return bridge


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def pair(request, bert_tokenizer):
    adapter = _tiny(request.param, bert_tokenizer)
    with torch.no_grad():  # random biases where the family has them; weights of std 0.2, not 0.02,
        for name, p in adapter.model.named_parameters():  # so that OV logits are O(1), not float32 noise
            if p.dim() == 1 and "bias" in name and "ln" not in name:
                p.uniform_(-0.2, 0.2)
            elif p.dim() == 2:
                p.mul_(10)
    return adapter, _folded_bridge(adapter)


def test_head_dla_equals_transformer_lens_logit_attrs(pair):
    adapter, bridge = pair
    ids = adapter.inputs_of([TEXT])["input_ids"]
    _, cache = bridge.run_with_cache(ids)
    target = target_of(adapter, "cat", "dog")
    ours = attribute(adapter, decompose(adapter, TEXT), target)
    mine = torch.tensor(ours.heads()["dla"].values, dtype=torch.float32)
    theirs = cache.logit_attrs(
        cache.stack_head_results(pos_slice=-1),
        tokens=torch.tensor([target.answer]),
        incorrect_tokens=torch.tensor([target.against]),
        pos_slice=-1,
    )[:, 0]
    torch.testing.assert_close(theirs.float(), mine, **TOL)
    direction = bridge.tokens_to_residual_directions(
        torch.tensor(target.answer)
    ) - bridge.tokens_to_residual_directions(torch.tensor(target.against))
    scaled = cache.stack_head_results(apply_ln=True, pos_slice=-1)[:, 0] @ direction
    torch.testing.assert_close(scaled.float(), mine, **TOL)
    assert mine.abs().max() > 1e-3  # not a comparison of zeros
    assert ours.total == pytest.approx(ours.logit, abs=1e-5)


def test_logit_lens_equals_transformer_lens_accumulated_resid(pair):
    adapter, bridge = pair
    ids = adapter.inputs_of([TEXT])["input_ids"]
    _, cache = bridge.run_with_cache(ids)
    lens = logit_lens(adapter, TEXT, target_of(adapter, "dog"))
    acc, labels = cache.accumulated_resid(apply_ln=True, incl_mid=True, pos_slice=-1, return_labels=True)
    theirs = acc[:, 0] @ bridge.W_U + (bridge.b_U if getattr(bridge, "b_U", None) is not None else 0)
    # ours lists pre, mid, post per layer; TransformerLens pre, mid per layer and the final post
    t = lens.table
    keep = [i for i, r in enumerate(t.itertuples()) if r.stage != "resid_post" or r.layer == adapter.n_layers - 1]
    assert len(keep) == len(labels)
    torch.testing.assert_close(theirs.float(), lens.logits[keep], **TOL)
    final = adapter.model(**adapter.inputs_of([TEXT])).logits[0, -1]
    torch.testing.assert_close(lens.logits[-1], final.detach(), atol=1e-5, rtol=1e-5)


def test_ov_top_tokens_equal_transformer_lens_ov_circuit(pair):
    adapter, bridge = pair
    sources = adapter.tokenizer.convert_tokens_to_ids(["cat", "dog", "mat", "the"])
    for layer, head in [(0, 1), (1, 3)]:
        ours = ov_top_tokens(adapter, layer, head, sources, k=5)
        full = bridge.W_E @ bridge.OV[layer, head] @ bridge.W_U  # a FactoredMatrix: never multiplied out
        rows = full.A.double()[sources] @ full.B.double()
        vals, idx = rows.topk(5, dim=-1)
        assert ours["token"].tolist() == idx.flatten().tolist()
        torch.testing.assert_close(torch.tensor(ours["logit"].values), vals.flatten(), **TOL)
        assert vals.abs().max() > 0.1


def test_copying_score_equals_transformer_lens_ov_eigenvalues(pair):
    """Σλ/Σ|λ| of TransformerLens's full OV circuit (its FactoredMatrix eigenvalues, folded
    weights) equals the shared copying score of every head."""
    adapter, bridge = pair
    ours = copying_scores(adapter)
    for row in ours.itertuples():
        full = bridge.W_E @ bridge.OV[row.layer, row.head] @ bridge.W_U
        lam = torch.linalg.eigvals(full.B.double() @ full.A.double())
        assert row.copying == pytest.approx(float(lam.real.sum() / lam.abs().sum()), abs=1e-4)


def test_qk_top_sources_equal_transformer_lens_qk_circuit(pair):
    """For destination tokens, the source tokens each head's QK circuit scores highest
    (``W_E' W_Q^h W_K^hᵀ W_E'ᵀ``, norms folded, biases and positions left out) equal
    TransformerLens's ``W_E @ QK[l, h] @ W_E.T``; a grouped-query head reads its key/value head."""
    adapter, bridge = pair
    destinations = adapter.tokenizer.convert_tokens_to_ids(["cat", "dog", "mat", "the"])
    for layer, head in [(0, 1), (1, 2), (1, 3)]:
        ours = qk_top_sources(adapter, layer, head, destinations, k=5)
        full = bridge.W_E @ bridge.QK[layer, head] @ bridge.W_E.T  # a FactoredMatrix: never multiplied out
        rows = full.A.double()[destinations] @ full.B.double()
        vals, idx = rows.topk(5, dim=-1)
        assert ours["token"].tolist() == idx.flatten().tolist()
        torch.testing.assert_close(torch.tensor(ours["score"].values), vals.flatten(), **TOL)
        assert vals.abs().max() > 0.1


@pytest.mark.slow
def test_smollm2_dla_logit_lens_and_ov_equal_transformer_lens(smollm2):
    """On SmolLM2-135M (the Q4_1 GGUF's dequantised heads), "The capital of France is" →
    " Paris": every head's DLA, the logit lens at every stage and L23H4's OV top tokens equal
    TransformerLens's at 1e-4; the parts sum to the logit, 17.37, of which L23H4 writes 2.82."""
    text = "The capital of France is"
    bridge = _folded_bridge(smollm2)
    ids = smollm2.inputs_of([text])["input_ids"]
    _, cache = bridge.run_with_cache(ids)
    target = target_of(smollm2, " Paris")
    ours = attribute(smollm2, decompose(smollm2, text), target)
    theirs = cache.logit_attrs(
        cache.stack_head_results(pos_slice=-1), tokens=torch.tensor([target.answer]), pos_slice=-1
    )[:, 0]
    torch.testing.assert_close(theirs.float(), torch.tensor(ours.heads()["dla"].values, dtype=torch.float32), **TOL)
    assert ours.logit == pytest.approx(17.37, abs=0.01) and ours.total == pytest.approx(ours.logit, abs=1e-4)
    heads = ours.heads().set_index(["layer", "head"])["dla"]
    assert heads.idxmax() == (23, 4) and heads[(23, 4)] == pytest.approx(2.82, abs=0.01)
    lens = logit_lens(smollm2, text, target)
    acc = cache.accumulated_resid(apply_ln=True, incl_mid=True, pos_slice=-1)[:, 0] @ bridge.W_U
    keep = [i for i, r in enumerate(lens.table.itertuples()) if r.stage != "resid_post" or r.layer == 29]
    torch.testing.assert_close(acc.float(), lens.logits[keep], **TOL)
    france = smollm2.tokenizer.encode(" France", add_special_tokens=False)
    ov = ov_top_tokens(smollm2, 23, 4, france, k=5)
    full = bridge.W_E @ bridge.OV[23, 4] @ bridge.W_U
    vals, idx = (full.A.double()[france] @ full.B.double()).topk(5, dim=-1)
    assert ov["token"].tolist() == idx.flatten().tolist()
    torch.testing.assert_close(torch.tensor(ov["logit"].values), vals.flatten(), **TOL)
