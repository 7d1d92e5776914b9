"""A sentence model's own pooling: how its token states become one sentence embedding.

sentence-transformers models (Reimers & Gurevych 2019) describe it in the model folder:
``modules.json`` names a ``Pooling`` module whose ``config.json`` sets one of
``pooling_mode_mean_tokens`` / ``pooling_mode_cls_token`` / ``pooling_mode_max_tokens``,
and a ``Normalize`` module L2-normalises the result. :func:`model_pooling` reads that
(JSON only); a model folder without it is pooled at its first token ([CLS], Devlin et al.
2019), and the :class:`Pooling` says which and where it was read.

Shapes: :meth:`Pooling.pool` maps hidden states ``[b, seq, d]`` and a mask ``[b, seq]``
to ``[b, d]``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import torch

from probe.errors import InputError

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter

__all__ = ["Pooling", "model_pooling", "POOLING_MODES"]

POOLING_MODES = ("mean", "cls", "max")


@dataclass(frozen=True)
class Pooling:
    """Attributes: mode (``mean`` | ``cls`` | ``max``), normalize (L2 after pooling),
    source (where it was read, for reports)."""

    mode: str = "cls"
    normalize: bool = False
    source: str = "default: first token ([CLS])"

    def __post_init__(self) -> None:
        if self.mode not in POOLING_MODES:
            raise InputError(f"unknown pooling {self.mode!r}; use one of {', '.join(POOLING_MODES)}")

    def pool(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``hidden [b, seq, d]``, ``mask [b, seq]`` (1 = real token) -> ``[b, d]``."""
        m = mask.to(hidden.dtype).unsqueeze(-1)
        if self.mode == "mean":
            out = (hidden * m).sum(1) / m.sum(1).clamp(min=1)
        elif self.mode == "max":
            out = hidden.masked_fill(m == 0, float("-inf")).max(1).values
        else:
            out = hidden[:, 0]
        return torch.nn.functional.normalize(out, dim=-1) if self.normalize else out

    def reads(self, n_tokens: int) -> tuple:
        """Token positions the pooled embedding reads (all for mean/max, 0 for [CLS])."""
        return (0,) if self.mode == "cls" else tuple(range(n_tokens))

    def describe(self) -> str:
        return f"{self.mode} pooling{', L2-normalised' if self.normalize else ''} ({self.source})"


def _read_json(path: Path) -> Optional[object]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):  # no readable config: the next source
        return None


def _from_folder(folder: Path) -> Optional[Pooling]:
    modules = _read_json(folder / "modules.json")
    if not isinstance(modules, list):
        return None
    pool_dir = next(
        (m.get("path", "") for m in modules if isinstance(m, dict) and str(m.get("type", "")).endswith("Pooling")), None
    )
    if pool_dir is None:
        return None
    normalize = any(isinstance(m, dict) and str(m.get("type", "")).endswith("Normalize") for m in modules)
    cfg = _read_json(folder / pool_dir / "config.json")
    if not isinstance(cfg, dict):
        return None
    mode = (
        "mean"
        if cfg.get("pooling_mode_mean_tokens")
        else "cls"
        if cfg.get("pooling_mode_cls_token")
        else "max"
        if cfg.get("pooling_mode_max_tokens")
        else None
    )
    if mode is None:
        return None
    where = f"{pool_dir}/config.json" if pool_dir else "config.json"
    return Pooling(mode, normalize, f"read from the model folder's {where}")


def model_pooling(adapter: ModelAdapter) -> Pooling:
    """The pooling of ``adapter``'s model: its sentence-transformers pooling config when
    the model folder has one, else the card's ``pooling``, else the first token."""
    source = str(getattr(adapter, "source", "") or "")
    if source and Path(source).is_dir():
        found = _from_folder(Path(source))
        if found is not None:
            return found
    card = getattr(adapter, "card", None) or {}
    if card.get("pooling") in POOLING_MODES:
        return Pooling(card["pooling"], "normalised" in str(card.get("task", "")), "the model card")
    return Pooling()
