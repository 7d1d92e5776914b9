"""Tiny GGUF files written here (no download): a random 2-layer Llama as llama.cpp writes it.

:func:`tiny_llama` is a seeded random ``LlamaForCausalLM`` (vocabulary 261: the 256 byte-level
symbols, 4 merges and ``<|endoftext|>``); :func:`write_llama_gguf` writes it as a GGUF file the way llama.cpp's
``convert_hf_to_gguf.py`` does (its metadata keys, tensor names and the q/k row permutation
that transformers undoes on load), in F32, F16 or Q8_0, or with one tensor of a chosen
raw type (to write a quantisation the readers do not know).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

MERGES = ["Ġ t", "h e", "Ġt he", "Ġ a"]
END = 256 + len(MERGES)  # <|endoftext|>: bos, eos and unknown token
VOCAB = END + 1


def _byte_symbols() -> list:
    """GPT-2's byte-level alphabet: byte ``b`` as the printable character byte-level BPE writes."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    out, extra = {}, 0
    for b in range(256):
        if b in printable:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return [out[b] for b in range(256)]


def tiny_llama(seed: int = 0) -> Any:
    """A random 2-layer Llama: 4 query heads, 2 key/value heads, head size 8, d_model 32,
    vocabulary 261, untied embeddings (a trained-looking spread of weights: std 0.2)."""
    import transformers

    cfg = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=END,
        eos_token_id=END,
    )
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn_like(p) * 0.2 + (1.0 if "norm" in name else 0.0))
    return model


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's q/k row order (``convert_hf_to_gguf.LlamaModel.permute``)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _gguf_tensors(model: Any) -> dict:
    cfg = model.config
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    out = {"token_embd.weight": sd["model.embed_tokens.weight"], "output_norm.weight": sd["model.norm.weight"]}
    out["output.weight"] = sd["lm_head.weight"]
    names = {
        "input_layernorm": "attn_norm",
        "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output",
        "post_attention_layernorm": "ffn_norm",
        "mlp.gate_proj": "ffn_gate",
        "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
    }
    for i in range(cfg.num_hidden_layers):
        for hf, gg in names.items():
            w = sd[f"model.layers.{i}.{hf}.weight"]
            if gg == "attn_q":
                w = _permute(w, cfg.num_attention_heads)
            elif gg == "attn_k":
                w = _permute(w, cfg.num_key_value_heads)
            out[f"blk.{i}.{gg}.weight"] = w
    return out


def write_llama_gguf(
    path: Path,
    model: Any,
    qtype: str = "F32",
    architecture: str = "llama",
    raw_type_of: Optional[tuple] = None,
    kind: str = "model",
) -> Path:
    """Write ``model`` (from :func:`tiny_llama`) to ``path`` as GGUF.

    Args:
        qtype: ``F32``, ``F16`` or ``Q8_0`` for the 2-D weights (norms stay F32).
        architecture: ``general.architecture`` written (another one to test refusals).
        raw_type_of: ``(tensor name, GGMLQuantizationType)``: that tensor written as raw bytes
            of that type (a quantisation the readers may not know).
        kind: ``general.type`` (``adapter`` writes a LoRA-like file).
    """
    import gguf

    cfg = model.config
    w = gguf.GGUFWriter(str(path), architecture)
    w.add_type(kind)
    w.add_name("tiny-llama")
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    symbols = _byte_symbols()
    w.add_token_list(symbols + [m.replace(" ", "") for m in MERGES] + ["<|endoftext|>"])
    w.add_token_types([gguf.TokenType.NORMAL] * END + [gguf.TokenType.CONTROL])
    w.add_token_merges(MERGES)
    w.add_bos_token_id(END)
    w.add_eos_token_id(END)
    w.add_unk_token_id(END)
    w.add_add_bos_token(False)
    for name, arr in _gguf_tensors(model).items():
        if raw_type_of and name == raw_type_of[0]:
            block, size = gguf.GGML_QUANT_SIZES[raw_type_of[1]]
            raw = np.zeros((arr.shape[0], arr.shape[1] // block * size), dtype=np.uint8)
            w.add_tensor(name, raw, raw_dtype=raw_type_of[1])
        elif arr.ndim == 1 or qtype == "F32":
            w.add_tensor(name, arr.astype(np.float32))
        elif qtype == "F16":
            w.add_tensor(name, arr.astype(np.float16))
        else:
            data = gguf.quants.quantize(arr.astype(np.float32), gguf.GGMLQuantizationType[qtype])
            w.add_tensor(name, data, raw_dtype=gguf.GGMLQuantizationType[qtype])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
