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

The lazy exports are the one place where the core floor names the top floor (``run``, read
from ``probe.app.registry`` on first access); tests/test_architecture.py allows exactly it.
No module of this floor is named like an exported function, so ``probe.capture`` and
``probe.trace`` stay the functions whatever has been imported.

The core floor's rooms, each a sub-package (imports point down this list)::

    probe.tracing        read and edit any site of a live model: the trace, its edits, cache
    probe.interventions  head-level interventions built on the trace: gates, paths, reweighting
    probe.inputs         what a run reads: corpora, treebanks, long inputs, batches, budgets
    probe.store          captured attention on disk: the store, its schema, lock and repair
    probe.runs           captures over a corpus: capture, blocks, streaming, the pipeline
    probe.maps, probe.errors   the shared vocabulary: attention maps and errors by kind
"""

from __future__ import annotations

import importlib

# public name -> module that defines it (imported on first access, PEP 562)
_EXPORTS = {
    "AttentionCapture": "probe.runs.capture",
    "capture": "probe.runs.capture",
    "iter_capture": "probe.runs.capture",
    "capture_inputs": "probe.runs.capture",
    "HeadGates": "probe.interventions.heads",
    "HeadIntervention": "probe.interventions.heads",
    "HeadOutputRecorder": "probe.interventions.heads",
    "ablate_heads": "probe.interventions.heads",
    # the trace core: read / edit any site (probe.models.sites) in one call
    "trace": "probe.tracing.trace",
    "Trace": "probe.tracing.trace_context",
    "Cache": "probe.tracing.cache",
    "Restart": "probe.tracing.trace_context",
    "run_with_cache": "probe.tracing.trace",
    "run_with_hooks": "probe.tracing.trace",
    "site_names": "probe.models.sites",
    "available_sites": "probe.tracing.site_keys",
    "trace_generate": "probe.tracing.generate",
    "padded_inputs": "probe.inputs.padding",
    "Zero": "probe.tracing.edits",
    "Mean": "probe.tracing.edits",
    "Resample": "probe.tracing.edits",
    "Patch": "probe.tracing.edits",
    "Scale": "probe.tracing.edits",
    "Gate": "probe.tracing.edits",
    "ReplaceWeights": "probe.tracing.edits",
    "Apply": "probe.tracing.edits",
    "AttentionMaps": "probe.maps",
    "WordAttention": "probe.maps",
    "Store": "probe.store.directory",
    "write_store": "probe.store.directory",
    "AttentionReweighting": "probe.interventions.reweighting",
    "top_k_edges": "probe.inputs.long_inputs",
    "attention_window": "probe.inputs.long_inputs",
    "load_model": "probe.models",
    "list_models": "probe.models",
    "ModelAdapter": "probe.models",
    # the analysis registry (probe.app): probe.run("ablation", model="zoo:induction") -> Result
    "run": "probe.app.registry",
    "analyses_registered": "probe.app.registry",
    "show": "probe.app.report.model_view",  # notebooks: probe.show(maps, layer, head)
}

__all__ = list(sorted(_EXPORTS))


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'probe' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
