"""Remove heads and measure the harm on the model's objective: the evidence of *necessity*,
*weights* and *redundancy*.

A **unit** is one head or a group of heads removed together. For every unit and
example, the objective's readout (:mod:`probe.analyses.common.objective`) under each
**mode** of removal, compared with the clean readouts as a harm per example:

* ``mean`` (the default, deciding necessity) — the head's output replaced by its corpus
  mean, taken separately at word and special-token positions, so the model stays on its
  input distribution (Wang et al. 2022, "Interpretability in the Wild");
* ``zero`` — the output set to 0 (Michel et al. 2019; off-distribution, reported beside);
* ``resample`` — each position's output taken from a random position of the same kind in
  another sentence of the batch (Chan et al. 2022, "Causal Scrubbing");
* ``uniform`` — the head's attention replaced by uniform weights over the keys it may see,
  values kept (where it looks, not whether it contributes);
* ``random`` — the head's output moved by a same-norm vector in a random direction
  (``z − Q z``, ``Q`` a random rotation per example and head): context only ("removing it
  harms 1.06× as much as a random perturbation of the same size"), never a test.

Harms need the whole corpus's readouts for a corpus-level objective (the similarity
structure compares every sentence with every other), so readouts are kept per unit
(``[n_units, n, ...]``) and harms computed at the end.

Shapes: ``RemovalSweep.harm[mode]`` ``[n_units, n]``; ``measures[mode][name]`` ``[n_units, n]``.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np
import torch

from probe.analyses.common.metrics import as_corpus
from probe.analyses.common.objective import resolve_objective
from probe.analyses.necessity.ablation import position_kind_means
from probe.trace import Trace
from probe.interventions import HeadEdit, HeadIntervention, HeadOutputRecorder

from .perturb import random_rotations, rotate, uniform_output

__all__ = ["RemovalSweep", "removal_sweep", "MODES", "resample_sources"]

MODES = ("mean", "zero", "resample", "uniform", "random")
#: most rows × tokens per forward (bounds memory)
MAX_TOKENS = 4096


@dataclass(frozen=True)
class RemovalSweep:
    """Harms per unit and example under each mode.

    Attributes:
        units: tuples of ``(layer, head)`` in row order; objective: its name; units_text: its units.
        harm: mode -> ``[n_units, n]``; measures: mode -> name -> ``[n_units, n]``;
        corpus: mode -> name -> ``[n_units]`` (corpus-level measures); skipped: mode -> why.
        n: examples used; describe: the objective in words (pooling included).
    """

    units: tuple
    objective: str
    units_text: str
    harm: dict
    measures: dict
    corpus: dict
    n: int
    describe: str = ""
    skipped: dict = field(default_factory=dict)

    def row(self, unit) -> int:
        return self.units.index(tuple(unit))


def resample_sources(special: torch.Tensor, mask: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """``[b, s]`` flat source index per position: a random position of the same kind
    (word / special) in another example of the batch (any example when there is one).

    Args: ``special``, ``mask``: bool ``[b, s]``.
    """
    b, s = mask.shape
    flat_kind = special.reshape(-1)
    flat_valid = mask.reshape(-1).bool()
    owner = torch.arange(b).repeat_interleave(s)
    src = torch.arange(b * s)
    for kind in (False, True):
        pool = torch.nonzero(flat_valid & (flat_kind == kind)).flatten()
        if not len(pool):
            continue
        for i in range(b):
            mine = torch.nonzero(flat_valid & (flat_kind == kind) & (owner == i)).flatten()
            if not len(mine):
                continue
            others = pool[owner[pool] != i] if b > 1 else pool
            others = others if len(others) else pool
            pick = torch.randint(len(others), (len(mine),), generator=generator)
            src[mine] = others[pick]
    return src.reshape(b, s)


def _unit_values(mode, unit, z, v, batch, means, src, rot, causal):
    """Per layer of the unit: the replacement head outputs ``[b, s, H, dh]`` (None: zero)."""
    out = {}
    for layer in {l for l, _ in unit}:
        zl = z[layer]
        if mode == "zero":
            out[layer] = None
        elif mode == "mean":
            out[layer] = means[:, layer].to(zl.device)[batch.special.long()].to(zl.dtype)
        elif mode == "resample":
            b, s, H, dh = zl.shape
            out[layer] = zl.reshape(b * s, H, dh)[src.reshape(-1)].reshape(b, s, H, dh)
        elif mode == "uniform":
            out[layer] = uniform_output(v[layer], batch.inputs["attention_mask"], causal)
        else:  # random
            out[layer] = zl - rotate(zl, rot[layer])
    return out


def _run_units(adapter, objective, batch, units, values_per_unit, stack, residual=None):
    """One forward of ``len(units)·b`` rows; unit ``j``'s edits on rows ``j·b … j·b+b−1``.
    ``residual``: ``(layer, [b, seq, dim])``, the clean stream entering the first edited
    layer: the forward restarts there (layers before it are not recomputed)."""
    from probe.analyses.necessity.restart import RestartFrom

    k, b = len(units), batch.rows
    big = batch.repeat(k)
    edits = []
    for j, (unit, vals) in enumerate(zip(units, values_per_unit)):
        rows = tuple(range(j * b, (j + 1) * b))
        for layer, h in unit:
            v = vals[layer]
            edits.append(
                HeadEdit(layer, h, "zero", rows=rows)
                if v is None
                else HeadEdit(layer, h, "patch", value=v[:, :, h], rows=rows)
            )
    with ExitStack() as st:
        st.enter_context(HeadIntervention(adapter, edits, stack=stack))
        if residual is not None:
            layer, hidden = residual
            st.enter_context(RestartFrom(adapter, layer, hidden.repeat(k, *([1] * (hidden.dim() - 1))), stack=stack))
        out = objective.forward(adapter, big)
    r = objective.readout(out, big).detach()
    return r.reshape(k, b, *r.shape[1:])


@torch.no_grad()
def removal_sweep(
    adapter,
    corpus,
    objective="auto",
    units: Optional[Sequence] = None,
    *,
    modes: Sequence[str] = MODES,
    batch_size: int = 8,
    seed: int = 0,
    stack: Optional[str] = None,
    progress: bool = False,
) -> RemovalSweep:
    """Remove every unit in every mode on every example; harms on ``objective``.

    Args:
        units: heads ``(layer, head)`` or groups (sequences of heads); default: every head.
        modes: of :data:`MODES`.

    Raises:
        ValueError: an unknown mode, an objective that does not fit, a head out of range,
            an empty corpus.
    """
    from tqdm.auto import tqdm

    bad = [m for m in modes if m not in MODES]
    if bad:
        raise ValueError(f"unknown removal mode(s) {', '.join(bad)}; use {', '.join(MODES)}")
    corpus = as_corpus(corpus)
    obj, _ = resolve_objective(objective, adapter, corpus)
    stack = stack or adapter.default_stack
    if units is None:
        units = [(l, h) for l in range(adapter.n_layers_of(stack)) for h in range(adapter.n_heads)]
    units = tuple(
        tuple([tuple(map(int, u))])
        if len(u) == 2 and not isinstance(u[0], (tuple, list))
        else tuple(tuple(map(int, x)) for x in u)
        for u in units
    )
    for u in units:
        for layer, h in u:
            adapter.check_head(layer, h, stack)
    modes = list(modes)
    skipped = {}
    if "uniform" in modes and adapter.arch == "encoder-decoder":
        modes.remove("uniform")
        skipped["uniform"] = "attention replacement supports encoder or decoder models, not encoder-decoder"
    means = position_kind_means(adapter, corpus, obj, batch_size, stack) if "mean" in modes else None
    layers = sorted({l for u in units for l, _ in u})
    gen = torch.Generator().manual_seed(seed)
    n = len(corpus)
    clean_parts: list = []
    pert: dict = {m: [] for m in modes}
    causal = adapter.arch == "decoder"
    from probe.analyses.necessity.restart import ResidualCache, supports_restart

    restart = supports_restart(adapter, stack)
    blocks_of: dict = {}  # units grouped by their first layer: a forward restarts there
    for u in units:
        blocks_of.setdefault(min(l for l, _ in u) if restart else -1, []).append(u)
    order = [u for key in sorted(blocks_of) for u in blocks_of[key]]
    back = np.array([order.index(u) for u in units])
    for _idx, batch in tqdm(
        obj.batches(adapter, corpus, batch_size), total=-(-n // batch_size), disable=not progress, desc="removals"
    ):
        with ExitStack() as st:
            cache = st.enter_context(ResidualCache(adapter, stack)) if restart else None
            rec = st.enter_context(HeadOutputRecorder(adapter, layers=layers, stack=stack))
            # the values (site v of probe.models.sites: [b, seq, heads, head_dim], kv heads repeated)
            values_trace = (
                st.enter_context(Trace(adapter, read=[("v", layer) for layer in layers], stack=stack, path="hooks"))
                if "uniform" in modes
                else None
            )
            out = obj.forward(adapter, batch)
        clean_parts.append(obj.readout(out, batch).detach().double().cpu())
        z = rec.outputs
        v = {l: values_trace.cache["v", l, stack].to(z[l].dtype) for l in layers} if values_trace is not None else {}
        src = resample_sources(batch.special.cpu(), batch.inputs["attention_mask"].cpu(), gen)
        rot = (
            {l: random_rotations(z[l].shape[0], z[l].shape[2], z[l].shape[3], gen) for l in layers}
            if "random" in modes
            else {}
        )
        tokens = int(batch.inputs["input_ids"].numel())
        per_forward = max(1, MAX_TOKENS // max(tokens, 1))
        for mode in modes:
            parts = []
            for first in sorted(blocks_of):
                group = blocks_of[first]
                residual = (first, cache.inputs[first]) if cache is not None else None  # type: ignore[attr-defined]  # a ResidualCache
                for start in range(0, len(group), per_forward):
                    block = group[start : start + per_forward]
                    vals = [
                        _unit_values(mode, u, z, v, batch, means, src.to(z[layers[0]].device), rot, causal)
                        for u in block
                    ]
                    parts.append(_run_units(adapter, obj, batch, block, vals, stack, residual).double().cpu())
            pert[mode].append(torch.cat(parts, 0)[torch.as_tensor(back)])  # [units, b, ...] in unit order
    clean = torch.cat(clean_parts, 0).numpy()
    harm, measures, corpus_m = {}, {}, {}
    for mode in modes:
        p = torch.cat(pert[mode], 1).numpy()  # [units, n, ...]
        harm[mode] = np.stack([obj.harm(clean, p[j]) for j in range(len(units))])
        per = [obj.measures(clean, p[j]) for j in range(len(units))]
        measures[mode] = {k: np.stack([d[k] for d in per]) for k in (per[0] if per else {})}
        cm = [obj.corpus_measures(clean, p[j]) for j in range(len(units))]
        corpus_m[mode] = {k: np.array([d[k] for d in cm]) for k in (cm[0] if cm else {})}
    return RemovalSweep(
        units=units,
        objective=obj.name,
        units_text=obj.units,
        harm=harm,
        measures=measures,
        corpus=corpus_m,
        n=n,
        describe=obj.describe(),
        skipped=skipped,
    )
