"""Checkpoints to compare: what ``probe compare A B [C …]`` opens, and their fingerprints.

A checkpoint argument is one of

* a model spec :func:`probe.models.registry.load_model` knows (``minilm``, ``smollm2``,
  ``hf:<path>``, ``gguf:<file>``, ``zoo:<task>``, a hub id in the local cache);
* a zoo model directory (a ``card.json`` naming its task: what ``probe train`` writes,
  and each of its checkpoints ``OUT/checkpoints/step-NNNNNN``);
* a training run's directory (``probe train … --checkpoint-every N --out OUT``): all its
  checkpoints, in step order;
* any other directory: ``hf:<directory>``.

:func:`weights_fingerprint` hashes a model's weights (names, dtypes, shapes and bytes of
its state dict): two checkpoints with the same fingerprint hold the same weights (the
trap of a model hub serving the final weights under every step's name).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence, TYPE_CHECKING

from .errors import InputError

from .fingerprint import weights_fingerprint  # the one fingerprint, as stores record it

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter

log = logging.getLogger(__name__)

__all__ = ["Checkpoint", "resolve_checkpoints", "load_checkpoint", "weights_fingerprint", "shape_of"]


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint argument, resolved.

    Attributes:
        label: how tables and pages name it (``step-000100``, ``minilm``, a directory name).
        spec: the :func:`probe.models.registry.load_model` spec, or ``None`` for a zoo directory.
        path: the zoo model directory (``None`` for a spec).
        task: the zoo task of ``path``.
        step: the training step its card records (``None`` when it records none).
    """

    label: str
    spec: Optional[str] = None
    path: Optional[Path] = None
    task: Optional[str] = None
    step: Optional[int] = None


def _card(directory: Path) -> Optional[dict]:
    path = directory / "card.json"
    if not path.is_file():
        return None
    try:
        card = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path} is not a readable JSON card ({exc})") from None
    return card if isinstance(card, dict) else None


def _zoo_dir(directory: Path) -> Optional[Checkpoint]:
    card = _card(directory)
    if card is None or not isinstance(card.get("task"), str):
        return None
    step = card.get("step")
    if step is not None and (type(step) is not int or step < 0):
        raise InputError(
            f"{directory / 'card.json'}: step must be a whole number ≥ 0 (the training steps the weights took), "
            f"found {step!r}; fix the card"
        )
    return Checkpoint(label=directory.name, path=directory, task=card["task"], step=step)


def _run_checkpoints(run: Path) -> list:
    """The checkpoints of a run's ``checkpoints/`` folder by step; every folder must be one
    (a folder without a card is said, not dropped)."""
    found = []
    for d in sorted(p for p in run.iterdir() if p.is_dir()):
        ck = _zoo_dir(d)
        if ck is None:
            raise InputError(
                f"{d} has no card.json naming its task: not a checkpoint of this run; "
                "remove it from checkpoints/, or compare the checkpoints one by one"
            )
        found.append(ck)
    if not found:
        raise InputError(f"{run} holds no checkpoint (no card.json in its folders)")
    return sorted(found, key=lambda c: (c.step is None, c.step or 0, c.label))


def unique_labels(checkpoints: list) -> list:
    """``checkpoints`` with every label unique (two checkpoints under one label merged their
    rows in every table: issue 59, row 20), each relabelling said in a warning naming both:
    another checkpoint under a label given before is named by its folder too
    (``runB/step-1``: two runs' checkpoints compared step by step), the same checkpoint given
    again is ``label#2``, ``label#3`` … (the comparison then finds their weights identical)."""
    import dataclasses

    first: dict = {}
    taken = {ck.label for ck in checkpoints}
    out = []
    for ck in checkpoints:
        if ck.label not in first:
            first[ck.label] = ck
            out.append(ck)
            continue
        earlier = first[ck.label]
        same = _source(ck) == _source(earlier)
        new = None if same else _folder_label(ck, earlier)
        if new is None or new in taken:
            k = 2
            while f"{ck.label}#{k}" in taken:
                k += 1
            new = f"{ck.label}#{k}"
        taken.add(new)
        log.warning(
            "two checkpoints are labelled %r (%s, and %s): the later one is shown as %r",
            ck.label, _source(earlier), "the same again" if same else _source(ck), new,
        )  # fmt: skip
        out.append(dataclasses.replace(ck, label=new))
    return out


def _source(ck: Checkpoint) -> str:
    """Where a checkpoint's weights come from: its folder (resolved) or its spec."""
    if ck.path is not None:
        return str(Path(ck.path).resolve())
    spec = ck.spec or ck.label
    return f"hf:{Path(spec[3:]).resolve()}" if spec.startswith("hf:") and Path(spec[3:]).exists() else spec


def _folders(ck: Checkpoint) -> Optional[list]:
    """The folders holding a checkpoint on disk, innermost last (a run's ``checkpoints/``
    left out); ``None`` for a spec of no folder."""
    spec = ck.spec or ""
    where = ck.path if ck.path is not None else (Path(spec[3:]) if spec.startswith("hf:") else None)
    if where is None:
        return None
    parts = list(Path(where).resolve().parent.parts)
    return parts[:-1] if parts and parts[-1] == "checkpoints" else parts


def _folder_label(ck: Checkpoint, earlier: Checkpoint) -> Optional[str]:
    """``<folders>/<label>``: ``ck``'s label behind the fewest of its folders that tell it
    from ``earlier`` (``runB/step-1`` for ``runB/checkpoints/step-1`` beside
    ``runA/checkpoints/step-1``); ``None`` when no folder does."""
    mine, theirs = _folders(ck), _folders(earlier) or []
    if not mine:
        return None
    for k in range(1, len(mine) + 1):
        if mine[-k:] != theirs[-k:]:
            return "/".join([*mine[-k:], ck.label]).lstrip("/")
    return None


def _check_bare_name(arg: str) -> None:
    from .model_names import bare_spec, unknown_model
    from .registry import known_names

    named, prefixes = known_names()
    if ":" not in arg and arg not in named and bare_spec(arg) is None:
        raise unknown_model(arg, named, prefixes)


def resolve_checkpoints(args: Sequence[str]) -> list:
    """The :class:`Checkpoint` s the arguments name, in order (a run's directory expands to
    its checkpoints by step).

    Raises:
        InputError: a run directory without checkpoints, a path that does not exist.
    """
    out: list = []
    for arg in args:
        p = Path(arg)
        if ":" in arg or not p.exists():  # a spec: refused now when unknown ("did you mean …")
            _check_bare_name(arg)
            out.append(Checkpoint(label=arg, spec=arg))
            continue
        if not p.is_dir():
            raise InputError(f"checkpoint {arg!r} is a file; give a model directory or a spec")
        run = p / "checkpoints"
        if run.is_dir():  # a training run: its checkpoints, by step
            out.extend(_run_checkpoints(run))
            continue
        zoo = _zoo_dir(p)
        out.append(zoo if zoo is not None else Checkpoint(label=p.name or arg, spec=f"hf:{p}"))
    return unique_labels(out)


def load_checkpoint(checkpoint: Checkpoint, device: str = "cpu") -> Any:
    """The :class:`probe.models.adapter.ModelAdapter` of ``checkpoint`` (a zoo directory is
    named ``zoo:<task>`` so the zoo's objectives and evaluation set apply to it)."""
    from .registry import check_device, load_model

    if checkpoint.spec is not None:
        return load_model(checkpoint.spec, device=device)
    from . import zoo
    from .adapter import ModelAdapter
    from .architectures import family_for

    loaded = zoo.load_zoo(checkpoint.task or "", checkpoint.path)
    if loaded.card.get("family") == "gru-attention":
        raise InputError(f"{checkpoint.path} is a GRU model: compare needs transformers with attention heads")
    adapter = ModelAdapter(
        name=f"zoo:{loaded.task}",
        model=loaded.model,
        tokenizer=loaded.tokenizer,
        family=family_for(loaded.model.config.model_type),
        source=str(checkpoint.path),
        card=dict(loaded.card),
    )
    if device and device != "cpu":
        adapter.model.to(check_device(device))
    return adapter


def shape_of(adapter: ModelAdapter) -> dict:
    """What two checkpoints must share to be compared head by head: family, layers,
    heads, head size and vocabulary size."""
    cfg = getattr(adapter.model, "config", None)
    return {
        "family": adapter.family,
        "layers": int(adapter.n_layers),
        "heads": int(adapter.n_heads),
        "hidden": getattr(cfg, "hidden_size", None),
        "vocab": getattr(cfg, "vocab_size", None),
    }
