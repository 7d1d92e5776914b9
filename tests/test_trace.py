"""The trace core: every site read and edited through one `trace`, checked against
computations that do not use it (transformers' own outputs, plain torch hooks, weight surgery)."""

import copy

import pytest
import torch

from probe import Patch, Resample, ReplaceWeights, Restart, Scale, Zero, run_with_cache, run_with_hooks, trace
from probe.tracing.attention_interface import active_sessions
from probe.tracing.hooks import count_hooks
from probe.models.sites import parse_site, site_names

TEXTS = ["The cat sat on the mat.", "Dogs bark loudly at night when the moon is full."]


def eager_reference(adapter, texts):
    """transformers' own eager attentions and hidden states: ``[layer, batch, head, q, k]``."""
    inputs = adapter.inputs_of(texts)
    model = adapter.model
    prev = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            out = model(**inputs, output_attentions=True, output_hidden_states=True)
    finally:
        model.set_attn_implementation(prev)
    return out


def surgery(adapter, layer, head, factor=0.0):
    """A copy of the model whose output projection scales the head's input slice by ``factor``."""
    ref = copy.deepcopy(adapter)
    ref.__post_init__()
    proj = ref.head_output_modules()[layer]
    cols = slice(head * adapter.head_dim, (head + 1) * adapter.head_dim)
    with torch.no_grad():
        if type(proj).__name__ == "Conv1D":  # GPT-2: weight is [in, out]
            proj.weight[cols, :] *= factor
        else:
            proj.weight[:, cols] *= factor
    return ref


# ---- the four notebook examples (notebooks/07_trace_api.ipynb) ------------------------------
@pytest.mark.parametrize("family", ["bert", "gpt2", "llama"])
def test_cache_all_patterns_equals_transformers_eager_attentions(tiny_models, family):
    adapter = tiny_models[family]
    cache = trace(adapter, TEXTS, read="pattern")
    ref = eager_reference(adapter, TEXTS)
    assert sorted(cache) == sorted(site_names(adapter, "pattern"))
    for layer in range(adapter.n_layers):
        got = cache[f"blocks.{layer}.attn.hook_pattern"]
        assert got.shape == ref.attentions[layer].shape  # [batch, head, query, key]
        mask = adapter.inputs_of(TEXTS)["attention_mask"].bool()
        assert torch.allclose(got[..., mask[1]], ref.attentions[layer][..., mask[1]], atol=1e-5)
    assert torch.equal(cache.stack("pattern")[1], cache["pattern", 1])  # [layer, batch, head, q, k]


@pytest.mark.parametrize("family", ["bert", "gpt2", "llama", "t5"])
def test_zero_one_head_equals_weight_surgery(tiny_models, family):
    adapter = tiny_models[family]
    clean = adapter(TEXTS).last_hidden_state
    out = trace(adapter, TEXTS, edit={"blocks.1.attn.hook_z": Zero(head=2)}).output.last_hidden_state
    expected = surgery(adapter, 1, 2).run(TEXTS).last_hidden_state
    assert torch.allclose(out, expected, atol=1e-5)
    assert (out - clean).abs().max() > 1e-6
    assert torch.equal(adapter(TEXTS).last_hidden_state, clean)  # nothing left behind


def test_patch_one_head_from_a_clean_run_equals_a_plain_torch_hook(tiny_models):
    adapter = tiny_models["gpt2"]
    clean_text, corrupt_text = ["the cat sat on the mat"], ["the dog sat on the rug"]
    clean = trace(adapter, clean_text, read=["blocks.0.attn.hook_z"])
    z = clean["blocks.0.attn.hook_z"]  # [batch, seq, head, head_dim]
    patched = trace(adapter, corrupt_text, edit={"blocks.0.attn.hook_z": Patch(z[:, :, 3], head=3)})

    dh = adapter.head_dim  # the reference: overwrite the slice at the projection with torch alone
    proj = adapter.head_output_modules()[0]

    def by_hand(module, args):
        x = args[0].clone()
        x[..., 3 * dh : 4 * dh] = z[:, :, 3].reshape(1, -1, dh)
        return (x,)

    handle = proj.register_forward_pre_hook(by_hand)
    try:
        expected = adapter(corrupt_text).last_hidden_state
    finally:
        handle.remove()
    assert torch.allclose(patched.output.last_hidden_state, expected, atol=1e-6)
    assert not torch.allclose(expected, adapter(corrupt_text).last_hidden_state, atol=1e-4)
    same = trace(adapter, clean_text, edit={"blocks.0.attn.hook_z": Patch(z[:, :, 3], head=3)})
    assert torch.allclose(same.output.last_hidden_state, clean.output.last_hidden_state, atol=1e-6)


def test_a_custom_edit_function_equals_weight_surgery(tiny_models):
    adapter = tiny_models["bert"]
    seen = []

    def double_head_1(z, ctx):  # a TransformerLens-style hook function: (activation, hook) -> activation
        seen.append((ctx.name, tuple(z.shape)))
        z[:, :, 1] = 2 * z[:, :, 1]
        return z

    out = run_with_hooks(adapter, TEXTS, fwd_hooks=[("blocks.0.attn.hook_z", double_head_1)])
    expected = surgery(adapter, 0, 1, factor=2.0).run(TEXTS).last_hidden_state
    assert torch.allclose(out.last_hidden_state, expected, atol=1e-5)
    n = adapter.inputs_of(TEXTS)["input_ids"].shape[1]
    assert seen == [("blocks.0.attn.hook_z", (2, n, 4, adapter.head_dim))]
    scaled = trace(adapter, TEXTS, edit={"blocks.0.attn.hook_z": Scale(2.0, head=1)}).output
    assert torch.allclose(scaled.last_hidden_state, out.last_hidden_state, atol=1e-6)


# ---- the other sites and edits ---------------------------------------------------------------------
@pytest.mark.parametrize("family", ["bert", "gpt2", "llama"])
def test_residual_and_value_sites_equal_their_definitions(tiny_models, family):
    adapter = tiny_models[family]
    out, cache = run_with_cache(adapter, TEXTS)
    ref = eager_reference(adapter, TEXTS)
    for layer in range(adapter.n_layers):
        assert torch.allclose(cache["resid_pre", layer], ref.hidden_states[layer], atol=1e-5)
        z = cache["z", layer]
        assert torch.equal(cache["proj_in", layer], z.reshape(*z.shape[:2], -1))
        # z = pattern @ v, per head (GQA heads repeated in v; GPT-2's v is the last third of c_attn)
        expected = torch.einsum("bhqk,bkhd->bqhd", cache["pattern", layer], cache["v", layer])
        assert torch.allclose(z, expected, atol=1e-5)
    last = adapter.n_layers - 1
    if family == "bert":  # GPT-2 and Llama apply a final norm after the last block
        assert torch.allclose(cache["resid_post", last], out.last_hidden_state, atol=1e-5)
    assert torch.allclose(cache["resid_post", 0], cache["resid_pre", 1])


def test_resample_takes_another_rows_value(tiny_models):
    adapter = tiny_models["bert"]
    texts = ["the cat sat on the mat", "the dog sat on the rug"]  # same length
    clean = trace(adapter, texts, read=["blocks.0.hook_resid_post"])
    swapped = trace(
        adapter, texts, edit={"blocks.0.hook_resid_post": Resample(perm=(1, 0))}, read=["blocks.1.hook_resid_post"]
    )
    alone = [
        trace(
            adapter,
            [t],
            edit={"blocks.0.hook_resid_post": Patch(clean["resid_post", 0][j])},
            read=["blocks.1.hook_resid_post"],
        )
        for j, t in zip((1, 0), texts)
    ]
    for i in range(2):
        assert torch.allclose(swapped["resid_post", 1][i], alone[i]["resid_post", 1][0], atol=1e-5)
    derangement = trace(
        adapter, texts, edit={"blocks.0.hook_resid_post": Resample()}, read=["blocks.1.hook_resid_post"]
    )
    assert torch.allclose(derangement["resid_post", 1], swapped["resid_post", 1])  # two rows: the only derangement


def test_uniform_weights_on_the_pattern_site(tiny_models):
    adapter = tiny_models["llama"]  # causal, grouped-query
    cache = trace(
        adapter,
        TEXTS[:1],
        edit={"blocks.1.attn.hook_pattern": ReplaceWeights(head=2)},
        read=["blocks.1.attn.hook_pattern", "blocks.1.attn.hook_v", "blocks.1.attn.hook_z"],
    )
    a = cache["pattern", 1][0, 2]
    n = a.shape[-1]
    assert torch.allclose(a, torch.ones(n, n).tril() / torch.arange(1, n + 1)[:, None], atol=1e-6)
    assert torch.allclose(cache["z", 1][0, :, 2], a @ cache["v", 1][0, :, 2], atol=1e-5)


def test_restart_from_a_cached_stream_equals_the_full_forward(tiny_models):
    adapter = tiny_models["bert"]
    edit = {"blocks.1.attn.hook_z": Zero(head=0)}
    full = trace(adapter, TEXTS, edit=edit, read=["blocks.1.hook_resid_pre", "blocks.1.attn.hook_proj_in"])
    restarted = trace(adapter, TEXTS, edit=edit, restart_from=Restart(1, full["resid_pre", 1]))
    assert torch.allclose(restarted.output.last_hidden_state, full.output.last_hidden_state, atol=1e-6)
    at_site = trace(adapter, TEXTS, edit=edit, restart_from=Restart(1, full["resid_pre", 1], full["proj_in", 1]))
    # the cached projection input is the edited one: the restart applies the edit to it again (zero twice)
    assert torch.allclose(at_site.output.last_hidden_state, full.output.last_hidden_state, atol=1e-6)


def test_edits_on_chosen_rows_and_nested_traces(tiny_models):
    adapter = tiny_models["gpt2"]
    text = [TEXTS[1]] * 2
    out = trace(adapter, text, edit={"blocks.0.attn.hook_z": Zero(head=1)}, rows=[1]).output.last_hidden_state
    single = trace(adapter, text[:1], edit={"blocks.0.attn.hook_z": Zero(head=1)}).output.last_hidden_state
    assert torch.allclose(out[0], adapter(text[:1]).last_hidden_state[0], atol=1e-6)
    assert torch.allclose(out[1], single[0], atol=1e-6)
    with_outer = trace(adapter, text[:1], read=["blocks.1.attn.hook_z"])
    from probe.tracing.trace_context import Trace

    with Trace(adapter, read=["blocks.1.attn.hook_z"]) as outer:
        inner = trace(adapter, text[:1], edit={"blocks.0.attn.hook_z": Zero(head=1)}, read=["blocks.1.attn.hook_z"])
    assert torch.equal(outer.cache["z", 1], inner["z", 1])  # the outer trace saw the inner's forward
    assert not torch.allclose(inner["z", 1], with_outer["z", 1])


def test_hooks_and_sessions_are_gone_after_a_trace_that_raised(tiny_models):
    adapter = tiny_models["bert"]
    before = count_hooks(adapter.model)
    with pytest.raises(RuntimeError, match="boom"):

        def boom(z, ctx):
            raise RuntimeError("boom")

        trace(adapter, TEXTS, read="pattern", edit={"blocks.0.attn.hook_z": boom})
    assert count_hooks(adapter.model) == before and active_sessions(adapter.model) == 0
    assert adapter.model.config._attn_implementation == "sdpa"


@pytest.mark.parametrize("family", ["bert", "llama"])
def test_a_trace_and_its_read_tensors_are_freed_with_their_last_reference(tiny_models, family):
    """No reference cycle keeps a finished trace, its cache or what it read alive until the
    cyclic collector happens to run (a reader that closed over the trace did: every batch of
    a loop kept its cache: SmolLM2's 128 texts peaked at 2.84 GiB, 1.94 without): with the collector off, dropping
    the cache frees the tensors, with reads, edits and patterns alike."""
    import gc
    import weakref

    from probe.tracing.trace_context import Trace

    adapter = tiny_models[family]
    inputs = adapter.inputs_of(TEXTS)
    gc.collect()
    gc.disable()
    try:
        for read, edit in (
            (["blocks.0.attn.hook_z", "blocks.1.hook_resid_pre"], None),
            (["blocks.1.attn.hook_pattern", "blocks.0.hook_mlp_out"], {"blocks.0.attn.hook_z": Zero(head=1)}),
        ):
            with Trace(adapter, read=read, edit=edit) as tr:
                adapter.model(**inputs)
            tensor = weakref.ref(tr.cache[read[0]])
            traced, cache = weakref.ref(tr), weakref.ref(tr.cache)
            del tr
            assert traced() is None and cache() is None and tensor() is None, read
            got = weakref.ref(trace(adapter, inputs, read=read, edit=edit)[read[1]])
            assert got() is None, read
    finally:
        gc.enable()


def test_site_names_are_checked(tiny_models):
    adapter = tiny_models["bert"]
    assert parse_site("decoder.blocks.3.attn.hook_pattern").stack == "decoder"
    with pytest.raises(ValueError, match=r"layers 0\.\.1"):
        trace(adapter, TEXTS, read=["blocks.5.attn.hook_z"])
    with pytest.raises(ValueError, match="unknown site"):
        trace(adapter, TEXTS, read=["blocks.0.mlp.hook_post"])
    with pytest.raises(ValueError, match="interface"):
        trace(tiny_models["bert"], TEXTS, read="pattern", path="nope")


def test_the_old_mechanisms_are_views_of_the_trace(tiny_models):
    """The differential tests (sweep vs naive loop, restart vs full forward) run through these,
    so they test the trace core (capture and the head interventions: see tests/test_architecture.py)."""
    from probe.tracing.restart import ResidualCache, RestartFrom
    from probe.tracing.trace_context import Trace

    for cls in (ResidualCache, RestartFrom):
        assert issubclass(cls, Trace), cls


# ---- any module's input or output: ModuleSite ------------------------------------------------
@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_module_site_reads_and_edits_any_module(tiny_models, family):
    """A module's output read through the trace equals transformers' own hidden state; an
    edit of it changes the forward exactly as the same edit by a plain torch hook."""
    from probe.tracing.site_keys import ModuleSite

    adapter = tiny_models[family]
    ref = eager_reference(adapter, TEXTS)
    before = count_hooks(adapter.model)  # after transformers' own output-recording hooks are in
    emb = adapter.embeddings()
    if family == "bert":  # BERT's embeddings module (word + position + type, LayerNorm) is hidden_states[0]
        site, want = ModuleSite(adapter.model.embeddings, "output", "emb"), ref.hidden_states[0]
    else:  # GPT-2's first block's input is hidden_states[0]
        site, want = ModuleSite(adapter.model.h[0], "input", "block0.in"), ref.hidden_states[0]
    cache = trace(adapter, TEXTS, read=[site])
    assert torch.allclose(cache["emb" if family == "bert" else "block0.in"], want, atol=1e-6)

    def halve(x, ctx):
        return x * 0.5

    edited = trace(adapter, TEXTS, edit={ModuleSite(emb, "output"): halve}).output
    handle = emb.register_forward_hook(lambda m, a, out: out * 0.5)
    try:
        with torch.no_grad():
            plain = adapter.model(**adapter.inputs_of(TEXTS))
    finally:
        handle.remove()
    first = lambda o: o[0] if isinstance(o, tuple) else o.last_hidden_state  # noqa: E731
    assert torch.allclose(first(edited), first(plain), atol=1e-6)
    assert (first(edited) - first(ref)).abs().max() > 1e-3  # the edit changed the output
    assert count_hooks(adapter.model) == before  # the trace's hooks are gone
    with pytest.raises(ValueError, match="'input' or 'output'"):
        ModuleSite(emb, "middle")
