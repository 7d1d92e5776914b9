"""Every site of a decoder's forward, checked by identities on the model's own forward.

Tiny random causal LMs built from a config (no download), one per block layout: GPT-2
(learned positions, fused q|k|v), Llama (grouped-query), Qwen3 (q/k norms), Gemma 3 (a
sliding-window layer, post-norms), GPT-NeoX (parallel attention and MLP) and Mixtral
(mixture of experts). Each identity would fail if a site were read from the wrong place,
on the wrong side of a norm, before rotary, or with the wrong head mapping.
"""

from __future__ import annotations

import pytest
import torch

from probe.errors import InputError, NotApplicable
from probe.models import ModelAdapter
from probe.models.sites import kv_head_of
from probe.inputs.padding import padded_inputs
from probe.tracing.site_keys import ModuleSite
from probe.tracing.trace import trace
from probe.tracing.generate import trace_generate
from probe.tracing.edits import Zero

TEXTS = ["The cat sat on the mat today.", "A dog barked.", "Birds sing in the tall green trees at dawn."]
TOL = dict(atol=1e-5, rtol=1e-5)


def _configs(vocab: int) -> dict:
    import transformers as T

    common = dict(vocab_size=vocab, pad_token_id=0, bos_token_id=101, eos_token_id=102)
    gqa = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64)
    return {
        "gpt2": T.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=64, **common),
        "llama": T.LlamaConfig(max_position_embeddings=64, **gqa, **common),
        "qwen3": T.Qwen3Config(head_dim=8, max_position_embeddings=64, **gqa, **common),
        "gemma3_text": T.Gemma3TextConfig(
            head_dim=8,
            sliding_window=3,
            layer_types=["sliding_attention", "full_attention"],
            max_position_embeddings=64,
            **gqa,
            **common,
        ),
        "gpt_neox": T.GPTNeoXConfig(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            use_parallel_residual=True,
            max_position_embeddings=64,
            **common,
        ),
        "mixtral": T.MixtralConfig(
            num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=64, **gqa, **common
        ),
    }


SEQUENTIAL = ("gpt2", "llama", "qwen3", "gemma3_text", "mixtral")
FAMILIES = SEQUENTIAL + ("gpt_neox",)


@pytest.fixture(scope="module")
def decoders(bert_tokenizer):
    """model type -> adapter of a seeded tiny causal LM (float32, eager-capable)."""
    import transformers as T

    from probe.models.architectures import family_for

    out = {}
    for t, cfg in _configs(len(bert_tokenizer)).items():
        torch.manual_seed(0)
        model = T.AutoModelForCausalLM.from_config(cfg)
        with torch.no_grad():  # random norms' weights, so that a site on the wrong side of a norm shows
            for name, p in model.named_parameters():
                if "norm" in name and p.dim() == 1:
                    p.uniform_(0.5, 1.5)
        out[t] = ModelAdapter(name=f"tiny-{t}", model=model, tokenizer=bert_tokenizer, family=family_for(t))
    return out


def _all(adapter, texts=TEXTS[:2], **kw):
    return trace(adapter, texts, read=lambda name: True, **kw)


@pytest.mark.parametrize("t", FAMILIES)
def test_scores_softmax_to_the_pattern_and_come_from_q_and_k_after_rotary(decoders, t):
    """The scores are q·k scaled with q and k after rotary: ``hook_rot_q``/``hook_rot_k`` on the
    rotary models, ``hook_q``/``hook_k`` on GPT-2 (no rotary, no ``hook_rot_*``)."""
    adapter = decoders[t]
    cache = _all(adapter)
    kv = adapter.config.num_key_value_heads if hasattr(adapter.config, "num_key_value_heads") else adapter.n_heads
    rot = "rot_" if t != "gpt2" else ""
    assert ("blocks.0.attn.hook_rot_q" in cache) == (t != "gpt2")
    for layer in range(adapter.n_layers):
        scores = cache[f"blocks.{layer}.attn.hook_attn_scores"]
        pattern = cache[f"blocks.{layer}.attn.hook_pattern"]
        torch.testing.assert_close(torch.softmax(scores, -1), pattern, **TOL)
        q, k = cache[f"blocks.{layer}.attn.hook_{rot}q"], cache[f"blocks.{layer}.attn.hook_{rot}k"]
        assert q.shape[2] == adapter.n_heads and k.shape[2] == kv  # keys per KV head
        module = adapter.attention_modules()[layer]
        scale = getattr(module, "scaling", adapter.head_dim**-0.5)
        for h in range(adapter.n_heads):
            raw = torch.einsum("bqd,bkd->bqk", q[:, :, h], k[:, :, kv_head_of(adapter, h)]) * scale
            live = scores[:, h] > -1e4  # unmasked entries (the mask adds the dtype's minimum)
            torch.testing.assert_close(raw[live], scores[:, h][live], **TOL)


@pytest.mark.parametrize("t", ["llama", "qwen3", "mixtral"])
def test_q_and_k_are_before_rotary_and_rotate_into_rot_q_and_rot_k(decoders, t):
    """TransformerLens's names: ``hook_q``/``hook_k`` are the projections' output split into heads
    (before q/k norms and rotary), ``hook_rot_q``/``hook_rot_k`` are them through the model's own
    q/k norm and rotary embedding (its ``rotary_emb`` and ``apply_rotary_pos_emb``)."""
    import sys

    adapter = decoders[t]
    ids = adapter.inputs_of(TEXTS[:1])
    cache = trace(adapter, ids, read=lambda n: "hook_q" in n or "hook_k" in n or "hook_rot" in n or "resid_pre" in n)
    base = adapter.model.model
    for layer, block in enumerate(base.layers):
        attn, b = block.self_attn, f"blocks.{layer}."
        x = block.input_layernorm(cache[b + "hook_resid_pre"])
        q, k = cache[b + "attn.hook_q"], cache[b + "attn.hook_k"]
        torch.testing.assert_close(q.flatten(-2), attn.q_proj(x), **TOL)
        torch.testing.assert_close(k.flatten(-2), attn.k_proj(x), **TOL)
        assert k.shape[-2] == adapter.config.num_key_value_heads
        if hasattr(attn, "q_norm"):
            q, k = attn.q_norm(q), attn.k_norm(k)
        position = torch.arange(q.shape[1])[None]
        cos, sin = base.rotary_emb(x, position)
        rotate = sys.modules[type(attn).__module__].apply_rotary_pos_emb
        rq, rk = rotate(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
        torch.testing.assert_close(rq.transpose(1, 2), cache[b + "attn.hook_rot_q"], **TOL)
        torch.testing.assert_close(rk.transpose(1, 2), cache[b + "attn.hook_rot_k"], **TOL)
        assert not torch.allclose(cache[b + "attn.hook_q"][:, 1:], cache[b + "attn.hook_rot_q"][:, 1:], atol=1e-3)


def test_rotary_sites_are_refused_with_the_reason_where_they_do_not_exist(decoders):
    with pytest.raises(NotApplicable, match=r"has no rotary embeddings, so no attn.hook_rot_q: its queries and keys"):
        trace(decoders["gpt2"], TEXTS[:1], read="blocks.0.attn.hook_rot_q")
    with pytest.raises(NotApplicable, match=r"fuses its query/key/value projection.*read attn.hook_rot_k"):
        trace(decoders["gpt_neox"], TEXTS[:1], read="blocks.0.attn.hook_k")
    every = trace(decoders["gpt_neox"], TEXTS[:1], read=lambda n: True)
    assert "blocks.0.attn.hook_rot_k" in every and "blocks.0.attn.hook_k" not in every


def test_a_query_edit_before_rotary_equals_zeroing_its_projection(decoders):
    """Zeroing head 2's hook_q (before rotary) is zeroing its rows of q_proj."""
    import copy

    adapter = decoders["qwen3"]  # a q norm between the projection and rotary: the site is before it
    edited = trace(adapter, TEXTS[:2], edit={"blocks.1.attn.hook_q": Zero(head=2)}).output.logits
    surgery = copy.deepcopy(adapter.model)
    d = adapter.head_dim
    with torch.no_grad():
        surgery.model.layers[1].self_attn.q_proj.weight[2 * d : 3 * d] = 0
        want = surgery(**adapter.inputs_of(TEXTS[:2])).logits
    torch.testing.assert_close(edited, want, **TOL)


@pytest.mark.parametrize("t", FAMILIES)
def test_norm_sites_rebuild_the_norms_input_and_output(decoders, t):
    """``ln1``/``ln2`` ``hook_normalized`` × ``hook_scale`` is the norm's input (centred for
    LayerNorm), and ``hook_normalized`` through the norm's own weight (and bias) is its output."""
    from probe.models.block_parts import part_of
    from probe.models.sites import layer_modules

    adapter = decoders[t]
    blocks = layer_modules(adapter)
    for layer, block in enumerate(blocks):
        for ln in ("ln1", "ln2"):
            norm = part_of(adapter, block, f"{ln}_normalized")[0]
            b = f"blocks.{layer}.{ln}."
            sites = [
                b + "hook_normalized",
                b + "hook_scale",
                ModuleSite(norm, "input", "x"),
                ModuleSite(norm, "output", "y"),
            ]
            cache = trace(adapter, TEXTS[:2], read=sites)
            x, normalized, scale = cache["x"], cache[b + "hook_normalized"], cache[b + "hook_scale"]
            if isinstance(norm, torch.nn.LayerNorm):
                x = x - x.mean(-1, keepdim=True)
            assert scale.shape == (*x.shape[:2], 1)
            torch.testing.assert_close(normalized * scale, x, **TOL)
            weight = (1 + norm.weight) if "Gemma" in type(norm).__name__ else norm.weight
            bias = norm.bias if getattr(norm, "bias", None) is not None else 0
            torch.testing.assert_close(normalized * weight + bias, cache["y"], **TOL)


def test_norm_sites_are_read_only(decoders):
    with pytest.raises(InputError, match=r"blocks.0.ln1.hook_normalized is read only"):
        trace(decoders["llama"], TEXTS[:1], edit={"blocks.0.ln1.hook_normalized": Zero()})


@pytest.mark.parametrize("t", FAMILIES)
def test_heads_results_sum_to_the_attention_output(decoders, t):
    adapter = decoders[t]
    proj = adapter.head_output_modules()[0]
    cache = trace(
        adapter,
        TEXTS[:2],
        read=["blocks.0.attn.hook_result", "blocks.0.hook_attn_out", ModuleSite(proj, "output", "proj")],
    )
    result = cache["blocks.0.attn.hook_result"]
    assert result.shape[2:] == (adapter.n_heads, adapter.config.hidden_size)
    bias = proj.bias if getattr(proj, "bias", None) is not None else 0
    torch.testing.assert_close(result.sum(2) + bias, cache["proj"], **TOL)
    if t != "gemma3_text":  # Gemma's attn_out is after its post-attention norm
        torch.testing.assert_close(cache["proj"], cache["blocks.0.hook_attn_out"], **TOL)


@pytest.mark.parametrize("t", FAMILIES)
def test_the_residual_stream_adds_up_and_ends_in_the_logits(decoders, t):
    adapter = decoders[t]
    cache = _all(adapter)
    first = cache["hook_embed"] + (cache["hook_pos_embed"] if t == "gpt2" else 0)
    torch.testing.assert_close(first, cache["blocks.0.hook_resid_pre"], **TOL)
    for layer in range(adapter.n_layers):
        b = f"blocks.{layer}."
        pre, attn, mlp, post = (
            cache[b + s] for s in ("hook_resid_pre", "hook_attn_out", "hook_mlp_out", "hook_resid_post")
        )
        if t in SEQUENTIAL:
            torch.testing.assert_close(cache[b + "hook_resid_mid"], pre + attn, **TOL)
            torch.testing.assert_close(post, cache[b + "hook_resid_mid"] + mlp, **TOL)
        else:
            torch.testing.assert_close(post, pre + attn + mlp, **TOL)
    last = cache[f"blocks.{adapter.n_layers - 1}.hook_resid_post"]
    final = next(
        m for n, m in adapter.model.named_modules() if n.split(".")[-1] in ("norm", "ln_f", "final_layer_norm")
    )
    with torch.no_grad():
        torch.testing.assert_close(final(last), cache["ln_final.hook_normalized"], **TOL)
        logits = adapter.model.get_output_embeddings()(cache["ln_final.hook_normalized"])
    torch.testing.assert_close(logits, cache.output.logits, **TOL)


def test_router_logits_of_a_mixture_of_experts(decoders):
    adapter = decoders["mixtral"]
    cache = trace(adapter, TEXTS[:2], read=["blocks.1.mlp.hook_router_logits", "blocks.1.hook_mlp_in"])
    logits = cache["blocks.1.mlp.hook_router_logits"]
    mlp_in = cache["blocks.1.hook_mlp_in"]
    assert logits.shape == mlp_in.shape[:2] + (4,)
    gate = adapter.model.model.layers[1].mlp.gate
    torch.testing.assert_close(logits, mlp_in @ gate.weight.T, **TOL)
    with pytest.raises(InputError, match="read only"):
        trace(adapter, TEXTS[:1], edit={"blocks.1.mlp.hook_router_logits": Zero()})


@pytest.mark.parametrize("t", ["llama", "gpt2", "gemma3_text"])
def test_zeroing_a_heads_result_equals_weight_surgery(decoders, t):
    import copy

    adapter = decoders[t]
    edited = trace(adapter, TEXTS[:2], edit={"blocks.1.attn.hook_result": Zero(head=2)}).output.logits
    surgery = copy.deepcopy(adapter.model)
    proj = surgery.get_submodule(
        [n for n, m in adapter.model.named_modules() if m is adapter.head_output_modules()[1]][0]
    )
    d = adapter.head_dim
    with torch.no_grad():
        if type(proj).__name__ == "Conv1D":
            proj.weight[2 * d : 3 * d, :] = 0
        else:
            proj.weight[:, 2 * d : 3 * d] = 0
        want = surgery(**adapter.inputs_of(TEXTS[:2])).logits
    torch.testing.assert_close(edited, want, **TOL)
    assert not torch.allclose(edited, adapter(TEXTS[:2]).logits, atol=1e-4)


def test_a_key_head_edit_equals_zeroing_its_projection(decoders):
    import copy

    adapter = decoders["llama"]  # rotary of a zero key is zero: the surgery is exact
    edited = trace(adapter, TEXTS[:2], edit={"blocks.0.attn.hook_k": Zero(head=1)}).output.logits
    surgery = copy.deepcopy(adapter.model)
    d = adapter.head_dim
    with torch.no_grad():
        surgery.model.layers[0].self_attn.k_proj.weight[d : 2 * d] = 0
        want = surgery(**adapter.inputs_of(TEXTS[:2])).logits
    torch.testing.assert_close(edited, want, **TOL)


def test_a_gradient_at_any_site_in_the_same_call(decoders):
    adapter = decoders["llama"]
    last = f"blocks.{adapter.n_layers - 1}.hook_resid_post"
    cache = trace(adapter, TEXTS[:1], read=[last, "blocks.0.attn.hook_q"], grad=lambda out: out.logits[0, -1, 7])
    r = cache[last].detach().requires_grad_()
    logit = adapter.model.lm_head(adapter.model.model.norm(r))[0, -1, 7]
    (want,) = torch.autograd.grad(logit, r)
    torch.testing.assert_close(cache.grad(last), want, **TOL)
    assert cache.grad("blocks.0.attn.hook_q").shape == cache["blocks.0.attn.hook_q"].shape
    assert cache.grad("blocks.0.attn.hook_q").abs().sum() > 0


def test_sites_a_family_lacks_are_refused_with_the_reason(decoders, tiny_models):
    with pytest.raises(NotApplicable, match="parallel"):
        trace(decoders["gpt_neox"], TEXTS[:1], read="blocks.0.hook_resid_mid")
    with pytest.raises(NotApplicable, match="rotary"):
        trace(decoders["llama"], TEXTS[:1], read="hook_pos_embed")
    with pytest.raises(NotApplicable, match="post-norm"):
        trace(tiny_models["bert"], TEXTS[:1], read="blocks.0.hook_resid_mid")
    names = _all(decoders["gpt_neox"]).keys()
    assert "blocks.0.hook_resid_mid" not in names and "blocks.0.hook_mlp_out" in names


def test_a_site_name_typo_names_the_closest_sites(decoders):
    with pytest.raises(InputError, match=r"closest: blocks\.0\.attn\.hook_pattern"):
        trace(decoders["llama"], TEXTS[:1], read="blocks.0.attn.hook_patern")
    with pytest.raises(InputError, match=r"closest: .*blocks\.1\.hook_resid_mid"):
        trace(decoders["llama"], TEXTS[:1], read="blocks.1.hook_resid_midd")


def test_an_edit_of_the_wrong_shape_names_both_shapes(decoders):
    adapter = decoders["gpt2"]
    with pytest.raises(InputError, match=r"returned \(1, 2, 32\).*site is \(1, \d+, 32\)"):
        trace(adapter, TEXTS[:1], edit={"blocks.0.hook_mlp_out": lambda v, ctx: v[:, :2]})


def test_names_filter_takes_a_name_a_list_or_a_predicate(decoders):
    adapter = decoders["qwen3"]
    one = trace(adapter, TEXTS[:1], read="blocks.1.attn.hook_q")
    some = trace(adapter, TEXTS[:1], read=["blocks.1.attn.hook_q", "hook_embed"])
    pred = trace(adapter, TEXTS[:1], read=lambda n: n.endswith("hook_k"))
    assert list(one) == ["blocks.1.attn.hook_q"]
    assert sorted(some) == ["blocks.1.attn.hook_q", "hook_embed"]
    assert sorted(pred) == ["blocks.0.attn.hook_k", "blocks.1.attn.hook_k"]


# ---- generation ---------------------------------------------------------------------
@pytest.mark.parametrize("t", ["llama", "gpt2", "gemma3_text"])
def test_generation_steps_equal_one_forward_over_the_generated_text(decoders, t):
    adapter = decoders[t]
    new = 4
    sites = ["blocks.1.attn.hook_pattern", "blocks.1.attn.hook_q", "blocks.0.hook_resid_post"]
    cache = trace_generate(adapter, TEXTS[:1], new, read=sites, min_new_tokens=new)
    ids = cache.output
    with torch.no_grad():
        own = adapter.model.generate(
            **adapter.inputs_of(TEXTS[:1]),
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=False,
            pad_token_id=0,
        )
    assert torch.equal(ids, own)
    full = trace(adapter, {"input_ids": ids[:, :-1]}, read=sites)
    n_prompt = cache.inputs["input_ids"].shape[1]
    steps = cache.calls("blocks.1.attn.hook_pattern")
    assert len(steps) == new
    torch.testing.assert_close(steps[0], full["blocks.1.attn.hook_pattern"][:, :, :n_prompt, :n_prompt], **TOL)
    for i, step in enumerate(steps[1:], start=1):
        row = full["blocks.1.attn.hook_pattern"][:, :, n_prompt + i - 1 : n_prompt + i, : n_prompt + i]
        torch.testing.assert_close(step, row, **TOL)
    assert sum(s.shape[2] for s in steps) == ids.shape[1] - 1  # one query row per position
    q = torch.cat(cache.calls("blocks.1.attn.hook_q"), dim=1)
    torch.testing.assert_close(q, full["blocks.1.attn.hook_q"], **TOL)
    resid = torch.cat(cache.calls("blocks.0.hook_resid_post"), dim=1)
    torch.testing.assert_close(resid, full["blocks.0.hook_resid_post"], **TOL)


def test_generate_with_one_head_ablated_equals_weight_surgery(decoders):
    import copy

    adapter = decoders["llama"]
    opts = dict(min_new_tokens=5, output_scores=True, return_dict_in_generate=True)
    ablated = trace_generate(adapter, TEXTS[:1], 5, edit={"blocks.1.attn.hook_z": Zero(head=3)}, **opts).output
    surgery = copy.deepcopy(adapter.model)
    d = adapter.head_dim
    with torch.no_grad():
        surgery.model.layers[1].self_attn.o_proj.weight[:, 3 * d : 4 * d] = 0
        want = surgery.generate(
            **adapter.inputs_of(TEXTS[:1]), max_new_tokens=5, do_sample=False, pad_token_id=0, **opts
        )
    assert torch.equal(ablated.sequences, want.sequences)
    torch.testing.assert_close(torch.stack(ablated.scores), torch.stack(want.scores), **TOL)
    plain = trace_generate(adapter, TEXTS[:1], 5, **opts).output
    assert not torch.allclose(torch.stack(plain.scores), torch.stack(ablated.scores), atol=1e-4)


def test_generation_past_the_position_limit_is_refused_before_any_forward(decoders):
    adapter = decoders["llama"]
    calls = []
    handle = adapter.model.register_forward_pre_hook(lambda m, a: calls.append(1))
    try:
        with pytest.raises(InputError, match="exceed .*64 positions"):
            trace_generate(adapter, TEXTS[:1], 100)
    finally:
        handle.remove()
    assert calls == []


# ---- padding ------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("t", FAMILIES)
def test_padded_batches_of_three_lengths_give_each_text_its_own_forward(decoders, t, side):
    adapter = decoders[t]
    sites = lambda n: n.endswith(("hook_pattern", "hook_q", "hook_resid_post", "hook_mlp_out", "hook_result"))  # noqa: E731
    batch = padded_inputs(adapter, TEXTS, side=side)
    lengths = batch["attention_mask"].sum(1).tolist()
    assert len(set(lengths)) == 3
    cache = trace(adapter, batch, read=sites)
    for i, text in enumerate(TEXTS):
        alone = trace(adapter, [text], read=sites)
        n = lengths[i]
        keep = batch["attention_mask"][i].bool()
        for name in alone:
            got, want = cache[name][i], alone[name][0]
            if name.endswith("hook_pattern"):
                got = got[:, keep][:, :, keep]
            else:
                got = got[keep]
            assert got.shape[0 if not name.endswith("hook_pattern") else 1] == n
            torch.testing.assert_close(got, want, **TOL, msg=lambda m, name=name, i=i: f"{name}, text {i}: {m}")
        torch.testing.assert_close(cache.output.logits[i][keep], alone.output.logits[0], **TOL)


def test_readme_tour_rows(decoders):
    """The README's decoder rows as written (beside TransformerLens), with their shapes."""
    import probe

    adapter, texts, tok = decoders["llama"], TEXTS[:2], 7
    cache = probe.trace(adapter, texts, read=lambda n: n.endswith(("hook_q", "hook_rot_k", "hook_attn_scores")))
    assert cache["blocks.0.attn.hook_rot_k"].shape[2:] == (2, adapter.head_dim)  # [batch, pos, kv_head, d_head]
    assert len(cache) == 3 * adapter.n_layers
    cache = probe.trace(adapter, texts, read=["resid_pre", "resid_mid", "resid_post"])
    assert cache.stack("resid_post").shape[:2] == (adapter.n_layers, 2)
    cache = probe.trace(adapter, texts, read="blocks.1.hook_resid_post", grad=lambda out: out.logits[0, -1, tok])
    g = cache.grad("blocks.1.hook_resid_post")
    assert g.shape == cache["blocks.1.hook_resid_post"].shape and g[1].abs().sum() == 0  # row 1 is not in the objective
    out = probe.trace_generate(adapter, texts[:1], 20, edit={"blocks.1.attn.hook_z": probe.Zero(head=3)}).output
    assert out.shape[1] > adapter.inputs_of(texts[:1])["input_ids"].shape[1]


def test_padding_leak_is_measured_zero_for_masked_models_and_large_for_convbert(decoders, tiny_models, bert_tokenizer):
    import transformers as T

    from probe.inputs.padding import LEAK_TOLERANCE, padding_leak

    assert padding_leak(decoders["llama"]) < LEAK_TOLERANCE
    assert padding_leak(tiny_models["bert"]) < LEAK_TOLERANCE
    cfg = T.ConvBertConfig(
        vocab_size=len(bert_tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
    )
    torch.manual_seed(0)
    conv = ModelAdapter(name="tiny-convbert", model=T.ConvBertModel(cfg), tokenizer=bert_tokenizer, family="convbert")
    assert padding_leak(conv) > 10 * LEAK_TOLERANCE  # its span convolution reads the padding


@pytest.mark.parametrize("t", ["gpt_neox", "llama"])
def test_values_times_the_pattern_give_z_also_for_fused_projections(decoders, t):
    """GPT-NeoX's q|k|v projection is fused (no value module): hook_v is read inside the
    attention function; Llama's from its v_proj (key/value heads repeated)."""
    adapter = decoders[t]
    cache = trace(
        adapter, TEXTS[:2], read=["blocks.1.attn.hook_v", "blocks.1.attn.hook_pattern", "blocks.1.attn.hook_z"]
    )
    v, a = cache["blocks.1.attn.hook_v"], cache["blocks.1.attn.hook_pattern"]
    torch.testing.assert_close(torch.einsum("bhqk,bkhd->bqhd", a, v), cache["blocks.1.attn.hook_z"], **TOL)


def test_score_and_query_edits_do_what_their_definitions_say(decoders):
    """Masking key 2 through hook_attn_scores in every layer equals the model's own
    attention mask with position 2 off; a zeroed query makes its head's pattern uniform
    over the causal keys."""
    adapter = decoders["llama"]
    batch = adapter.inputs_of(TEXTS[:1])

    def mask_key_2(scores, ctx):
        scores[..., 2] = torch.finfo(scores.dtype).min
        return scores

    edit = {f"blocks.{l}.attn.hook_attn_scores": mask_key_2 for l in range(adapter.n_layers)}
    edited = trace(adapter, batch, edit=edit).output.logits
    off = dict(batch, attention_mask=batch["attention_mask"].clone())
    off["attention_mask"][:, 2] = 0
    with torch.no_grad():
        want = adapter.model(**off, position_ids=torch.arange(off["input_ids"].shape[1])[None]).logits
    torch.testing.assert_close(edited, want, **TOL)
    cache = trace(adapter, batch, read="blocks.0.attn.hook_pattern", edit={"blocks.0.attn.hook_q": Zero(head=1)})
    n = batch["input_ids"].shape[1]
    uniform = torch.tril(torch.ones(n, n)) / torch.arange(1, n + 1)[:, None]
    torch.testing.assert_close(cache["blocks.0.attn.hook_pattern"][0, 1], uniform, **TOL)


def test_encoder_decoder_blocks_add_up_where_their_layout_is_known(tiny_models):
    """T5's encoder blocks are pre-norm and sequential; BART's are post-norm (resid_mid
    refused, the stream is each block's LayerNorm of the sum); T5's decoder blocks hold
    cross-attention where the encoder's hold the MLP, so their MLP sites are refused."""
    t5 = tiny_models["t5"]
    names = ["hook_resid_pre", "hook_attn_out", "hook_resid_mid", "hook_mlp_out", "hook_resid_post"]
    cache = trace(t5, TEXTS[:2], read=[f"blocks.1.{n}" for n in names])
    pre, attn, mid, mlp, post = (cache[f"blocks.1.{n}"] for n in names)
    torch.testing.assert_close(mid, pre + attn, **TOL)
    torch.testing.assert_close(post, mid + mlp, **TOL)
    with pytest.raises(NotApplicable, match="no layer.1.DenseReluDense"):
        trace(t5, TEXTS[:1], read="decoder.blocks.0.hook_mlp_out")
    bart = tiny_models["bart"]
    names = ["hook_resid_pre", "hook_attn_out", "hook_mlp_out", "hook_resid_post"]
    cache = trace(bart, TEXTS[:2], read=[f"blocks.0.{n}" for n in names])
    pre, attn, mlp, post = (cache[f"blocks.0.{n}"] for n in names)
    layer = bart.model.encoder.layers[0]
    with torch.no_grad():
        torch.testing.assert_close(post, layer.final_layer_norm(layer.self_attn_layer_norm(pre + attn) + mlp), **TOL)
    with pytest.raises(NotApplicable, match="post-norm"):
        trace(bart, TEXTS[:1], read="blocks.0.hook_resid_mid")
