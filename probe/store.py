"""A corpus of captured attention on disk: ragged, sharded, resumable, lazy.

Layout of a store directory::

    manifest.json            model, stack, layers, dtype, input fingerprint, version
    index.jsonl              one line per finished example: id, shard, key, token facts
    shard-00000.safetensors  one tensor per example, "ex<id>": [layer, head, query, key]

A shard is written to a temporary name, flushed and renamed before its examples are
appended to ``index.jsonl``; an example is in the store exactly when its index line is
complete. A run that is killed leaves a valid store of the finished examples (a shard
whose index lines never got written is ignored), and running the same capture again
resumes after the last finished example without duplicating or losing any.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Iterable, Iterator, Optional, Sequence

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from .maps import AttentionMaps

log = logging.getLogger(__name__)

STORE_VERSION = 1
_DTYPES = {"float32": torch.float32, "float16": torch.float16}


def fingerprint(texts: Sequence[str]) -> str:
    """A short hash of the input corpus, to refuse resuming onto different input."""
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()[:16]


def _example_record(i: int, shard: str, m: AttentionMaps) -> dict:
    rec = {
        "id": i, "shard": shard, "key": f"ex{i}", "text": m.text, "tokens": list(m.tokens),
        "word_ids": list(m.word_ids), "special": [int(x) for x in m.special_mask.tolist()],
        "words": list(m.words), "kind": m.kind, "meta": m.meta,
    }
    if m.kind == "cross":
        rec.update(query_tokens=list(m.query_tokens), query_word_ids=list(m.query_word_ids),
                   query_special=[int(x) for x in m.query_special_mask.tolist()],
                   query_words=list(m.query_words))
    return rec


def _read_index(path: Path) -> list[dict]:
    records = []
    if not path.exists():
        return records
    with open(path, "r", encoding="utf-8") as f:
        for line in f:
            if not line.endswith("\n"):
                break  # a line cut by a kill: that example is not finished
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                break
    return records


class StoreWriter:
    """Append captured examples to a store directory (used by :func:`write_store`)."""

    def __init__(self, path, manifest: dict, shard_size: int = 64, dtype: str = "float32"):
        if dtype not in _DTYPES:
            raise ValueError(f"store dtype must be float32 or float16, got {dtype!r}")
        self.path = Path(path)
        self.shard_size = shard_size
        self.dtype = _DTYPES[dtype]
        self.path.mkdir(parents=True, exist_ok=True)
        mpath = self.path / "manifest.json"
        manifest = dict(manifest, version=STORE_VERSION, dtype=dtype)
        if mpath.exists():
            old = json.loads(mpath.read_text())
            for key in ("model", "stack", "layers", "input", "dtype"):
                if old.get(key) != manifest.get(key):
                    raise ValueError(
                        f"{self.path} holds a different capture ({key}: {old.get(key)!r} ≠ "
                        f"{manifest.get(key)!r}); choose another --out or remove it"
                    )
        else:
            _atomic_write(mpath, json.dumps(manifest, indent=2))
        self.manifest = manifest
        self.index_path = self.path / "index.jsonl"
        # a line cut by a kill is dropped by rewriting the index without it
        finished = _read_index(self.index_path)
        if self.index_path.exists():
            raw = self.index_path.read_text(encoding="utf-8")
            if raw.count("\n") != len(finished) or (raw and not raw.endswith("\n")):
                _atomic_write(self.index_path, "".join(json.dumps(r) + "\n" for r in finished))
        self.done = {r["id"] for r in finished}
        existing = sorted(self.path.glob("shard-*.safetensors"))
        self._next_shard = (int(existing[-1].stem.split("-")[1]) + 1) if existing else 0
        self._pending: list[tuple[int, AttentionMaps]] = []

    def add(self, i: int, maps: AttentionMaps) -> None:
        if i in self.done:
            return
        self._pending.append((i, maps))
        if len(self._pending) >= self.shard_size:
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        name = f"shard-{self._next_shard:05d}.safetensors"
        self._next_shard += 1
        self.append_index(write_shard(self.path, name, self._pending, self.dtype))
        self._pending = []

    def append_index(self, records: Sequence[dict]) -> None:
        """Append finished examples (their shard already on disk) to ``index.jsonl``."""
        lines = "".join(json.dumps(r) + "\n" for r in records if r["id"] not in self.done)
        with open(self.index_path, "a", encoding="utf-8") as f:
            f.write(lines)
            f.flush()
            os.fsync(f.fileno())
        self.done.update(r["id"] for r in records)


def write_shard(path, name: str, examples: Sequence[tuple[int, AttentionMaps]], dtype=torch.float32) -> list:
    """Write ``(id, maps)`` pairs as one shard (temporary name, fsync, rename) and return
    their index records; nothing is in the store until the records are appended to its
    index (:meth:`StoreWriter.append_index`), so a writer killed mid-shard leaves no trace.
    Used by other processes (Ray workers) that write shards of one store."""
    path = Path(path)
    tensors = {f"ex{i}": m.attentions.to(dtype).contiguous() for i, m in examples}
    tmp = path / (name + ".tmp")
    save_file(tensors, str(tmp), metadata={"format": "probe-attention"})
    _fsync(tmp)
    os.replace(tmp, path / name)
    return [_example_record(i, name, m) for i, m in examples]


def write_store(path, examples: Iterable[tuple[int, AttentionMaps]], manifest: dict,
                shard_size: int = 64, dtype: str = "float32") -> "Store":
    """Write ``(id, maps)`` pairs to a store at ``path`` and return it opened.

    Ids already in the store are skipped (resume). On an exception (or a kill) every
    finished shard stays valid; the pending partial shard is flushed on exceptions.
    """
    writer = StoreWriter(path, manifest, shard_size=shard_size, dtype=dtype)
    try:
        for i, maps in examples:
            writer.add(i, maps)
    finally:
        writer.flush()
    return Store(path)


def done_ids(path) -> set:
    """Ids of the finished examples of a store (empty when there is none)."""
    return {r["id"] for r in _read_index(Path(path) / "index.jsonl")}


class ExampleOutOfRange(IndexError, ValueError):
    """An example index beyond the store (an ``IndexError`` and a user-facing ``ValueError``)."""


class Store:
    """Read a store lazily: ``len(store)``, ``store[i]`` (i-th finished example in id
    order), iteration. Tensors are read shard by shard on demand, never all at once.

    Raises:
        ValueError: when ``path`` is not a store (no manifest.json).
    """

    def __init__(self, path):
        self.path = Path(path)
        mpath = self.path / "manifest.json"
        if not mpath.exists():
            raise ValueError(f"{self.path} is not an attention store (no manifest.json); "
                             "create one with `probe capture --out DIR`")
        self.manifest = json.loads(mpath.read_text())
        records = _read_index(self.path / "index.jsonl")
        self.records = sorted(records, key=lambda r: r["id"])

    def __len__(self) -> int:
        return len(self.records)

    @property
    def ids(self) -> list:
        return [r["id"] for r in self.records]

    def _maps(self, rec: dict, tensor: torch.Tensor) -> AttentionMaps:
        extra = {}
        if rec.get("kind") == "cross":
            extra = dict(query_tokens=rec["query_tokens"], query_word_ids=rec["query_word_ids"],
                         query_special_mask=torch.tensor(rec["query_special"], dtype=torch.bool),
                         query_words=rec["query_words"])
        return AttentionMaps(
            attentions=tensor, tokens=rec["tokens"], word_ids=rec["word_ids"],
            special_mask=torch.tensor(rec["special"], dtype=torch.bool), words=rec["words"],
            layers=tuple(self.manifest.get("layers") or ()), kind=rec.get("kind", "self"),
            text=rec.get("text", ""), meta=rec.get("meta", {}), **extra,
        )

    def __getitem__(self, i: int) -> AttentionMaps:
        if not -len(self) <= i < len(self):
            raise ExampleOutOfRange(f"example {i} out of range: the store has {len(self)} examples (0..{len(self) - 1})")
        rec = self.records[i]
        with safe_open(str(self.path / rec["shard"]), framework="pt") as f:
            return self._maps(rec, f.get_tensor(rec["key"]))

    def __iter__(self) -> Iterator[AttentionMaps]:
        # id order; each shard is opened once per consecutive run of its examples
        current, handle = None, None
        for rec in self.records:
            if rec["shard"] != current:
                current = rec["shard"]
                handle = safe_open(str(self.path / current), framework="pt")
            yield self._maps(rec, handle.get_tensor(rec["key"]))

    def texts(self) -> list[str]:
        return [r.get("text", "") for r in self.records]


def _fsync(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
