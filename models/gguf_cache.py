"""The cache of dequantised GGUF models: one plain safetensors folder per GGUF file.

A GGUF file (llama.cpp's format: quantised weights, config and tokenizer in one file) is
dequantised once by transformers and saved as an ordinary model folder (``config.json``,
``model.safetensors``, tokenizer files) that later loads read in seconds through the same
path as ``hf:`` folders (:func:`probe.models.registry.load_hf`).

* **Where**: ``$ATTENTION_PROBE_CACHE`` when set, else the user cache folder
  (``$XDG_CACHE_HOME/attention-probe``, by default ``~/.cache/attention-probe``; on Windows
  ``%LOCALAPPDATA%\\attention-probe``), under ``gguf/``. :func:`cache_root` says which.
* **Key**: the GGUF file's fingerprint, its size and the SHA-256 of all its bytes (one read
  of the file, ~0.15 s for SmolLM2's 98 MB): the same bytes under any name or path share one
  folder ``gguf/<first 32 hex digits>``; a changed file gets a new one.
* **Checked on every load**: the folder's ``gguf-source.json`` records the GGUF fingerprint
  and the size and SHA-256 of every file written; a folder whose record is missing or
  unreadable, or whose files differ from it (damaged, truncated, edited), is rebuilt and the
  log says so in one line (~0.5 s to hash SmolLM2's 538 MB of float32 weights).
* **Atomic**: a folder is built in a temporary sibling (``gguf/.building-…``) and renamed into
  place as a whole, so a reader never sees half a folder; two processes building the same
  key at once take a lock file in turn (POSIX), and where the lock is not available the
  first rename wins and the other process uses the winner's folder.
* **Read-only cache**: when the folder cannot be written, the model is built in a temporary
  folder, loaded from there and the temporary folder removed, with one log line saying so
  (it is dequantised again on the next load).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional

log = logging.getLogger(__name__)

CACHE_ENV = "ATTENTION_PROBE_CACHE"
RECORD = "gguf-source.json"
_CHUNK = 1 << 22


def cache_root() -> Path:
    """The cache folder: ``$ATTENTION_PROBE_CACHE``, else the platform's user cache folder
    (``$XDG_CACHE_HOME/attention-probe``, ``~/.cache/attention-probe``; ``%LOCALAPPDATA%`` on Windows)."""
    env = os.environ.get(CACHE_ENV, "").strip()
    if env:
        return Path(env).expanduser()
    if sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"]) / "attention-probe"
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "attention-probe"


def file_sha256(path: Path) -> str:
    """SHA-256 of every byte of ``path`` (hex)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


@dataclass(frozen=True)
class Fingerprint:
    """What identifies a GGUF file's content: its size in bytes and the SHA-256 of its bytes."""

    size: int
    sha256: str

    @property
    def key(self) -> str:
        """The cache folder's name."""
        return self.sha256[:32]


def gguf_fingerprint(path: Path) -> Fingerprint:
    """The :class:`Fingerprint` of ``path`` (one read of the whole file)."""
    return Fingerprint(size=path.stat().st_size, sha256=file_sha256(path))


def _record_files(folder: Path) -> dict:
    return {
        f.name: {"size": f.stat().st_size, "sha256": file_sha256(f)}
        for f in sorted(folder.iterdir())
        if f.is_file() and f.name != RECORD
    }


def write_record(folder: Path, fingerprint: Fingerprint, source: Path, extra: dict) -> None:
    """Write ``gguf-source.json`` into ``folder``: the GGUF's fingerprint and name, and the
    size and SHA-256 of every other file in ``folder`` (written last)."""
    record = {
        "gguf": {"name": source.name, "size": fingerprint.size, "sha256": fingerprint.sha256},
        "files": _record_files(folder),
        **extra,
    }
    (folder / RECORD).write_text(json.dumps(record, indent=1), encoding="utf-8")


def check_folder(folder: Path, fingerprint: Fingerprint) -> Optional[str]:
    """Why ``folder`` is not a good copy of the GGUF with ``fingerprint`` (``None`` when it is):
    no record, a record of another GGUF, a file missing or of another size or SHA-256."""
    try:
        record = json.loads((folder / RECORD).read_text(encoding="utf-8"))
        gguf, files = record["gguf"], record["files"]
        if gguf["sha256"] != fingerprint.sha256 or int(gguf["size"]) != fingerprint.size:
            return f"its {RECORD} records another GGUF file (sha256 {str(gguf['sha256'])[:16]}…)"
        if not isinstance(files, dict) or "config.json" not in files:
            return f"its {RECORD} lists no config.json"
        for name, want in files.items():
            path = folder / name
            if not path.is_file():
                return f"{name} is missing"
            if path.stat().st_size != int(want["size"]):
                return f"{name} has {path.stat().st_size:,} bytes, its record {int(want['size']):,}"
            if file_sha256(path) != want["sha256"]:
                return f"{name} differs from its record (sha256)"
    except FileNotFoundError:
        return f"it has no {RECORD}"
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        return f"its {RECORD} is unreadable ({type(exc).__name__})"
    return None


@contextlib.contextmanager
def _build_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` (POSIX ``flock``); a no-op where ``fcntl`` is missing
    (the rename below still leaves one good copy)."""
    try:
        import fcntl
    except ImportError:  # Windows: rename-wins only
        yield
        return
    with open(path, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _writable(root: Path) -> bool:
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / f".write-test-{uuid.uuid4().hex}"
        probe.write_bytes(b"")
        probe.unlink()
        return True
    except OSError:
        return False


def _discard(folder: Path) -> None:
    """Move ``folder`` aside (atomically) and delete it."""
    aside = folder.with_name(f".stale-{folder.name}-{uuid.uuid4().hex[:8]}")
    with contextlib.suppress(OSError):
        os.replace(folder, aside)
        shutil.rmtree(aside, ignore_errors=True)


@dataclass(frozen=True)
class CachedFolder:
    """A good model folder for a GGUF file.

    Attributes:
        folder: the safetensors model folder.
        state: ``read`` (found and checked), ``built``, ``rebuilt`` (a bad copy replaced) or
            ``temporary`` (the cache is not writable: a folder the caller must delete).
        note: the one-line reason for ``rebuilt`` and ``temporary`` (``""`` otherwise).
    """

    folder: Path
    state: str
    note: str = ""


def cached_folder(
    source: Path, build: Callable[[Path], dict], root: Optional[Path] = None, fingerprint: Optional[Fingerprint] = None
) -> CachedFolder:
    """The checked cache folder of the GGUF file ``source``, built with ``build(folder)`` (which
    writes a model folder and returns what the record adds) when missing or bad.

    Nothing is left in the cache when ``build`` raises."""
    fingerprint = fingerprint or gguf_fingerprint(source)
    base = (root or cache_root()) / "gguf"
    final = base / fingerprint.key
    if final.is_dir() and check_folder(final, fingerprint) is None:
        return CachedFolder(final, "read")
    if not _writable(base):
        note = (
            f"cache folder {base} is not writable: dequantised into a temporary folder for this load only "
            f"(set {CACHE_ENV} to a writable folder to keep it)"
        )
        log.warning(note)
        temp = Path(tempfile.mkdtemp(prefix="attention-probe-gguf-"))
        try:
            write_record(temp, fingerprint, source, build(temp))
        except BaseException:
            shutil.rmtree(temp, ignore_errors=True)
            raise
        return CachedFolder(temp, "temporary", note)
    with _build_lock(base / f"{fingerprint.key}.lock"):
        problem = check_folder(final, fingerprint) if final.exists() else None
        if final.exists() and problem is None:  # another process built it while this one waited
            return CachedFolder(final, "read")
        note = ""
        if problem is not None:
            note = f"cache folder {final} is not a good copy ({problem}): rebuilding it from {source.name}"
            log.warning(note)
            _discard(final)
        _publish(source, fingerprint, build, base, final)
    if check_folder(final, fingerprint) is not None:  # only if something removed it under us
        raise OSError(f"cache folder {final} was changed while it was built")
    return CachedFolder(final, "rebuilt" if note else "built", note)


def _publish(source: Path, fingerprint: Fingerprint, build: Callable[[Path], dict], base: Path, final: Path) -> None:
    """Build into ``base/.building-…`` and rename it to ``final``; when another process's rename
    came first, keep theirs and delete this one."""
    temp = base / f".building-{fingerprint.key}-{uuid.uuid4().hex[:8]}"
    temp.mkdir()
    try:
        write_record(temp, fingerprint, source, build(temp))
        try:
            os.rename(temp, final)
        except OSError:  # final exists (non-empty): another builder's rename came first
            if check_folder(final, fingerprint) is None:
                log.info("cache folder %s was built by another process meanwhile; using it", final)
                return
            _discard(final)
            os.rename(temp, final)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
