"""Weights and configs checked before they are trusted (issue 59, rows 1-4 and 23).

A model folder is read by libraries that assume its files are sound: safetensors trusts the
header's length and offsets (a file cut short is "incomplete metadata", an absurd header
length "header too large", both exit 3), and transformers builds every module the config
asks for before it reads a weight (``num_hidden_layers: 1000000000`` grows until the
memory limit kills the process; ``1e9`` is a ``TypeError`` deep in its dataclasses). The
checks here read only bytes and JSON, never build a module, and refuse in one line naming
the file and what is wrong:

* :func:`check_safetensors_file` — the 8-byte header length, the JSON header (dtypes,
  shapes, offsets) and the file's size against what the header promises;
* :func:`check_config` — the size fields (layers, heads, hidden size, vocabulary,
  positions, feed-forward width) are positive integers, and an estimate of the parameters'
  memory fits the machine's;
* :func:`check_layers_against_weights` — the config's layer count against the layers the
  safetensors headers hold (for folders whose loader reports no missing keys: the zoo's).

The loaders call :func:`check_model_folder` first.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any, Optional

from .errors import InputError

#: a header longer than this is not a safetensors header (the library's own cap is 100 MB)
MAX_HEADER_BYTES = 100_000_000
#: bytes per element of each safetensors dtype
DTYPE_BYTES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}
#: config size fields (every spelling transformers' families use) -> what they count
SIZE_FIELDS = {
    "num_hidden_layers": "layers",
    "n_layer": "layers",
    "num_layers": "layers",
    "n_layers": "layers",
    "num_attention_heads": "heads",
    "n_head": "heads",
    "num_heads": "heads",
    "n_heads": "heads",
    "num_key_value_heads": "key/value heads",
    "hidden_size": "hidden size",
    "n_embd": "hidden size",
    "d_model": "hidden size",
    "dim": "hidden size",
    "vocab_size": "vocabulary",
    "max_position_embeddings": "positions",
    "n_positions": "positions",
    "intermediate_size": "feed-forward width",
    "n_inner": "feed-forward width",
    "d_ff": "feed-forward width",
    "ffn_dim": "feed-forward width",
    "head_dim": "head size",
}
_LAYER_KEY = re.compile(r"(?:^|\.)(?:layers?|h|blocks?)\.(\d+)\.")


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError as exc:
        raise InputError(f"weights file {path} cannot be read ({exc.strerror})") from None


def read_safetensors_header(path: str | os.PathLike) -> dict:
    """The JSON header of a safetensors file, checked against the file's bytes.

    Checks, before any library maps the file: 8 bytes of header length; a length that is
    neither absurd (over 100 MB) nor past the end of the file; a UTF-8 JSON object whose
    entries have a known dtype, a shape of non-negative integers and ``data_offsets``
    ``[begin, end]`` spanning exactly ``prod(shape) × itemsize`` bytes; and a file exactly
    as long as the header and the largest offset make it (a file cut short is refused).

    Returns:
        name -> {"dtype", "shape", "data_offsets"} (``__metadata__`` left out).

    Raises:
        InputError: naming ``path`` and the first thing wrong.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"weights file {path} is missing")
    size = _size(path)

    def bad(what: str) -> InputError:
        return InputError(f"weights file {path} is corrupted or truncated: {what}; copy or save it again")

    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise bad(f"{size} bytes, fewer than the 8-byte header length")
        n = int.from_bytes(head, "little")
        if n > MAX_HEADER_BYTES:
            raise bad(f"its header length is {n:,} bytes (absurd: at most {MAX_HEADER_BYTES:,})")
        if n == 0 or 8 + n > size:
            raise bad(f"its header length is {n:,} bytes but the file has {size:,} (truncated?)")
        raw = f.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise bad(f"its header is not JSON ({exc})") from None
    if not isinstance(header, dict):
        raise bad("its header is not a JSON object")
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    end = 0
    for name, entry in tensors.items():
        end = max(end, _check_entry(name, entry, bad))
    if 8 + n + end != size:
        cut = "truncated" if 8 + n + end > size else "has bytes after its last tensor"
        raise bad(f"its header promises {8 + n + end:,} bytes but the file has {size:,} ({cut})")
    return tensors


def _check_entry(name: str, entry: Any, bad: Any) -> int:
    """The end offset of one header entry, checked (see :func:`read_safetensors_header`)."""
    if not isinstance(entry, dict) or entry.get("dtype") not in DTYPE_BYTES:
        raise bad(f"tensor {name!r} has no known dtype")
    shape, offsets = entry.get("shape"), entry.get("data_offsets")
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise bad(f"tensor {name!r} has shape {shape!r}, not a list of non-negative integers")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(type(o) is int for o in offsets)
        or not 0 <= offsets[0] <= offsets[1]
    ):
        raise bad(f"tensor {name!r} has data_offsets {offsets!r}, not [begin, end] with 0 ≤ begin ≤ end")
    want = math.prod(shape) * DTYPE_BYTES[entry["dtype"]]
    if offsets[1] - offsets[0] != want:
        raise bad(
            f"tensor {name!r} spans {offsets[1] - offsets[0]:,} bytes but {shape} of {entry['dtype']} is {want:,}"
        )
    return int(offsets[1])


def check_safetensors_file(path: str | os.PathLike) -> None:
    """:func:`read_safetensors_header`, for its checks only."""
    read_safetensors_header(path)


def machine_memory_bytes() -> int:
    """This machine's physical memory in bytes (0 when the system does not say)."""
    names = getattr(os, "sysconf_names", {})
    if "SC_PAGE_SIZE" not in names or "SC_PHYS_PAGES" not in names:
        return 0
    return max(0, int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES")))


def _first(config: dict, *names: str) -> Optional[int]:
    return next((config[n] for n in names if isinstance(config.get(n), int)), None)


def parameter_bytes(config: dict) -> int:
    """An estimate (a lower bound, float32) of a transformer's parameters' memory from its
    config: embeddings (vocabulary and positions × hidden) plus, per layer, attention
    (4 × hidden²) and the feed-forward (2 × hidden × width, width 4 × hidden by default)."""
    hidden = _first(config, "hidden_size", "n_embd", "d_model", "dim") or 0
    layers = _first(config, "num_hidden_layers", "n_layer", "num_layers", "n_layers") or 0
    vocab = _first(config, "vocab_size") or 0
    positions = _first(config, "max_position_embeddings", "n_positions") or 0
    width = _first(config, "intermediate_size", "n_inner", "d_ff", "ffn_dim") or 4 * hidden
    return 4 * ((vocab + positions) * hidden + layers * (4 * hidden * hidden + 2 * hidden * width))


def check_config(config: Any, name: str, memory: Optional[int] = None) -> None:
    """Refuse a config whose size fields are not positive integers, or whose parameters
    would not fit this machine's memory, before any module is built.

    Args:
        config: the parsed ``config.json`` (a dict; anything else is refused).
        name: how messages name the model (its folder).
        memory: the bytes to compare against (default: :func:`machine_memory_bytes`).

    Raises:
        InputError: naming the field, what it counts and the value given.
    """
    if not isinstance(config, dict):
        raise InputError(f"{name}: config.json holds {type(config).__name__}, not a JSON object of settings")
    for field, counts in SIZE_FIELDS.items():
        if field not in config or config[field] is None:
            continue
        value = config[field]
        if type(value) is not int:
            raise InputError(
                f"{name}: config.json gives {field} (the {counts}) as {value!r}, not a whole number: "
                f"write it as an integer such as {_integer_hint(value)}"
            )
        if value < 1:
            raise InputError(f"{name}: config.json gives {field} (the {counts}) as {value}: it must be at least 1")
    need = parameter_bytes(config)
    have = machine_memory_bytes() if memory is None else memory
    if have and need > have:
        sizes = ", ".join(f"{f}={config[f]:,}" for f in SIZE_FIELDS if type(config.get(f)) is int)
        raise InputError(
            f"{name}: config.json ({sizes}) asks for at least {need / 2**30:,.1f} GiB of parameters, more than "
            f"this machine's {have / 2**30:,.1f} GiB of memory: check the sizes in config.json"
        )


def _integer_hint(value: Any) -> str:
    """How the value would be written as an integer (``1e9`` -> ``1000000000``)."""
    if isinstance(value, float) and math.isfinite(value) and abs(value) < 1e18:
        return str(max(1, round(value)))
    return "12 (digits only, no decimal point or exponent)"


def layers_in_weights(headers: list) -> set:
    """The layer numbers the tensor names of safetensors headers hold (``layers.3.`` …)."""
    return {int(m.group(1)) for h in headers for k in h for m in [_LAYER_KEY.search(k)] if m}


def check_layers_against_weights(name: str, config: dict, headers: list) -> None:
    """Refuse a config whose layer count differs from the layers the weights hold (layers
    the config adds would be random, layers it drops would be lost): the check ``hf:``
    folders get from transformers' loading report, made from the headers for any folder.

    Raises:
        InputError: naming the field, both counts and the layers at stake.
    """
    field = next((f for f in ("num_hidden_layers", "n_layer", "num_layers", "n_layers") if f in config), None)
    held = layers_in_weights(headers)
    if field is None or not held or type(config[field]) is not int:
        return
    said, n = config[field], max(held) + 1
    if said > n:
        raise InputError(
            f"{name}: its config.json says {field}={said} but its weights hold {n} layers "
            f"(layers {n}..{said - 1} would be random): fix {field} in config.json"
        )
    if said < n:
        raise InputError(
            f"{name}: its config.json says {field}={said} but its weights hold {n} layers "
            f"(layers {said}..{n - 1} would be dropped): fix {field} in config.json"
        )


def read_config(folder: Path, name: str) -> Optional[dict]:
    """``folder/config.json`` parsed (``None`` when there is none)."""
    path = folder / "config.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{name}: config.json is not readable JSON ({exc})") from None


def check_model_folder(folder: str | os.PathLike, name: Optional[str] = None, layers: bool = False) -> None:
    """Every check of this module on a model folder, before anything loads it: its
    ``config.json`` (:func:`check_config`), every ``*.safetensors`` file's header and size
    (:func:`read_safetensors_header`) and, with ``layers``, the config's layer count
    against the weights' (:func:`check_layers_against_weights`)."""
    folder = Path(folder)
    name = name or str(folder)
    config = read_config(folder, name)
    if config is not None:
        check_config(config, name)
    headers = [read_safetensors_header(p) for p in sorted(folder.glob("*.safetensors"))]
    if layers and isinstance(config, dict):
        check_layers_against_weights(name, config, headers)
