"""Fingerprints of what made a store: the weights, the tokenizer, the forward's dtype and device.

A store's manifest records them (:func:`probe.runs.pipeline.store_manifest`), so that a capture
resumed with other weights, another ``--dtype`` or another tokenizer is refused instead of
mixing two models' maps in one store.

* :func:`weights_fingerprint` hashes every parameter and buffer of the state dict: its name,
  dtype, shape and bytes, in name order (SHA-256, which CPUs with SHA extensions hash
  faster than BLAKE2b; the first 32 hex digits kept). Any changed weight, added or dropped
  layer changes it; loading the same files again gives the same one. Cost: one pass over
  the weights' bytes, once per capture (``python bench/bench_fingerprint.py`` measures it
  on MiniLM).
* :func:`tokenizer_fingerprint` hashes the fast tokenizer's full serialisation
  (``tokenizer.json``: vocabulary, merges, normaliser, pre-tokeniser, added tokens), else
  its vocabulary and special tokens.
"""

from __future__ import annotations

from typing import Any

import hashlib
import json

import torch


def weights_fingerprint(model: Any) -> str:
    """A 32-hex-digit hash of ``model.state_dict()`` (names, dtypes, shapes and bytes).

    Tied weights (one tensor under two names) are hashed under each name; a tensor on a GPU
    is copied to the CPU one at a time."""
    h = hashlib.sha256()
    state = model.state_dict()
    for name in sorted(state):
        t = state[name]
        h.update(f"{name}\0{t.dtype}\0{tuple(t.shape)}\0".encode())
        if t.device.type == "meta":  # no bytes to read (a model placed by accelerate keeps none here)
            continue
        flat = t.detach().to("cpu").contiguous().reshape(-1)
        if flat.numel():
            h.update(flat.view(torch.uint8).numpy().data)
    return h.hexdigest()[:32]


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """A 16-hex-digit hash of the tokenizer's serialisation (``""`` without a tokenizer)."""
    if tokenizer is None:
        return ""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        # without the call-time state (truncation, padding) that encoding a batch leaves on the
        # backend: the same tokenizer before and after its first call is the same tokenizer
        state = json.loads(backend.to_str())
        state.pop("truncation", None)
        state.pop("padding", None)
        text = json.dumps(state, sort_keys=True)
    else:
        get_vocab = getattr(tokenizer, "get_vocab", None)
        if get_vocab is None:  # no tokenizer at all (images, audio)
            return ""
        vocab = sorted(get_vocab().items())
        specials = getattr(tokenizer, "all_special_tokens", [])
        text = json.dumps([type(tokenizer).__name__, vocab, list(specials)])
    extra = json.dumps(  # settings outside tokenizer.json that change the ids
        [getattr(tokenizer, "model_max_length", None), getattr(tokenizer, "padding_side", None)], default=str
    )
    return hashlib.blake2b((text + extra).encode("utf-8"), digest_size=8).hexdigest()


def forward_dtype(model: Any) -> str:
    """The dtype the forward runs in: that of the model's floating-point parameters."""
    for p in model.parameters():
        if p.is_floating_point():
            return str(p.dtype).removeprefix("torch.")
    return "float32"


def device_kind(model: Any) -> str:
    """``cpu``, ``cuda``, ``mps``…: the kind of device the model's parameters are on."""
    for p in model.parameters():
        return p.device.type
    return "cpu"
