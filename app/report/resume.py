"""Partial results of a report: each section is saved as it completes, so a killed or
failed run keeps what finished and rerunning the same command resumes from it.

The sections of a report on ``DIR`` are kept in ``.DIR.partial/`` beside it (the same
parent directory, where the report is built before it is renamed into place)::

    .DIR.partial/state.json                  format, what the results depend on (the fingerprint)
    .DIR.partial/sections/<name>.json        one finished section: status, reason, notes, summary,
                                             tables (columns, dtypes, values), JSON-able data
    .DIR.partial/sections/<name>.safetensors its arrays (the ablation sweep's per-example scores)

A rerun whose fingerprint (toolkit version, model, input, sections, the report's options)
equals the saved one loads the finished sections instead of running them. One whose model
weights or tokenizer differ (a model folder changed in place) recomputes every section, since
each reads the model. One whose section options alone differ (``--objective``, the section
list, the options a section declares: ``--causal``, ``--null``, ``--explained-examples`` …)
resumes the sections whose own options (:func:`probe.app.report.sections.section_options`,
saved with each) are unchanged and recomputes the others (issue 59, row 14). Any other
difference (the input, the device, the batch size …) is refused, naming what differs, and
nothing is overwritten. When the report is written the directory is removed. Values round-trip exactly (floats as JSON numbers,
dtypes restored), so a resumed report says what an uninterrupted one says.

A section whose in-memory data cannot be saved (the claims' objects) is run again.
"""

from __future__ import annotations

from typing import Any

import hashlib
import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from probe.errors import InputError

log = logging.getLogger(__name__)

FORMAT = "attention-probe partial report 1"

__all__ = ["FORMAT", "PartialReport", "fingerprint", "partial_dir"]


def toolkit_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("attention-probe")
    except PackageNotFoundError:
        return "unknown"


def corpus_digest(corpus: Any) -> str:
    """sha256 of the examples' texts (and word spans), in order."""
    h = hashlib.sha256()
    for i, text in enumerate(corpus.texts):
        h.update(text.encode("utf-8", "surrogatepass") + b"\0")
        if corpus.word_spans:
            h.update(repr(corpus.word_spans[i]).encode() + b"\0")
    return h.hexdigest()


def fingerprint(**parts: Any) -> dict:
    """What a report's results depend on, as a flat JSON-able dict (the toolkit version added)."""
    return json.loads(json.dumps({"version": toolkit_version(), **parts}, default=str))


def partial_dir(out: Any) -> Path:
    out = Path(out)
    return out.absolute().parent / f".{out.name}.partial"


def _table_to_json(df: pd.DataFrame) -> dict:
    cols = []
    for c in df.columns:
        values = df[c].tolist()
        cols.append(
            {
                "name": c if isinstance(c, str) else json.dumps(c),
                "dtype": str(df[c].dtype),
                "values": [_plain(v) for v in values],
            }
        )
    return {"columns": cols, "rows": len(df)}


def _plain(v):
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def _table_from_json(d: dict) -> pd.DataFrame:
    data = {}
    for c in d["columns"]:
        data[c["name"]] = pd.Series(c["values"], dtype=object).astype(c["dtype"])  # the dtype it was saved with
    return pd.DataFrame(data, index=range(d["rows"])) if data else pd.DataFrame(index=range(d["rows"]))


def _save_data(data: dict) -> tuple | None:
    """``(json part, arrays)`` of a Result's data, or ``None`` when some value cannot be saved."""
    from probe.analyses.necessity.ablation import SweepResult

    from probe.analyses.claims.removal import RemovalSweep

    plain, arrays = {}, {}
    for k, v in data.items():
        if isinstance(v, RemovalSweep):
            plain[k] = _save_removals(k, v, arrays)
        elif isinstance(v, SweepResult):
            plain[k] = {
                "kind": "sweep",
                "table": _table_to_json(v.table),
                "heads": [list(h) for h in v.heads],
                "path": v.path,
            }
            arrays[f"{k}.clean"] = np.ascontiguousarray(v.clean)
            arrays[f"{k}.ablated"] = np.ascontiguousarray(v.ablated)
        else:
            try:
                plain[k] = {"kind": "json", "value": json.loads(json.dumps(v, allow_nan=True))}
            except TypeError:  # not JSON (an object): the section is not kept for resume
                return None
    return plain, arrays


def _load_data(plain: dict, arrays: dict) -> dict:
    from probe.analyses.necessity.ablation import SweepResult

    out = {}
    for k, v in plain.items():
        if v["kind"] == "removals":
            out[k] = _load_removals(k, v, arrays)
        elif v["kind"] == "sweep":
            out[k] = SweepResult(
                table=_table_from_json(v["table"]),
                clean=arrays[f"{k}.clean"],
                ablated=arrays[f"{k}.ablated"],
                heads=tuple(tuple(h) for h in v["heads"]),
                path=v["path"],
            )
        else:
            out[k] = v["value"]
    return out


def _save_removals(k: str, sweep, arrays: dict) -> dict:
    """A :class:`probe.analyses.claims.removal.RemovalSweep`: its arrays into ``arrays``
    (``k.harm.<mode>``, ``k.measures.<mode>.<name>``, ``k.corpus.<mode>.<name>``, ``k.clean``),
    the rest as JSON."""
    for mode, a in sweep.harm.items():
        arrays[f"{k}.harm.{mode}"] = np.ascontiguousarray(a)
    for part in ("measures", "corpus"):
        for mode, named in getattr(sweep, part).items():
            for name, a in named.items():
                arrays[f"{k}.{part}.{mode}.{name}"] = np.ascontiguousarray(np.asarray(a, dtype=np.float64))
    if sweep.clean is not None:
        arrays[f"{k}.clean"] = np.ascontiguousarray(sweep.clean)
    return {
        "kind": "removals",
        "units": [[list(h) for h in u] for u in sweep.units],
        "names": {part: {m: sorted(d) for m, d in getattr(sweep, part).items()} for part in ("measures", "corpus")},
        "modes": list(sweep.harm),
        "scalars": {
            "objective": sweep.objective,
            "units_text": sweep.units_text,
            "n": sweep.n,
            "describe": sweep.describe,
            "skipped": sweep.skipped,
            "pooling": sweep.pooling,
            "higher_is_better": sweep.higher_is_better,
            "corpus_key": sweep.corpus_key,
            "kinds": sweep.kinds,
        },
    }


def _load_removals(k: str, v: dict, arrays: dict):
    from probe.analyses.claims.removal import RemovalSweep

    parts = {
        part: {m: {name: arrays[f"{k}.{part}.{m}.{name}"] for name in names} for m, names in v["names"][part].items()}
        for part in ("measures", "corpus")
    }
    return RemovalSweep(
        units=tuple(tuple(tuple(h) for h in u) for u in v["units"]),
        harm={m: arrays[f"{k}.harm.{m}"] for m in v["modes"]},
        measures=parts["measures"],
        corpus=parts["corpus"],
        clean=arrays.get(f"{k}.clean"),
        **v["scalars"],
    )


class PartialReport:
    """The finished sections of one report on ``out`` (see the module docstring).

    Raises (on opening):
        ValueError: a partial directory written by another version or with other
            settings (naming what differs); nothing is changed.
    """

    def __init__(self, out: Any, fp: dict, fresh: bool = False) -> None:
        self.dir = partial_dir(out)
        self.fingerprint = fp
        self._lock = _report_lock(out)  # one report on one --out at a time (issue 59, row 16)
        try:
            self._open(fresh)
        except BaseException:
            self.release()
            raise

    def _open(self, fresh: bool) -> None:
        fp = self.fingerprint
        state = self.dir / "state.json"
        if self.dir.exists() and not fresh:
            fresh = self._inputs_changed(state)
        if self.dir.exists() and fresh:
            shutil.rmtree(self.dir)
        if self.dir.exists():
            try:
                saved = json.loads(state.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError):
                raise InputError(
                    f"{self.dir} holds no readable state.json: not a partial report of this "
                    "toolkit; remove it or use another --out"
                ) from None
            if saved.get("format") == FORMAT and _options_alone_differ(saved.get("fingerprint"), fp):
                log.info("resuming %s with other section options: %s", self.dir, self._differs(saved))
                state.write_text(json.dumps({"format": FORMAT, "fingerprint": fp}, indent=1), encoding="utf-8")
                saved = {"format": FORMAT, "fingerprint": fp}  # each section's own options decide (load)
            if saved.get("format") != FORMAT or saved.get("fingerprint") != fp:
                raise InputError(
                    f"cannot resume: {self.dir} was written {self._differs(saved)}; nothing was "
                    "overwritten. Rerun with the same options, or --no-resume to start afresh "
                    "(discarding it)"
                )
            self.resumed = sorted(p.stem for p in (self.dir / "sections").glob("*.json"))
            if self.resumed:
                log.info("resuming %s: %s finished", self.dir, ", ".join(self.resumed))
        else:
            (self.dir / "sections").mkdir(parents=True)
            state.write_text(json.dumps({"format": FORMAT, "fingerprint": fp}, indent=1), encoding="utf-8")
            self.resumed = []

    def _inputs_changed(self, state: Path) -> bool:
        """Whether the saved sections were made from other weights or another tokenizer under
        the same command (a model folder changed in place): then every section is recomputed,
        since each reads the model (issue 59, row 14: they were resumed with the old weights)."""
        try:
            saved = json.loads(state.read_text(encoding="utf-8")).get("fingerprint") or {}
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
            return False  # said (and refused) by _open's own reading
        changed = [k for k in _MODEL_FILES if k in saved and saved.get(k) != self.fingerprint.get(k)]
        rest = {k for k in set(saved) | set(self.fingerprint) if k not in _MODEL_FILES and k not in _SECTION_OPTIONS}
        if not changed or any(saved.get(k) != self.fingerprint.get(k) for k in rest):
            return False
        log.warning(
            "the model's %s changed since %s was written: its finished sections are recomputed",
            " and ".join(_MODEL_FILES[k] for k in changed),
            self.dir,
        )
        return True

    def release(self) -> None:
        """Give back the report's lock on its --out (and remove the lock's folder)."""
        self._lock.release()
        try:
            self._lock.directory.rmdir()
        except OSError:
            pass  # another run's lock, or already gone

    def _differs(self, saved: dict) -> str:
        if saved.get("format") != FORMAT:
            return f"in another format ({saved.get('format')!r}, this toolkit writes {FORMAT!r})"
        old = saved.get("fingerprint") or {}
        keys = sorted(set(old) | set(self.fingerprint))
        diffs = [
            f"{k} {old.get(k)!r} there, {self.fingerprint.get(k)!r} now"
            for k in keys
            if old.get(k) != self.fingerprint.get(k)
        ]
        return "with other settings: " + "; ".join(diffs)

    # ---- one section --------------------------------------------------------------
    def load(self, name: str, kind: Any = None, options: Any = None) -> Any:
        """The saved :class:`probe.app.report.sections.SectionOutcome`, or ``None``; its
        result is a ``kind`` (the section's declared result type; default :class:`Result`).
        ``options``: the section's options now (:func:`probe.app.report.sections.section_options`);
        a section saved under others is removed and ``None`` returned (it is run again)."""
        from probe.app.registry import Result

        from .sections import SectionOutcome

        path = self.dir / "sections" / f"{name}.json"
        if not path.is_file():
            return None
        d = json.loads(path.read_text(encoding="utf-8"))
        if options is not None and d.get("options") != _plain_json(options):
            log.warning("section %s: its options changed since it finished, so it is recomputed", name)
            path.unlink()
            path.with_suffix(".safetensors").unlink(missing_ok=True)
            return None
        arrays = {}
        st = path.with_suffix(".safetensors")
        if st.is_file():
            from safetensors.numpy import load_file

            arrays = load_file(str(st))
        per_head = _table_from_json(d["per_head"]) if d.get("per_head") is not None else None
        result = (kind or Result)(
            tables={k: _table_from_json(t) for k, t in d["tables"].items()},
            per_head=per_head,
            notes=list(d["notes"]),
            summary=d["summary"],
            summary_name=d["summary_name"],
            data=_load_data(d["data"], arrays),
        )
        return SectionOutcome(d["name"], d["title"], d["status"], d["reason"], d["seconds"], result)

    def said(self, name: str) -> list:
        """The lines (choices made for the user) a saved section said when it ran."""
        path = self.dir / "sections" / f"{name}.json"
        if not path.is_file():
            return []
        return list(json.loads(path.read_text(encoding="utf-8")).get("said", []))

    def save(self, outcome: Any, said: list | None = None, options: Any = None) -> bool:
        """Save a finished section (ran or skipped) with the ``options`` it ran under;
        ``False`` when its data cannot be saved."""
        if outcome.status not in ("ran", "skipped"):
            return False
        r = outcome.result
        packed = _save_data(r.data)
        if packed is None:
            log.info("section %s: its data is not saved; a resumed run repeats it", outcome.name)
            return False
        plain, arrays = packed
        d = {
            "name": outcome.name,
            "title": outcome.title,
            "status": outcome.status,
            "reason": outcome.reason,
            "seconds": outcome.seconds,
            "notes": list(r.notes),
            "summary": json.loads(json.dumps(r.summary, default=_plain_default, allow_nan=True)),
            "summary_name": r.summary_name,
            "tables": {k: _table_to_json(t) for k, t in r.tables.items()},
            "per_head": None if r.per_head is None else _table_to_json(r.per_head),
            "data": plain,
            "said": list(said or []),
            "options": _plain_json(options),
        }
        sections = self.dir / "sections"
        if arrays:
            from safetensors.numpy import save_file

            save_file(arrays, str(sections / f"{outcome.name}.safetensors.tmp"))
            (sections / f"{outcome.name}.safetensors.tmp").replace(sections / f"{outcome.name}.safetensors")
        tmp = sections / f"{outcome.name}.json.tmp"
        tmp.write_text(json.dumps(d, default=_plain_default), encoding="utf-8")
        tmp.replace(sections / f"{outcome.name}.json")  # the .json last: it marks the section finished
        return True

    def discard(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
        self.release()


#: fingerprint keys of the model's files -> how a message names them
_MODEL_FILES = {"weights": "weights", "tokenizer": "tokenizer"}

#: fingerprint keys that only some sections read: each section's own options (saved with it) decide
_SECTION_OPTIONS = ("sections", "overrides", "objective")


def _options_alone_differ(saved: Any, now: dict) -> bool:
    """Whether fingerprints ``saved`` and ``now`` differ, and only in :data:`_SECTION_OPTIONS`."""
    if not isinstance(saved, dict) or saved == now:
        return False
    keys = set(saved) | set(now)
    return all(saved.get(k) == now.get(k) for k in keys if k not in _SECTION_OPTIONS)


def _plain_json(value: Any) -> Any:
    """``value`` as JSON reads it back (tuples as lists, numpy scalars as numbers)."""
    return json.loads(json.dumps(value, default=_plain_default))


def _report_lock(out: Any) -> Any:
    """The lock of the report on ``out``: ``.OUT.lock/.lock`` beside it (not inside the
    partial folder, which --no-resume removes), taken at once or refused in one line."""
    from probe.store.lock import StoreLock

    lock_dir = Path(out).absolute().parent / f".{Path(out).name}.lock"
    lock_dir.mkdir(parents=True, exist_ok=True)
    return StoreLock(lock_dir).acquire()


def _plain_default(v):
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, pd.DataFrame):
        return v.to_dict("records")
    return str(v)
