"""What a store's files must hold: the manifest, the index records, the shard names.

Used by :class:`probe.store.directory.Store` on open and by ``probe store verify``/``repair``; each
function names the file (and line) at fault, so a damaged or hand-edited store is refused
with one clear line instead of being read wrongly.
"""

from __future__ import annotations

import json
import os
import re
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

from probe.errors import InputError

from probe.maps import KINDS

STORE_VERSION = 1
DTYPES = ("float32", "float16")
SHARD_NAME = re.compile(r"^shard-\d{5,}\.safetensors$")


def read_manifest(directory: str | os.PathLike) -> dict:
    """The validated ``manifest.json`` of a store directory.

    Raises:
        ValueError: no manifest (not a store), unreadable or invalid JSON (the file and line
            are named), not an object, a missing key or a wrong version, dtype or layer list.
    """
    mpath = Path(directory) / "manifest.json"
    if not mpath.is_file():
        raise InputError(
            f"{directory} is not an attention store (no manifest.json); create one with `probe capture --out DIR`"
        )
    try:
        data = json.loads(mpath.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {mpath}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{mpath}:{exc.lineno}: not valid JSON ({exc.msg}); the store's manifest is damaged: "
            "capture again into a new --out"
        ) from None
    if not isinstance(data, dict):
        raise InputError(f"{mpath} must hold a JSON object, found a {type(data).__name__}")
    missing = [k for k in ("model", "version", "dtype") if k not in data]
    if missing:
        raise InputError(f"{mpath} lacks {', '.join(missing)}: not a manifest written by `probe capture`")
    if data["version"] != STORE_VERSION:
        raise InputError(f"{mpath}: store version {data['version']!r}, this toolkit reads version {STORE_VERSION}")
    if data["dtype"] not in DTYPES:
        raise InputError(f"{mpath}: dtype must be float32 or float16, found {data['dtype']!r}")
    _check_fields(mpath, data)
    layers = data.get("layers")
    if layers is not None and not (isinstance(layers, list) and all(_is_int(x) and x >= 0 for x in layers)):
        raise InputError(f"{mpath}: layers must be a list of layer numbers, found {layers!r}")
    if layers is not None and len(set(layers)) != len(layers):
        raise InputError(
            f"{mpath}: layers {layers!r} name a layer twice (a capture stores each layer once); "
            "capture again into a new --out"
        )
    return data


#: a count larger than this is no store's (a billion examples, ten thousand heads)
MAX_EXAMPLES, MAX_HEADS = 10**9, 10**4
#: manifest field -> (its check, what it must be); optional fields are checked when present
MANIFEST_FIELDS = {
    "model": (lambda v: isinstance(v, str) and bool(v), "a model name"),
    "stack": (lambda v: v in ("encoder", "decoder", "cross"), "encoder, decoder or cross"),
    "input": (lambda v: isinstance(v, str), "a fingerprint string"),
    "source": (lambda v: isinstance(v, str), "a string"),
    "n_input": (lambda v: _is_int(v) and 0 <= v <= MAX_EXAMPLES, f"a count of examples 0..{MAX_EXAMPLES:,}"),
    "skipped": (
        lambda v: isinstance(v, dict) and all(_is_int(n) and 0 <= n <= MAX_EXAMPLES for n in v.values()),
        "an object of reasons and counts",
    ),
    "n_heads": (lambda v: _is_int(v) and 1 <= v <= MAX_HEADS, f"a count of heads 1..{MAX_HEADS:,}"),
    "weights": (lambda v: isinstance(v, str), "a fingerprint string"),
    "tokenizer": (lambda v: v is None or isinstance(v, str), "a fingerprint string"),
    "forward_dtype": (lambda v: isinstance(v, str), "a dtype name"),
    "device": (lambda v: isinstance(v, str), "a device kind"),
    "toolkit": (lambda v: isinstance(v, str), "a version string"),
    "options": (lambda v: isinstance(v, dict), "an object of capture options"),
    "rows": (lambda v: v in ("sum to 1", "at most 1"), "'sum to 1' or 'at most 1'"),
}


def _check_fields(mpath: Path, data: dict) -> None:
    """Each known manifest field of the right type and in range (:data:`MANIFEST_FIELDS`):
    a hand-edited manifest is refused before any reader trusts its counts."""
    for key, (ok, what) in MANIFEST_FIELDS.items():
        if key in data and not ok(data[key]):
            raise InputError(
                f"{mpath}: {key} must be {what}, found {_short_value(data[key])}; the manifest was edited or damaged: "
                "capture again into a new --out"
            )


def _short_value(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "…"


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _str_list(x: object) -> bool:
    return isinstance(x, list) and all(isinstance(t, str) for t in x)


def record_crc(rec: dict) -> int:
    """CRC-32 of an index record's canonical JSON (without its own ``crc``), stored in the
    record so that an edited or damaged line that is still valid JSON is caught."""
    body = {k: v for k, v in rec.items() if k not in ("crc", "_line")}
    return zlib.crc32(json.dumps(body, sort_keys=True).encode("ascii"))


def check_record(rec: object) -> None:
    """Raise ``ValueError`` (without location) when an index record lacks a field or has
    one of the wrong type, length or range."""
    if not isinstance(rec, dict):
        raise InputError(f"an index line must be a JSON object, found a {type(rec).__name__}")
    for key in ("id", "shard", "key", "tokens", "word_ids", "special", "words"):
        if key not in rec:
            raise InputError(f"index record without {key!r}")
    if not (_is_int(rec["id"]) and rec["id"] >= 0):
        raise InputError(f"example id must be a non-negative integer, found {rec['id']!r}")
    if not (isinstance(rec["shard"], str) and SHARD_NAME.match(rec["shard"])):
        raise InputError(f"shard {rec['shard']!r} is not a shard file of this store (shard-NNNNN.safetensors)")
    if not isinstance(rec["key"], str):
        raise InputError(f"tensor key must be a string, found {rec['key']!r}")
    if rec["key"] != f"ex{rec['id']}":  # an example owns its tensor: no line may read another's
        raise InputError(f"example {rec['id']} names the tensor {rec['key']!r}, not its own 'ex{rec['id']}'")
    if rec.get("kind", "self") not in KINDS:
        raise InputError(f"kind must be one of {KINDS}, found {rec.get('kind')!r}")
    if not isinstance(rec.get("text", ""), str) or not isinstance(rec.get("meta", {}), dict):
        raise InputError("text must be a string and meta an object")
    groups = [("tokens", "word_ids", "special", "words")]
    if rec.get("kind") == "cross":
        groups.append(("query_tokens", "query_word_ids", "query_special", "query_words"))
    for tokens, word_ids, special, words in groups:
        if not (_str_list(rec.get(tokens)) and _str_list(rec.get(words))):
            raise InputError(f"{tokens} and {words} must be lists of strings")
        n, w = len(rec[tokens]), len(rec[words])
        ids, mask = rec.get(word_ids), rec.get(special)
        if not (isinstance(ids, list) and len(ids) == n and all(x is None or (_is_int(x) and 0 <= x < w) for x in ids)):
            raise InputError(f"{word_ids} must give each of the {n} tokens a word number below {w} or null")
        if not (
            isinstance(mask, list) and len(mask) == n and all(x in (0, 1) and not isinstance(x, float) for x in mask)
        ):
            raise InputError(f"{special} must be {n} flags 0/1")
    if "crc" in rec and rec["crc"] != record_crc(rec):  # stores written before the checksum have none
        raise InputError("index record does not match its checksum: the line was edited or damaged")


def scan_index(path: Path) -> tuple[list, list, bool]:
    """``(records, problems, torn)`` of an ``index.jsonl``: the valid records (each with its
    line number under ``_line``), ``(line, problem)`` pairs for the others (bad JSON, bad
    record, duplicate id, a tensor another line already names), and whether the last line was
    cut by a kill (no newline; ignored). Each example owns one tensor: no two lines may name
    the same ``(shard, key)``."""
    records, problems, seen, owners = [], [], set(), {}
    if not path.exists():
        return records, problems, False
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}") from None
    lines = raw.split(b"\n")
    torn = bool(lines[-1])
    for n, line in enumerate(lines[:-1], 1):
        try:
            rec = json.loads(line.decode("utf-8"))
            check_record(rec)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            problems.append((n, f"not a JSON line ({type(exc).__name__})"))
            continue
        except ValueError as exc:
            problems.append((n, str(exc)))
            continue
        if rec["id"] in seen:
            problems.append((n, f"duplicate example id {rec['id']}"))
            continue
        tensor = (rec["shard"], rec["key"])
        if tensor in owners:
            problems.append(
                (
                    n,
                    f"example {rec['id']} names the tensor {rec['key']} of {rec['shard']}, which "
                    f"line {owners[tensor]} already owns",
                )
            )
            continue
        seen.add(rec["id"])
        owners[tensor] = n
        records.append(dict(rec, _line=n))
    return records, problems, torn


#: how far a row of attention may sum from 1, by the coarsest dtype the map went through
ROW_SUM_TOLERANCE = {"float32": 1e-3, "float16": 4e-3, "bfloat16": 3e-2}


def map_range_problem(attn: torch.Tensor, manifest: dict) -> str:
    """What is wrong with a stored map ``[layer, head, query, key]`` as attention
    probabilities, or ``""``: a non-finite or negative entry, or a row (over keys) whose
    sum is off 1 by more than the tolerance of the coarsest of the store dtype and the
    forward dtype (:data:`ROW_SUM_TOLERANCE`). A store of a model with learned sinks
    (manifest ``rows: "at most 1"``, gpt-oss: a softmax column dropped) may sum below 1."""
    import torch

    a = attn.float()
    if not bool(torch.isfinite(a).all()):
        return f"{int((~torch.isfinite(a)).sum())} entries are NaN or infinite: not attention probabilities"
    if a.numel() and float(a.min()) < 0:
        return f"{int((a < 0).sum())} entries are negative (min {float(a.min()):.3g}): not attention probabilities"
    if not a.numel() or a.shape[-1] == 0:
        return ""
    # a store written before manifests named the forward dtype gets the loosest tolerance
    forward = manifest.get("forward_dtype", "bfloat16")
    tol = max(ROW_SUM_TOLERANCE.get(str(x), 1e-3) for x in (manifest.get("dtype"), forward))
    sums = a.sum(-1)
    high, low = float(sums.max()) - 1, 1 - float(sums.min())
    if high > tol or (low > tol and manifest.get("rows") != "at most 1"):
        off = max(high, low)
        return f"a row of attention sums to {1 + high if high >= low else 1 - low:.6g}, off 1 by {off:.3g} (tolerance {tol:g})"
    return ""
