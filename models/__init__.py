"""Model loading and adapters: ``load_model(spec)`` returns a :class:`ModelAdapter`.

Names are resolved on first use, so listing the models (:func:`list_models`, ``probe
models``) imports neither torch nor transformers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .adapter import Encoding, ModelAdapter, split_words
    from .architectures import ARCHITECTURES
    from .catalog import list_models
    from .registry import DEFAULT_MODEL, load_hf, load_model, register

_EXPORTS = {
    "Encoding": ".adapter",
    "ModelAdapter": ".adapter",
    "split_words": ".adapter",
    "ARCHITECTURES": ".architectures",
    "list_models": ".catalog",
    "DEFAULT_MODEL": ".registry",
    "load_hf": ".registry",
    "load_model": ".registry",
    "register": ".registry",
}

__all__ = [
    "ARCHITECTURES",
    "DEFAULT_MODEL",
    "Encoding",
    "ModelAdapter",
    "list_models",
    "load_hf",
    "load_model",
    "register",
    "split_words",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
