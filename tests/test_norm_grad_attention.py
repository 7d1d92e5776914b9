"""Norm-based attention (Kobayashi et al. 2020) and gradient-weighted rollout (Chefer et
al. 2021): closed forms, manual recomputation on tiny models, the known effect on the
bundled model."""

from __future__ import annotations

import pytest
import torch

from probe.analyses.flow.grad_attention import grad_rollout, grad_rollout_maps, grad_weighted_attention
from probe.analyses.flow.norm_attention import norm_rollout, norm_rollout_maps, norm_weights, value_norms
from conftest import uniform
from probe.tracing.hooks import count_hooks, eager_attention

TEXT = "The keys to the cabinet are on the table."


def test_value_norms_of_a_hand_built_projection():
    # one layer, two heads of dim 1, d = 2: W_O maps head 0 to e0·3 and head 1 to e1·4
    values = torch.tensor([[[1.0, 2.0], [0.5, -1.0]]])[..., None]  # [L=1, n=2, H=2, dh=1]
    w_o = torch.tensor([[[3.0, 0.0], [0.0, 4.0]]])  # [1, d=2, H*dh=2]
    norms = value_norms(values, w_o)
    assert torch.allclose(norms, torch.tensor([[[3.0, 1.5], [8.0, 4.0]]]))
    alpha = torch.tensor([[[[0.25, 0.75], [1.0, 0.0]]]]).expand(1, 2, 2, 2)
    w = norm_weights(alpha, values, w_o)
    assert torch.allclose(w[0, 0], torch.tensor([[0.75, 1.125], [3.0, 0.0]]))
    assert torch.allclose(w[0, 1], torch.tensor([[2.0, 3.0], [8.0, 0.0]]))


def test_norm_weights_match_a_manual_computation_on_a_tiny_bert(tiny_models):
    from probe.runs.values import capture_values

    adapter = tiny_models["bert"]
    model = adapter.model
    before = count_hooks(model)
    vc = capture_values(adapter, TEXT)
    assert count_hooks(model) == before
    enc = adapter.encode(TEXT)
    with torch.no_grad():
        out = model(**adapter.batch([enc]), output_hidden_states=True)
    H, dh = adapter.n_heads, adapter.head_dim
    for l, layer in enumerate(model.encoder.layer):
        x = out.hidden_states[l][0]  # input of layer l (post-LN BERT)
        v = layer.attention.self.value(x).reshape(-1, H, dh)  # with b_V
        w = layer.attention.output.dense.weight  # [d, H*dh]
        for h in range(H):
            f = v[:, h] @ w[:, h * dh : (h + 1) * dh].T  # [n, d]
            manual = vc.maps.attentions[l, h] * f.norm(dim=-1)[None, :]
            got = norm_weights(vc.maps.attentions, vc.values, vc.w_o)[l, h]
            assert torch.allclose(got, manual, atol=1e-5)


def test_norm_rollout_on_a_causal_tiny_gpt2_is_lower_triangular(tiny_models):
    from probe.runs.values import capture_values

    vc = capture_values(tiny_models["gpt2"], TEXT)
    assert vc.maps.kind == "causal"
    assert vc.w_o.shape[1:] == (32, 32)
    r = norm_rollout(vc.maps.attentions, vc.values, vc.w_o, causal=True)
    assert r.triu(1).abs().max().item() == 0
    assert torch.allclose(r.sum(-1), torch.ones(r.shape[0]), atol=1e-5)


def test_special_tokens_get_large_attention_but_small_norm_share(minilm):
    # Kobayashi et al. 2020 §4: [CLS]/[SEP] receive much attention, little ‖α f(x)‖.
    # In all-MiniLM-L6-v2 the attention sink is [CLS] (≈ 0.47 of all attention).
    from probe.runs.values import capture_values

    vc = capture_values(minilm, TEXT)
    a = vc.maps.attentions
    w = norm_weights(a, vc.values, vc.w_o)
    share = w / w.sum(-1, keepdim=True)
    special = vc.maps.special_mask
    raw_special = a[..., special].sum(-1).mean().item()
    norm_special = share[..., special].sum(-1).mean().item()
    assert raw_special > 0.3
    assert norm_special < 0.5 * raw_special
    ts = norm_rollout_maps(vc)
    assert ts.scores.sum() == pytest.approx(1.0, abs=1e-5)


# ---- gradient-weighted -----------------------------------------------------------------


def test_positive_gradient_on_one_column_makes_it_the_top_score():
    # uniform attention 1/n, gradient g on column t in every row and head:
    # Ā[i, t] = g/n, B[i] = (e_i + (g/n) e_t) / (1 + g/n); B[t] = e_t.
    n, t, g = 5, 3, 10.0
    attn = uniform(n, layers=1, heads=2).double()
    grads = torch.zeros_like(attn)
    grads[..., t] = g
    row = grad_rollout(attn, grads, output_positions=[0])[0]
    c = g / n
    assert row[t].item() == pytest.approx(c / (1 + c))
    assert row[0].item() == pytest.approx(1 / (1 + c))
    assert int(row.argmax()) == t
    # two layers: token t keeps its mass, token 0 keeps 1/(1+c)^2
    row2 = grad_rollout(uniform(n, layers=2, heads=2).double(), grads.expand(2, 2, n, n), output_positions=[0])[0]
    assert row2[0].item() == pytest.approx(1 / (1 + c) ** 2)
    assert row2[t].item() == pytest.approx(1 - 1 / (1 + c) ** 2)


def test_negative_gradients_are_dropped():
    attn = uniform(4, layers=2, heads=3).double()
    grads = -torch.rand(attn.shape, dtype=torch.float64)
    assert torch.equal(grad_weighted_attention(attn, grads), torch.zeros(2, 4, 4, dtype=torch.float64))
    assert torch.allclose(grad_rollout(attn, grads), torch.eye(4, dtype=torch.float64))


def test_gradient_shape_mismatch_is_rejected():
    with pytest.raises(ValueError, match="match"):
        grad_rollout(uniform(4, layers=2, heads=3), torch.zeros(2, 3, 4, 5))


def test_attention_gradients_equal_autograd_on_hf_attentions(tiny_models):
    from probe.runs.grads import attention_gradients

    adapter = tiny_models["bert"]
    model = adapter.model
    model.zero_grad(set_to_none=True)  # the model is shared by the session's tests
    before = count_hooks(model)
    with torch.no_grad():
        res = attention_gradients(adapter, TEXT)
        assert not torch.is_grad_enabled()
    assert count_hooks(model) == before
    assert all(p.grad is None for p in model.parameters())
    # independent path: HF's own returned attentions
    enc = adapter.encode(TEXT)
    with eager_attention(model):
        out = model(**adapter.batch([enc]), output_attentions=True)
    target = out.last_hidden_state[0, 0].norm()
    ref = torch.stack(torch.autograd.grad(target, out.attentions))[:, 0]
    assert torch.allclose(res.grads, ref, atol=1e-6)
    assert res.target_value == pytest.approx(target.item(), rel=1e-5)
    # the [CLS] output reads the last layer's attention through row 0 only
    assert res.grads[-1, :, 1:].abs().max().item() == 0
    assert res.grads[-1, :, 0].abs().max().item() > 0
    ts = grad_rollout_maps(res)
    assert ts.output_positions == (0,) and ts.scores.sum() == pytest.approx(1.0)


def test_gradient_rollout_on_a_causal_model_ignores_the_future(tiny_models):
    from probe.runs.grads import attention_gradients

    res = attention_gradients(tiny_models["gpt2"], TEXT, position=3)
    assert res.grads[:, :, 4:].abs().max().item() == 0  # later rows cannot affect position 3
    ts = grad_rollout_maps(res, output_positions=[3])
    assert ts.scores[0, 4:].max() == 0
    assert ts.scores[0, :4].sum() == pytest.approx(1.0)
