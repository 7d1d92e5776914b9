"""Head interventions equal removing the head's slice before the output projection."""

import copy

import pytest
import torch

from probe.tracing.hooks import count_hooks
from probe.interventions.heads import HeadGates, HeadOutputRecorder, ablate_heads, head_output_means

TEXTS = ["The cat sat on the mat.", "Dogs bark loudly at night when the moon is full."]
FAMILIES = ["bert", "roberta", "distilbert", "gpt2", "llama", "bart", "t5"]


def run(adapter, texts=TEXTS):
    encs = [adapter.encode(t) for t in texts]
    inputs = adapter.batch(encs)
    if adapter.arch == "encoder-decoder":
        inputs.update(adapter.decoder_inputs([adapter.encode(t, target=True) for t in texts]))
    with torch.no_grad():
        return adapter.model(**inputs).last_hidden_state


def without_head_slice(adapter, layer, head):
    """The reference: a copy of the model whose output projection ignores the head's slice."""
    ref = copy.deepcopy(adapter)
    ref.__post_init__()
    proj = ref.head_output_modules()[layer]
    dh = adapter.head_dim
    cols = slice(head * dh, (head + 1) * dh)
    with torch.no_grad():
        if type(proj).__name__ == "Conv1D":  # GPT-2: weight is [in, out]
            proj.weight[cols, :] = 0
        else:  # Linear: weight is [out, in]
            proj.weight[:, cols] = 0
    return ref


@pytest.mark.parametrize("family", FAMILIES)
def test_zero_ablation_equals_removing_head_slice(tiny_models, family):
    adapter = tiny_models[family]
    clean = run(adapter)
    with ablate_heads(adapter, [(1, 2)], mode="zero"):
        ablated = run(adapter)
    expected = run(without_head_slice(adapter, 1, 2))
    assert torch.allclose(ablated, expected, atol=1e-5)
    assert (ablated - clean).abs().max() > 1e-6  # the head mattered at all
    assert torch.allclose(run(adapter), clean)  # hooks gone: back to clean


def test_per_row_ablation_equals_one_forward_per_head(tiny_models):
    adapter = tiny_models["bert"]
    heads = [(0, 0), (0, 3), (1, 1)]
    text = TEXTS[1]
    batch_rows = run(adapter, [text] * len(heads))
    with ablate_heads(adapter, heads, mode="zero", per_row=True):
        batched = run(adapter, [text] * len(heads))
    for r, h in enumerate(heads):
        with ablate_heads(adapter, [h], mode="zero"):
            single = run(adapter, [text])
        assert torch.allclose(batched[r], single[0], atol=1e-5)
        assert not torch.allclose(batched[r], batch_rows[r], atol=1e-4)


def test_patching_from_same_run_is_identity_and_from_other_run_moves_output(tiny_models):
    adapter = tiny_models["gpt2"]
    a, b = ["the cat sat on the mat"], ["the dog sat on the rug"]
    with HeadOutputRecorder(adapter) as rec:
        clean = run(adapter, a)
    clean_src = dict(rec.outputs)
    with ablate_heads(adapter, [(0, 1), (1, 3)], mode="patch", source=clean_src):
        same = run(adapter, a)
    assert torch.allclose(same, clean, atol=1e-6)
    corrupted = run(adapter, b)
    all_heads = [(l, h) for l in range(2) for h in range(4)]
    with ablate_heads(adapter, all_heads, mode="patch", source=clean_src):
        patched_all = run(adapter, b)
    # patching every head restores the attention outputs, not the residual stream: the
    # output moves towards clean but differs from both
    assert (patched_all - clean).norm() < (corrupted - clean).norm()


def test_mean_ablation_uses_the_given_mean(tiny_models):
    adapter = tiny_models["bert"]
    means = head_output_means(adapter, TEXTS)
    assert means.shape == (2, 4, adapter.head_dim)
    with ablate_heads(adapter, [(1, 2)], mode="mean", means=means):
        out_mean = run(adapter)
    ref = without_head_slice(adapter, 1, 2)
    proj = ref.head_output_modules()[1]
    dh = adapter.head_dim
    with torch.no_grad():  # adding W_O[:, slice] @ mean to the bias is the same intervention
        proj.bias += adapter.head_output_modules()[1].weight[:, 2 * dh : 3 * dh] @ means[1, 2]
    assert torch.allclose(out_mean, run(ref), atol=1e-5)


def test_gates_at_one_change_nothing_and_give_gradients(tiny_models):
    adapter = tiny_models["bert"]
    clean = run(adapter)
    gates = torch.ones(2, 4, requires_grad=True)
    encs = [adapter.encode(t) for t in TEXTS]
    with HeadGates(adapter, gates):
        out = adapter.model(**adapter.batch(encs)).last_hidden_state
    assert torch.allclose(out.detach(), clean, atol=1e-6)
    out.pow(2).sum().backward()
    adapter.model.zero_grad(set_to_none=True)  # leave the shared model as found
    assert gates.grad.shape == (2, 4) and (gates.grad.abs() > 0).all()
    with pytest.raises(ValueError, match="shape"):
        HeadGates(adapter, torch.ones(3, 4))


def test_bad_heads_name_the_valid_range(tiny_models):
    adapter = tiny_models["bert"]
    with pytest.raises(ValueError, match=r"heads 0\.\.3"):
        ablate_heads(adapter, [(0, 7)])
    with pytest.raises(ValueError, match=r"layers 0\.\.1"):
        ablate_heads(adapter, [(5, 0)])
    with pytest.raises(ValueError, match="unknown ablation mode"):
        ablate_heads(adapter, [(0, 0)], mode="shuffle")


def test_no_hook_left_after_intervened_forward_raises(tiny_models):
    adapter = tiny_models["bert"]
    before = count_hooks(adapter.model)
    with pytest.raises(RuntimeError):
        with ablate_heads(adapter, [(0, 1)]):
            raise RuntimeError("fails inside")
    with pytest.raises(Exception):  # noqa: B017 (whatever the model raises; the test is the cleanup)
        with ablate_heads(adapter, [(0, 1)]), HeadOutputRecorder(adapter):
            adapter.model(input_ids=torch.tensor([[1, 10**9]]))
    assert count_hooks(adapter.model) == before


def test_head_intervention_takes_the_trace_edits(tiny_models):
    """One edit vocabulary: the trace's edits at a layer's z site; several per layer in order;
    gates at 0 on one head equal zeroing it; anything else is refused in one line."""
    from probe.errors import InputError
    from probe.interventions.heads import HeadIntervention
    from probe.tracing.edits import Gate, Mean, Scale, Zero

    adapter = tiny_models["bert"]
    with HeadIntervention(adapter, {1: Zero(head=2)}):
        zeroed = run(adapter)
    with HeadIntervention(adapter, {1: [Scale(3.0, head=2), Scale(0.0, head=2)]}):
        scaled = run(adapter)
    means = head_output_means(adapter, TEXTS)
    with HeadIntervention(adapter, {1: [Zero(head=2), Mean(value=means[1, 2], head=2)]}):  # in order: the mean last
        in_order = run(adapter)
    with ablate_heads(adapter, [(1, 2)], mode="mean", means=means):
        mean_ablated = run(adapter)
    assert torch.allclose(in_order, mean_ablated, atol=1e-6) and (in_order - zeroed).abs().max() > 1e-5
    gates = torch.ones(2, 4)
    gates[1, 2] = 0.0
    with HeadIntervention(adapter, {layer: Gate(gates=gates, layer=layer) for layer in range(2)}, path="hooks"):
        gated = run(adapter)
    expected = run(without_head_slice(adapter, 1, 2))
    for out in (zeroed, scaled, gated):
        assert torch.allclose(out, expected, atol=1e-5)
    with pytest.raises(InputError, match="an Edit"):
        HeadIntervention(adapter, {1: "zero"})
    with pytest.raises(InputError, match=r"heads 0\.\.3"):
        HeadIntervention(adapter, {1: Zero(head=9)})
