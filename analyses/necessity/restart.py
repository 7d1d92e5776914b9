"""Restart a forward at layer ``l`` from a cached residual stream: moved to
:mod:`probe.tracing.restart` (a view of the trace core); these names stay importable from here."""

from __future__ import annotations

from probe.tracing.restart import (
    RESTART_FAMILIES,
    ResidualCache,
    RestartFrom,
    layer_modules,
    supports_restart,
    supports_site_restart,
)

__all__ = [
    "RESTART_FAMILIES",
    "supports_restart",
    "supports_site_restart",
    "layer_modules",
    "ResidualCache",
    "RestartFrom",
]
