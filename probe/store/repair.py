"""``probe store verify`` and ``probe store repair``: check every part of a store, and
cut a damaged one back to the examples that read correctly.

:func:`verify_store` reads the manifest, every index line and every example's tensor
(through :class:`probe.store.directory.Store`, so each is checked exactly as an analysis would read
it) and lists what is wrong. :func:`repair_store` — under the store's write lock — keeps
the index lines whose example reads correctly, drops a torn last line, bad lines and
examples whose shard is missing or damaged, and deletes shards and temporary files no
kept line refers to. A capture run again afterwards redoes the dropped examples.
"""

from __future__ import annotations

from dataclasses import dataclass, field
import os
from pathlib import Path

from probe.errors import InputError

from probe.store.directory import Store
from probe.store.lock import StoreLock
from probe.store.schema import SHARD_NAME, read_manifest, scan_index


@dataclass
class StoreCheck:
    """What :func:`verify_store` found (or :func:`repair_store` changed)."""

    path: Path
    n_examples: int = 0
    problems: list = field(default_factory=list)  # one line each
    torn_tail: bool = False
    orphans: list = field(default_factory=list)  # file names no index line refers to
    dropped: int = 0
    incomplete: str = ""  # fewer index lines than the capture was given examples, said in one line

    @property
    def ok(self) -> bool:
        return not self.problems and not self.torn_tail and not self.orphans and not self.incomplete


def _readable(directory: Path, records: list, manifest: dict) -> tuple[list, list]:
    """``(good records, problems)``: each record's tensor loaded and checked by the reader."""
    store = Store.over(directory, manifest, records)
    good, problems, handles, broken = [], [], {}, {}
    for rec in records:
        shard = rec["shard"]
        try:
            if shard in broken:
                raise InputError(f"{store._where(rec)}: its shard is unreadable, as said for example {broken[shard]}")
            if shard not in handles:
                try:
                    handles[shard] = store._open_shard(rec)
                except ValueError:
                    broken[shard] = rec["id"]
                    raise
            store._load(rec, handles[shard])  # its range too (probe.store.schema.map_range_problem)
            good.append(rec)
        except ValueError as exc:
            problems.append(str(exc).split("; run `probe store repair")[0])
    return good, problems


def verify_store(path: str | os.PathLike) -> StoreCheck:
    """Check a store completely (every tensor is read; a store of N examples costs one pass):
    every index line, every example's tensor and its range as attention
    (:func:`probe.store.schema.map_range_problem`), and the count against the manifest's
    (``incomplete``: a missing index line is an error, not "N examples read correctly").

    Raises:
        ValueError: no store at ``path`` or a damaged manifest (nothing can be checked).
    """
    directory = Path(path)
    manifest = read_manifest(directory)
    records, bad_lines, torn = scan_index(directory / "index.jsonl")
    check = StoreCheck(path=directory, torn_tail=torn)
    check.problems = [f"index.jsonl:{n}: {p}" for n, p in bad_lines]
    good, problems = _readable(directory, records, manifest)
    check.problems += problems
    check.n_examples = len(good)
    expected = Store.over(directory, manifest, records).expected
    if expected is not None and len(records) + len(bad_lines) + int(torn) < expected:  # bad lines: said above
        check.incomplete = (
            f"the index lists {len(records) + len(bad_lines)} of the {expected} examples its capture was given "
            "(manifest: n_input less skipped): index lines are missing; run the capture again to finish it"
        )
    used = {r["shard"] for r in records}
    check.orphans = sorted(
        p.name
        for p in directory.iterdir()
        if (SHARD_NAME.match(p.name) and p.name not in used) or p.name.endswith(".tmp")
    )
    return check


def repair_store(path: str | os.PathLike) -> StoreCheck:
    """Keep only what reads correctly; returns what was found and ``dropped``.

    Raises:
        ValueError: no store, a damaged manifest, or another process writing the store.
    """
    from probe.store.directory import remove_orphans, write_index

    directory = Path(path)
    with StoreLock(directory):
        manifest = read_manifest(directory)
        records, bad_lines, torn = scan_index(directory / "index.jsonl")
        good, problems = _readable(directory, records, manifest)
        check = StoreCheck(
            path=directory,
            torn_tail=torn,
            n_examples=len(good),
            problems=[f"index.jsonl:{n}: {p}" for n, p in bad_lines] + problems,
        )
        check.dropped = len(bad_lines) + len(records) - len(good) + int(torn)
        if check.dropped:
            write_index(directory / "index.jsonl", good)
        check.orphans = remove_orphans(directory, good)
    return check
