"""Model loading and adapters: ``load_model(spec)`` returns a :class:`ModelAdapter`."""

from .adapter import Encoding, ModelAdapter, split_words
from .architectures import ARCHITECTURES
from .registry import DEFAULT_MODEL, list_models, load_hf, load_model, register

__all__ = ["ARCHITECTURES", "DEFAULT_MODEL", "Encoding", "ModelAdapter", "list_models",
           "load_hf", "load_model", "register", "split_words"]
