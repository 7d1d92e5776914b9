"""A corpus of captured attention on disk: ragged, sharded, resumable, lazy.

Layout of a store directory::

    manifest.json            model, stack, layers, dtype, input fingerprint, version, and
                             provenance: weights and tokenizer fingerprints, forward dtype,
                             device kind, toolkit version, capture options
    index.jsonl              one line per finished example: id, shard, key, token facts
    shard-00000.safetensors  one tensor per example, "ex<id>": [layer, head, query, key]

A shard is written to a temporary name, flushed and renamed before its examples are
appended to ``index.jsonl``; an example is in the store exactly when its index line is
complete; the manifest is written with the first examples, so a capture refused before
then leaves no store. A run that is killed leaves a valid store of the finished examples (a shard
whose index lines never got written is ignored), and running the same capture again
resumes after the last finished example without duplicating or losing any, unless the
capture differs from the store's in anything its manifest records (refused in one line:
:func:`refuse_other_capture`).

Everything read back is checked, because a store is a file a user can hand over: the
manifest and every index line on open (``index.jsonl:N`` named on error; shard names
must be plain ``shard-NNNNN.safetensors`` inside the store), each shard's header and
tensor when its example is read (the example is named on error). One process writes a
store at a time (:mod:`probe.store.lock`); :mod:`probe.store.repair` verifies and repairs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Sequence, TypeGuard

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from probe.errors import InputError

from probe.maps import AttentionMaps
from probe.store.lock import StoreLock
from probe.store.schema import SHARD_NAME, STORE_VERSION, map_range_problem, read_manifest, record_crc, scan_index

log = logging.getLogger(__name__)

_DTYPES = {"float32": torch.float32, "float16": torch.float16}
SHARD_BYTES = 256 * 2**20  # a shard is written when its queued maps reach this size
_REPAIR = "run `probe store repair {}` to drop the damaged part (a capture then redoes it)"


def fingerprint(texts: Sequence[str]) -> str:
    """A short hash of the input corpus, to refuse resuming onto different input."""
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()[:16]


#: what a resumed capture must share with the store it continues, and how to name it
PROVENANCE = {
    "model": "another model",
    "stack": "another stack",
    "layers": "other layers",
    "input": "another input (corpus fingerprint)",
    "dtype": "another store dtype",
    "forward_dtype": "another forward dtype (--dtype)",  # before the weights: a cast changes their bytes too
    "device": "another device kind",
    "tokenizer": "another tokenizer (fingerprint)",
    "weights": "other weights (state-dict fingerprint)",
    "toolkit": "another toolkit version",
    "options": "other capture options",
}


_ALWAYS = ("model", "stack", "layers", "input", "dtype")  # compared in every store, old ones too


def refuse_other_capture(path: str | os.PathLike, old: dict, new: dict) -> None:
    """Refuse to resume the store at ``path`` (manifest ``old``) with a capture whose
    manifest ``new`` differs in anything that made the stored maps (:data:`PROVENANCE`),
    in one line naming what changed; nothing is written.

    A store written before manifests recorded the weights is refused for a capture that
    records them: whether the same model made it cannot be checked."""
    if "weights" in new and "weights" not in old:
        raise InputError(
            f"{path} was written before stores recorded their weights, dtype and tokenizer, so a resumed "
            "capture cannot be checked to match it: capture into a new --out (the old store stays readable)"
        )
    for key, what in PROVENANCE.items():
        if (key in _ALWAYS or key in new) and old.get(key) != new.get(key):
            was, now = old.get(key), new.get(key)
            if key == "options" and isinstance(was, dict) and isinstance(now, dict):
                name = next(k for k in sorted(set(was) | set(now)) if was.get(k) != now.get(k))
                what, was, now = f"another capture option {name}", was.get(name), now.get(name)
            raise InputError(
                f"{path} holds a different capture ({what}: {_short(was)} ≠ {_short(now)}); "
                "resuming would mix two captures' maps in one store: choose another --out or remove it"
            )


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "…"


def _example_record(i: int, shard: str, m: AttentionMaps) -> dict:
    rec = {
        "id": i,
        "shard": shard,
        "key": f"ex{i}",
        "text": m.text,
        "tokens": list(m.tokens),
        "word_ids": list(m.word_ids),
        "special": [int(x) for x in m.special_mask.tolist()],
        "words": list(m.words),
        "kind": m.kind,
        "meta": m.meta,
    }
    if m.kind == "cross":  # a cross map carries its query side (AttentionMaps checks on construction)
        assert m.query_tokens is not None and m.query_word_ids is not None
        assert m.query_special_mask is not None and m.query_words is not None
        rec.update(
            query_tokens=list(m.query_tokens),
            query_word_ids=list(m.query_word_ids),
            query_special=[int(x) for x in m.query_special_mask.tolist()],
            query_words=list(m.query_words),
        )
    rec["crc"] = record_crc(rec)
    return rec


def _read_index(path: Path) -> list[dict]:
    """The finished records of an index; a torn last line is ignored, any other bad line is
    an error naming ``file:line``."""
    records, problems, torn = scan_index(path)
    if problems:
        n, problem = problems[0]
        raise InputError(
            f"{path}:{n}: {problem}; "
            + _REPAIR.format(path.parent)
            + (f" ({len(problems)} bad lines)" if len(problems) > 1 else "")
        )
    if torn:
        log.warning("%s: ignoring a last line cut by an interrupted capture (`probe store repair` removes it)", path)
    return [{k: v for k, v in r.items() if k != "_line"} for r in records]


class StoreWriter:
    """Append captured examples to a store directory (used by :func:`write_store`).

    Holds the store's lock (:class:`probe.store.lock.StoreLock`) from construction until
    :meth:`close`; use it as a context manager or call :meth:`close`.

    Raises:
        ValueError: another process writes the store; it holds another capture; its manifest,
            index or the shards of finished examples are damaged (resume checks them).
    """

    def __init__(self, path: str | os.PathLike, manifest: dict, shard_size: int = 64, dtype: str = "float32") -> None:
        if dtype not in _DTYPES:
            raise InputError(f"store dtype must be float32 or float16, got {dtype!r}")
        self.path = Path(path)
        self.shard_size = shard_size
        self.dtype = _DTYPES[dtype]
        self._created = not self.path.exists()
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"cannot create the store directory {self.path}: {exc.strerror}") from None
        self._lock = StoreLock(self.path).acquire()
        try:
            self._open(dict(manifest, version=STORE_VERSION, dtype=dtype))
        except BaseException:
            self._lock.release()
            self._remove_if_new()
            raise

    def _open(self, manifest: dict) -> None:
        mpath = self.path / "manifest.json"
        self._manifest_written = mpath.exists()
        if self._manifest_written:
            refuse_other_capture(self.path, read_manifest(self.path), manifest)
        # a new store's manifest is written with its first examples (or when the capture
        # ends well): a command refused before then leaves no manifest-only store behind
        self.manifest = manifest
        self.index_path = self.path / "index.jsonl"
        finished = _read_index(self.index_path)
        _check_shards(self.path, finished)
        if self.index_path.exists():  # a line cut by a kill is dropped by rewriting the index without it
            raw = self.index_path.read_bytes()
            if raw and not raw.endswith(b"\n"):
                write_index(self.index_path, finished)
        self.done = {r["id"] for r in finished}
        self.removed = remove_orphans(self.path, finished)
        existing = sorted(self.path.glob("shard-*.safetensors"))
        numbers = [int(p.name[6:-12]) for p in existing if SHARD_NAME.match(p.name)]
        self._next_shard = max(numbers) + 1 if numbers else 0
        self._pending: list[tuple[int, AttentionMaps]] = []
        self._pending_bytes = 0

    def close(self, failed: bool = False) -> None:
        """Write the pending partial shard and release the lock. A store this writer
        created and never wrote an example to is removed when the capture ``failed``
        (a refused command leaves no store behind), else its manifest is written."""
        try:
            self.flush()
            if not failed:
                self._write_manifest()
        finally:
            self._lock.release()
            if failed:
                self._remove_if_new()

    def _write_manifest(self) -> None:
        if not self._manifest_written:
            _atomic_write(self.path / "manifest.json", json.dumps(self.manifest, indent=2))
            self._manifest_written = True

    def _remove_if_new(self) -> None:
        """Remove the directory this writer created when no example reached it (shards
        a worker wrote without an index line are not examples)."""
        if not self._created or getattr(self, "_manifest_written", False):
            return
        try:
            for p in self.path.iterdir():
                if (SHARD_NAME.match(p.name) or p.name.endswith(".tmp")) and p.is_file():
                    p.unlink()
            self.path.rmdir()  # only when empty: nothing else is ever removed
        except OSError:
            pass

    def __enter__(self) -> "StoreWriter":
        return self

    def __exit__(self, exc_type: Optional[type], *exc: object) -> bool:
        self.close(failed=exc_type is not None)
        return False

    def add(self, i: int, maps: AttentionMaps) -> None:
        """Queue one example; a shard is written every ``shard_size`` examples or as soon as
        the queued maps reach ``SHARD_BYTES`` (so long texts never pile up in memory)."""
        if i in self.done:
            return
        maps = standalone(maps, self.dtype)  # queued alone: a captured batch's buffer is not kept
        self._pending.append((i, maps))
        self._pending_bytes += maps.attentions.numel() * self.dtype.itemsize
        if len(self._pending) >= self.shard_size or self._pending_bytes >= SHARD_BYTES:
            self.flush()
            self._pending_bytes = 0

    def flush(self) -> None:
        """Write the queued examples as one shard and their index lines."""
        if not self._pending:
            return
        name = f"shard-{self._next_shard:05d}.safetensors"
        self._next_shard += 1
        self.append_index(write_shard(self.path, name, self._pending, self.dtype))
        self._pending = []

    def append_index(self, records: Sequence[dict]) -> None:
        """Append finished examples (their shard already on disk) to ``index.jsonl``."""
        lines = "".join(json.dumps(r) + "\n" for r in records if r["id"] not in self.done)
        if lines:
            self._write_manifest()  # before the first index line: a store always has one
        with open(self.index_path, "a", encoding="utf-8") as f:
            f.write(lines)
            f.flush()
            os.fsync(f.fileno())
        self.done.update(r["id"] for r in records)


def _standalone(t: torch.Tensor) -> torch.Tensor:
    """``t`` as a contiguous tensor with a storage of its own (itself when it is one)."""
    t = t.contiguous()
    if t.untyped_storage().nbytes() != t.numel() * t.element_size():
        t = t.clone()
    return t


def standalone(maps: AttentionMaps, dtype: torch.dtype = torch.float32) -> AttentionMaps:
    """``maps`` with its attention in ``dtype`` as a contiguous tensor of its own.

    Captured examples are views of their batch's buffer (:func:`probe.runs.capture.iter_capture`):
    a writer that queues examples until a shard is full makes each one stand alone as it
    arrives, so the queue holds the examples' bytes, not their batches' padded buffers; and
    some safetensors releases refuse tensors that share a storage. No copy when the map
    already is one.
    """
    a = _standalone(maps.attentions.to(dtype))
    return maps if a is maps.attentions else maps.with_attentions(a)


def write_shard(
    path: str | os.PathLike,
    name: str,
    examples: Sequence[tuple[int, AttentionMaps]],
    dtype: torch.dtype = torch.float32,
) -> list:
    """Write ``(id, maps)`` pairs as one shard (temporary name, fsync, rename) and return
    their index records; nothing is in the store until the records are appended to its
    index (:meth:`StoreWriter.append_index`), so a writer killed mid-shard leaves no trace.
    Used by other processes (Ray workers) that write shards of one store."""
    path = Path(path)
    tensors = {f"ex{i}": _standalone(m.attentions.to(dtype)) for i, m in examples}
    tmp = path / (name + ".tmp")
    save_file(tensors, str(tmp), metadata={"format": "probe-attention"})
    _fsync(tmp)
    os.replace(tmp, path / name)
    return [_example_record(i, name, m) for i, m in examples]


def write_store(
    path: str | os.PathLike,
    examples: Iterable[tuple[int, AttentionMaps]],
    manifest: dict,
    shard_size: int = 64,
    dtype: str = "float32",
) -> "Store":
    """Write ``(id, maps)`` pairs to a store at ``path`` and return it opened.

    Ids already in the store are skipped (resume). On an exception (or a kill) every
    finished shard stays valid; the pending partial shard is flushed on exceptions.
    """
    with StoreWriter(path, manifest, shard_size=shard_size, dtype=dtype) as writer:
        for i, maps in examples:
            writer.add(i, maps)
    return Store(path)


def done_ids(path: str | os.PathLike) -> set:
    """Ids of the finished examples of a store (empty when there is none)."""
    return {r["id"] for r in _read_index(Path(path) / "index.jsonl")}


class ExampleOutOfRange(IndexError, InputError):
    """An example index beyond the store (an ``IndexError`` and an :class:`InputError`)."""


class Store:
    """Read a store lazily: ``len(store)``, ``store[i]`` (i-th finished example in id
    order), iteration. Tensors are read shard by shard on demand, never all at once.

    Raises:
        ValueError: when ``path`` is not a store (no manifest.json).
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.manifest = read_manifest(self.path)
        records = _read_index(self.path / "index.jsonl")
        self.records = sorted(records, key=lambda r: r["id"])
        if self.expected is not None and len(self.records) != self.expected:
            log.warning(
                "%s holds %d of the %d examples its capture was given: an interrupted capture? Run it again to finish",
                self.path,
                len(self.records),
                self.expected,
            )

    @property
    def expected(self) -> Optional[int]:
        """Examples a finished capture holds (``n_input`` less the skipped), if recorded."""
        n, skipped = self.manifest.get("n_input"), self.manifest.get("skipped") or {}
        if not _is_count(n) or not isinstance(skipped, dict) or not all(_is_count(v) for v in skipped.values()):
            return None
        expected = n - sum(skipped.values())
        return expected if expected >= 0 else None

    @property
    def complete(self) -> bool:
        """False when the store holds fewer (or more) examples than its capture was given."""
        return self.expected is None or len(self.records) == self.expected

    @classmethod
    def over(cls, path: str | os.PathLike, manifest: dict, records: list) -> "Store":
        """A reader over records already read and checked (``probe store verify``)."""
        store = cls.__new__(cls)
        store.path, store.manifest = Path(path), manifest
        store.records = sorted(records, key=lambda r: r["id"])
        return store

    def __len__(self) -> int:
        return len(self.records)

    @property
    def ids(self) -> list:
        """The ids of the stored examples, in index order."""
        return [r["id"] for r in self.records]

    def _maps(self, rec: dict, tensor: torch.Tensor) -> AttentionMaps:
        extra = {}
        if rec.get("kind") == "cross":
            extra = dict(
                query_tokens=rec["query_tokens"],
                query_word_ids=rec["query_word_ids"],
                query_special_mask=torch.tensor(rec["query_special"], dtype=torch.bool),
                query_words=rec["query_words"],
            )
        return AttentionMaps(
            attentions=tensor,
            tokens=rec["tokens"],
            word_ids=rec["word_ids"],
            special_mask=torch.tensor(rec["special"], dtype=torch.bool),
            words=rec["words"],
            layers=tuple(self.manifest.get("layers") or ()),
            kind=rec.get("kind", "self"),
            text=rec.get("text", ""),
            meta=rec.get("meta", {}),
            **extra,
        )

    def __getitem__(self, i: int) -> AttentionMaps:
        if not -len(self) <= i < len(self):
            raise ExampleOutOfRange(
                f"example {i} out of range: the store has {len(self)} examples (0..{len(self) - 1})"
            )
        rec = self.records[i]
        return self._load(rec, self._open_shard(rec))

    def __iter__(self) -> Iterator[AttentionMaps]:
        # id order; each shard is opened once per consecutive run of its examples
        current, handle = None, None
        for rec in self.records:
            if rec["shard"] != current:
                current = rec["shard"]
                handle = self._open_shard(rec)
            yield self._load(rec, handle)

    def _where(self, rec: dict) -> str:
        return f"{self.path}: example {rec['id']} ({rec['shard']})"

    def _open_shard(self, rec: dict) -> Any:
        path = self.path / rec["shard"]
        if not path.is_file():
            raise InputError(f"{self._where(rec)}: the shard file is missing; " + _REPAIR.format(self.path))
        try:
            return safe_open(str(path), framework="pt")
        except (SafetensorError, OSError, RuntimeError, ValueError) as exc:
            raise InputError(
                f"{self._where(rec)}: the shard is not a readable safetensors file "
                f"({_first_line(exc)}); " + _REPAIR.format(self.path)
            ) from None

    def _load(self, rec: dict, handle: Any) -> AttentionMaps:
        try:
            if rec["key"] not in handle.keys():
                raise InputError(f"the shard has no tensor {rec['key']!r}")
            tensor = handle.get_tensor(rec["key"])
            if not tensor.is_floating_point():
                raise InputError(f"tensor {rec['key']!r} is {tensor.dtype}, not floating point")
            bad_range = map_range_problem(tensor, self.manifest)
            if bad_range:  # a hand-edited or foreign map: no analysis reads it as attention
                raise InputError(bad_range)
            return self._maps(rec, tensor)
        except (SafetensorError, OSError, RuntimeError, ValueError) as exc:
            raise InputError(f"{self._where(rec)}: {_first_line(exc)}; " + _REPAIR.format(self.path)) from None

    def texts(self) -> list[str]:
        """The stored examples' texts, in index order."""
        return [r.get("text", "") for r in self.records]


def _is_count(x: object) -> TypeGuard[int]:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _check_shards(directory: Path, records: list) -> None:
    """Check that the shard of every finished example exists and its header lists the
    example (headers only; run before resuming onto a store)."""
    by_shard: dict = {}
    for r in records:
        by_shard.setdefault(r["shard"], []).append(r)
    for shard, recs in by_shard.items():
        path = directory / shard
        try:
            with safe_open(str(path), framework="pt") as f:
                keys = set(f.keys())
        except (SafetensorError, OSError, RuntimeError, ValueError) as exc:
            problem = "is missing" if not path.is_file() else f"is unreadable ({_first_line(exc)})"
            raise InputError(
                f"{directory}: shard {shard} of example {recs[0]['id']} {problem}; " + _REPAIR.format(directory)
            ) from None
        lacking = [r for r in recs if r["key"] not in keys]
        if lacking:
            raise InputError(
                f"{directory}: shard {shard} lacks the tensor of example {lacking[0]['id']}; "
                + _REPAIR.format(directory)
            )


def remove_orphans(directory: Path, records: list) -> list:
    """Delete the shards no record refers to and leftover temporary files (what a killed
    capture leaves: its last shards' index lines were never written, or were cut); returns
    the names removed. Called under the store's write lock, before new shards are written
    (by a resumed capture, and by ``probe store repair``)."""
    used = {r["shard"] for r in records}
    removed = []
    for p in sorted(directory.iterdir()):
        if ((SHARD_NAME.match(p.name) and p.name not in used) or p.name.endswith(".tmp")) and p.is_file():
            p.unlink()
            removed.append(p.name)
    if removed:
        log.warning(
            "%s: removed %d file(s) no finished example refers to (%s), left by an interrupted capture",
            directory,
            len(removed),
            ", ".join(removed[:3]) + (", …" if len(removed) > 3 else ""),
        )
    return removed


def write_index(path: Path, records: list) -> None:
    """Replace an index atomically with ``records`` (line numbers dropped)."""
    _atomic_write(path, "".join(json.dumps({k: v for k, v in r.items() if k != "_line"}) + "\n" for r in records))


def _fsync(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
