"""One writer per store: an exclusive lock file holding the writer's PID and host.

:class:`StoreLock` creates ``<store>/.lock`` atomically (written to a unique temporary
file, then hard-linked to the lock name, which fails when a lock exists), so a second
writer — another ``probe capture`` into the same ``--out``, or ``probe store repair`` —
fails at once instead of interleaving its shards and index lines with the first. A lock
left by a process that is dead on this host (a SIGKILL) is stale and taken over; a lock
of another host cannot be checked and is refused with the path to remove by hand.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import uuid
from pathlib import Path
from typing import Optional

from probe.errors import InputError

log = logging.getLogger(__name__)

LOCK_NAME = ".lock"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _read(path: Path) -> Optional[dict]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None


class StoreLock:
    """Exclusive write access to a store directory; a context manager.

    Raises (from :meth:`acquire`):
        ValueError: another live process holds the lock (its PID and host are named), or
            the directory cannot be written.
    """

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)
        self.path = self.directory / LOCK_NAME
        self.me = {"pid": os.getpid(), "host": socket.gethostname()}
        self.held = False

    def acquire(self) -> "StoreLock":
        """Take the lock (atomically, by a hard link; a stale lock of a dead process on this host is taken over)."""
        tmp = self.directory / f"{LOCK_NAME}.{uuid.uuid4().hex}.tmp"
        try:
            tmp.write_text(json.dumps(self.me), encoding="utf-8")
            for _ in range(3):
                try:
                    os.link(tmp, self.path)
                    self.held = True
                    return self
                except FileExistsError:
                    self._take_over_if_stale()
        except OSError as exc:
            raise InputError(f"cannot lock {self.directory} for writing: {exc.strerror or exc}") from None
        finally:
            tmp.unlink(missing_ok=True)
        raise InputError(f"{self.directory} is being written by another process (lock {self.path})")

    def _take_over_if_stale(self) -> None:
        owner = _read(self.path)
        if owner is None and not self.path.exists():
            return  # released meanwhile: try again
        pid, host = (owner or {}).get("pid"), (owner or {}).get("host")
        if host != self.me["host"] or not isinstance(pid, int):
            raise InputError(
                f"{self.directory} is locked by {pid or 'an unknown process'} on host {host!r} "
                f"({self.path}); if no capture is running there, remove that file"
            )
        if _alive(pid):
            raise InputError(
                f"{self.directory} is being written by process {pid} on this host; wait for it "
                f"to finish or choose another --out (lock: {self.path})"
            )
        # stale: move it aside under a unique name, then check it is the one we judged dead
        aside = self.directory / f"{LOCK_NAME}.stale.{uuid.uuid4().hex}"
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return
        if _read(aside) != owner:  # another writer replaced it in between: put it back
            try:
                os.link(aside, self.path)
            finally:
                aside.unlink(missing_ok=True)
            return
        aside.unlink(missing_ok=True)
        log.warning("took over the stale lock of dead process %s in %s", pid, self.directory)

    def release(self) -> None:
        """Give the lock back if this process holds it."""
        if self.held and _read(self.path) == self.me:
            self.path.unlink(missing_ok=True)
        self.held = False

    def __enter__(self) -> "StoreLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> bool:
        self.release()
        return False
