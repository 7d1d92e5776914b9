"""probe against TransformerLens on the same weights: its head detector (``detect_head``) and
its ``run_with_cache``.

TransformerLens 4 wraps the Hugging Face model itself (``TransformerBridge``); the bridge is
built around a deep copy of the model probe traces (the bridge replaces submodules in
place), so both read the same weights and run the same forward. No download: zoo:induction
is bundled, the GPT-2 and Llama are tiny random models built from a config.

TransformerLens is the optional ``compare`` extra (``pip install -c constraints.txt -e
".[compare]"``); without it these tests skip, saying so.
"""

from __future__ import annotations

import copy

import pytest
import torch

pytest.importorskip(
    "transformer_lens", reason="TransformerLens is not installed: pip install -c constraints.txt -e '.[compare]'"
)

from transformer_lens.head_detector import detect_head
from transformer_lens.model_bridge.sources._bridge_builder import build_bridge_from_module

from probe.analyses.patterns.decoder_heads import decoder_head_scores, probe_tokens
from probe.models import ModelAdapter
from probe.tracing.peers import as_probe_site, transformer_lens_name
from probe.tracing.site_keys import available_sites
from probe.tracing.trace import trace

TOL = dict(atol=1e-5, rtol=1e-5)
T, N_EXAMPLES = 10, 8


def bridge_of(adapter: ModelAdapter):
    """TransformerLens 4's bridge around a copy of ``adapter``'s model (same weights)."""
    model = copy.deepcopy(adapter.model)
    arch = model.config.architectures[0] if model.config.architectures else type(model).__name__
    return build_bridge_from_module(model, arch, hf_config=model.config, tokenizer=adapter.tokenizer)


@pytest.fixture(scope="module")
def induction():
    import probe

    adapter = probe.load_model("zoo:induction")
    return adapter, bridge_of(adapter)


def test_the_bridge_runs_the_same_forward(induction):
    adapter, bridge = induction
    ids = probe_tokens(adapter, T, 2)
    with torch.no_grad():
        ours = adapter.model(input_ids=ids).logits
    torch.testing.assert_close(bridge(ids), ours, **TOL)


def test_detectors_equal_transformer_lens_detect_head_on_zoo_induction(induction):
    """The same repeated random tokens through both: TransformerLens's "mul" score divides by
    all N = 1 + 2T rows, ours by the rows the pattern names, so TL = ours × (N−1)/N for
    previous-token and ours × T/N for duplicate-token and induction, exactly. And TL's
    detector names the heads ours names: L0H3 previous-token, layer 1 induction."""
    adapter, bridge = induction
    ids = probe_tokens(adapter, T, N_EXAMPLES)
    texts = [adapter.tokenizer.decode(row[1:]) for row in ids]
    assert torch.equal(torch.cat([bridge.to_tokens(t) for t in texts]), ids)  # detect_head sees our tokens
    ours = decoder_head_scores(adapter, n_tokens=T, n_examples=N_EXAMPLES).table.set_index(["layer", "head"])
    n = 1 + 2 * T
    factor = {"previous_token": (n - 1) / n, "duplicate_token": T / n, "induction": T / n}
    for role, f in factor.items():
        theirs = detect_head(bridge, texts, role + "_head")  # [layer, head]
        mine = torch.tensor(ours[role].values, dtype=theirs.dtype).view_as(theirs)
        torch.testing.assert_close(theirs, mine * f, **TOL)
    prev = detect_head(bridge, texts, "previous_token_head")
    ind = detect_head(bridge, texts, "induction_head")
    assert divmod(int(prev.argmax()), 4) == (0, 3) and float(prev[0, 3]) > 0.9 * (n - 1) / n
    assert set(ind.flatten().topk(4).indices.tolist()) == {4, 5, 6, 7}  # the four heads of layer 1
    assert float(ind[0].max()) < 0.2 * T / n


def _tiny(kind: str, tokenizer) -> ModelAdapter:
    import transformers as tr

    from probe.models.architectures import family_for

    common = dict(vocab_size=len(tokenizer), pad_token_id=0, bos_token_id=101, eos_token_id=102)
    if kind == "gpt2":
        cfg = tr.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=64, **common)
    else:  # grouped-query attention with rotary positions: 4 query heads read 2 key/value heads
        cfg = tr.LlamaConfig(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=64,
            max_position_embeddings=64,
            **common,
        )
    torch.manual_seed(0)
    model = tr.AutoModelForCausalLM.from_config(cfg).eval()
    with torch.no_grad():  # random norm weights and biases: a site on the wrong side of a norm shows
        for name, p in model.named_parameters():
            if p.dim() == 1 and ("norm" in name or "ln" in name):
                p.uniform_(0.5, 1.5)
    return ModelAdapter(name=f"tiny-{kind}", model=model, tokenizer=tokenizer, family=family_for(kind))


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_every_site_equals_run_with_cache(kind, bert_tokenizer):
    """Every site probe reads on the model equals the tensor TransformerLens's run_with_cache
    holds for it (names and shapes mapped by probe.tracing.peers), to 1e-5 in float32."""
    adapter = _tiny(kind, bert_tokenizer)
    bridge = bridge_of(adapter)
    bridge.set_use_attn_result(True)
    ids = torch.tensor(
        [[101, 2000, 2001, 2002, 2000, 2001, 2002, 2003], [101, 2010, 2011, 2012, 2010, 2011, 2012, 2013]]
    )
    names = available_sites(adapter)
    ours = trace(adapter, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, read=names)
    logits, tl = bridge.run_with_cache(ids)
    torch.testing.assert_close(logits, ours.output.logits, **TOL)
    compared = []
    for name in names:
        theirs = as_probe_site(name, tl[transformer_lens_name(name, tl.keys())], adapter.n_heads)
        torch.testing.assert_close(ours[name].expand_as(theirs), theirs, **TOL, msg=lambda m, n=name: f"{n}: {m}")
        compared.append(name)
    kinds = {n.rsplit(".", 1)[-1] for n in compared}
    assert {"hook_q", "hook_k", "hook_v", "hook_attn_scores", "hook_pattern", "hook_z", "hook_result"} <= kinds
    assert {"hook_attn_out", "hook_mlp_in", "hook_mlp_out", "hook_resid_pre", "hook_resid_mid"} <= kinds
    assert {"hook_resid_post", "hook_embed", "hook_normalized"} <= kinds
    if kind == "llama":  # TransformerLens's names: hook_q/hook_k before rotary, hook_rot_q/hook_rot_k after
        assert {"hook_rot_q", "hook_rot_k"} <= kinds
        assert ours["blocks.1.attn.hook_k"].shape[-2] == 2  # per key/value head, as the bridge's
        for name in ("hook_q", "hook_k", "hook_rot_q", "hook_rot_k"):
            assert transformer_lens_name(f"blocks.1.attn.{name}", tl.keys()) == f"blocks.1.attn.{name}"
        assert not torch.allclose(ours["blocks.1.attn.hook_q"], ours["blocks.1.attn.hook_rot_q"], atol=1e-3)
    else:  # no rotary: no hook_rot_* on either side
        assert not any("hook_rot" in n for n in list(tl.keys()) + names)
