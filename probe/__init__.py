"""Hooks on live models: capture attention, intervene on heads, store corpora.

Public API::

    from models import load_model
    from probe import capture, AttentionMaps, ablate_heads, Store
"""

from .capture import AttentionCapture, capture, iter_capture
from .interventions import HeadEdit, HeadGates, HeadIntervention, HeadOutputRecorder, ablate_heads
from .maps import AttentionMaps, WordAttention
from .store import Store, write_store

__all__ = ["AttentionCapture", "AttentionMaps", "HeadEdit", "HeadGates", "HeadIntervention",
           "HeadOutputRecorder", "Store", "WordAttention", "ablate_heads", "capture", "iter_capture",
           "write_store"]
