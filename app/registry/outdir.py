"""``--out`` is always a directory, checked before any compute and written atomically.

:class:`OutDir` refuses a path that is a file, a non-empty directory (unless ``force``)
or one whose parent cannot be created or written, *before* the analysis runs; the
result is written into a temporary sibling directory that is renamed into place at the
end, so a failed run leaves nothing half-written (and an existing ``--out`` untouched).

``--out`` is resolved once, at the check: a symbolic link (anywhere in the path) is
*followed*, and the result replaces the directory it points to, never the link itself;
every later step uses that resolved path. Writability is proved, not guessed from
permission bits (which say yes to root under ``/proc``): a file is created and removed in
the directory that will receive the result, before any compute.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Optional, Union

from probe.errors import InputError

log = logging.getLogger(__name__)


def check_out(out: Union[str, Path], force: bool = False) -> Path:
    """``out`` as a Path, after checking it can receive a result.

    Returns the resolved absolute path (symbolic links followed): use it from then on.

    Raises:
        InputError: ``out`` is a file, a non-empty directory without ``force``, or its
            nearest existing parent is not a directory in which a file can be created.
    """
    given = Path(out)
    out = Path(os.path.realpath(given.expanduser()))
    if given.is_symlink():
        log.info("--out %s is a symbolic link: writing into %s", given, out)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {given} is a file: --out is always a directory; choose another path")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise InputError(f"--out {given} is not empty: pass --force to replace it, or choose another directory")
    parent = out.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"cannot create --out {given}: {parent} is not a writable directory")
    probe_writable(parent, given)
    return out


def probe_writable(directory: Path, given: Union[str, Path]) -> None:
    """Create and remove a file in ``directory``.

    Raises:
        InputError: the file cannot be created (naming ``--out given`` and the reason).
    """
    try:
        fd, name = tempfile.mkstemp(prefix=".probe-write-check-", dir=directory)
        os.close(fd)
        os.unlink(name)
    except OSError as exc:
        raise InputError(
            f"cannot write --out {given}: creating a file in {directory} failed "
            f"({exc.strerror or exc}); choose a writable directory"
        ) from None


def _entries(out: Path) -> Optional[set]:
    """The names in ``out`` (None: no such directory)."""
    return {p.name for p in out.iterdir()} if out.is_dir() else None


class OutDir:
    """Context manager yielding a temporary directory beside ``out``; on success it
    replaces ``out``, on error it is removed and ``out`` is left as it was."""

    def __init__(self, out: Union[str, Path], force: bool = False) -> None:
        self.out = check_out(out, force)
        self.tmp: Optional[Path] = None
        self.seen = _entries(self.out)  # what --out held when the command checked it

    def __enter__(self) -> Path:
        self.out.absolute().parent.mkdir(parents=True, exist_ok=True)
        self.tmp = tmp = Path(tempfile.mkdtemp(prefix=f".{self.out.name}.tmp-", dir=self.out.absolute().parent))
        return tmp

    def __exit__(self, exc_type, exc, tb) -> bool:
        tmp = self.tmp
        if tmp is None:  # never entered
            return False
        if exc_type is not None:
            shutil.rmtree(tmp, ignore_errors=True)
            return False
        os.chmod(tmp, 0o755)
        self._recheck(tmp)
        if self.out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{self.out.name}.old-", dir=self.out.absolute().parent))
            os.replace(self.out, old / "x")
            os.replace(tmp, self.out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, self.out)
        return False

    def _recheck(self, tmp: Path) -> None:
        """``out`` checked again before it is replaced (issue 59, row 15): what another program
        wrote there while this command ran is never removed; the result is kept in ``tmp``."""
        now = _entries(self.out)
        new = sorted((now or set()) - (self.seen or set())) if now is not None else []
        if self.out.exists() and not self.out.is_dir():
            new = [self.out.name]
        if new:
            raise InputError(
                f"--out {self.out} changed while this command ran ({new[0]!r} appeared); nothing in it was "
                f"removed and the result is in {tmp}: move it, or run again with another --out"
            )
