"""attention-probe: capture attention with hooks, analyse heads, validate on known answers.

One import namespace, mapped from the repository's root folders (the floors, each importing
only the ones below it)::

    probe.models     models/     loading, adapters, the zoo
    probe.*          probe/      hooks, capture, interventions, store (this folder)
    probe.analyses   analyses/   pure analyses and causal tests, grouped by question
    probe.app        app/        the analysis registry, the report and the command line

Public API (resolved lazily, so ``import probe`` and ``probe --help`` stay fast)::

    from probe import load_model, capture, ablate_heads, Store
    adapter = load_model("minilm")
    maps = capture(adapter, ["A sentence."])

    cache = probe.trace(adapter, ["A sentence."], read="pattern",          # read / edit any site
                        edit={"blocks.1.attn.hook_z": probe.Zero(head=2)})
    result = probe.run("roles", model="zoo:constructed", limit=8)   # any registered analysis
    result.tables["roles"], result.per_head, result.notes; result.write("out/roles")

The lazy facade is the one place where the core floor names the top floor (``run``, read
from ``probe.app.registry`` on first access); tests/test_architecture.py allows exactly it.
"""

from __future__ import annotations

import importlib
import sys
import types

# public name -> module that defines it (imported on first access, PEP 562)
_EXPORTS = {
    "AttentionCapture": "probe.capture",
    "capture": "probe.capture",
    "iter_capture": "probe.capture",
    "capture_inputs": "probe.capture",
    "HeadEdit": "probe.interventions",
    "HeadGates": "probe.interventions",
    "HeadIntervention": "probe.interventions",
    "HeadOutputRecorder": "probe.interventions",
    "ablate_heads": "probe.interventions",
    # the trace core: read / edit any site (probe.models.sites) in one call
    "trace": "probe.trace",
    "Trace": "probe.trace",
    "Cache": "probe.cache",
    "Restart": "probe.trace",
    "run_with_cache": "probe.trace",
    "run_with_hooks": "probe.trace",
    "site_names": "probe.models.sites",
    "available_sites": "probe.trace",
    "trace_generate": "probe.trace_generate",
    "padded_inputs": "probe.padding",
    "Zero": "probe.edits",
    "Mean": "probe.edits",
    "Resample": "probe.edits",
    "Patch": "probe.edits",
    "Scale": "probe.edits",
    "Gate": "probe.edits",
    "ReplaceWeights": "probe.edits",
    "Apply": "probe.edits",
    "AttentionMaps": "probe.maps",
    "WordAttention": "probe.maps",
    "Store": "probe.store",
    "write_store": "probe.store",
    "AttentionEdit": "probe.reweighting",
    "AttentionReweighting": "probe.reweighting",
    "top_k_edges": "probe.long_inputs",
    "attention_window": "probe.long_inputs",
    "load_model": "probe.models",
    "list_models": "probe.models",
    "ModelAdapter": "probe.models",
    # the analysis registry (probe.app): probe.run("ablation", model="zoo:induction") -> Result
    "run": "probe.app.registry",
    "analyses_registered": "probe.app.registry",
    "show": "probe.app.report.model_view",  # notebooks: probe.show(maps, layer, head)
}

__all__ = list(sorted(_EXPORTS))


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'probe' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))


class _Facade(types.ModuleType):
    """The package module: importing the submodule ``probe.capture`` must not replace the
    public *function* ``probe.capture`` (the import system sets a package attribute per
    imported submodule), so a submodule never overwrites an exported name."""

    def __setattr__(self, name, value):
        if isinstance(value, types.ModuleType) and name in _EXPORTS and value.__name__ == f"{__name__}.{name}":
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Facade
