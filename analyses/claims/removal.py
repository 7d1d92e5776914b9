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
(``[n_units, n, ...]``) and harms computed at the end. The forwards are the one sweep's
(:mod:`probe.analyses.necessity.sweep`): one clean run per batch, units grouped by their
first layer and restarted there from the cached stream (a single head's at its layer's
output projection), rows replicated and trimmed under a token budget.

Shapes: ``RemovalSweep.harm[mode]`` ``[n_units, n]``; ``measures[mode][name]`` ``[n_units, n]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np
import torch

from probe.analyses.common.metrics import as_corpus
from probe.analyses.common.objective import resolve_objective
from probe.analyses.necessity.ablation import position_kind_means
from probe.analyses.necessity.sweep import clean_run, restart_path, sweep_batch, trimmable
from probe.errors import InputError

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


def _layer_value(mode, layer, z, v, batch, means, src, rot, causal):
    """The replacement head outputs ``[b, s, H, dh]`` of ``layer`` under ``mode`` (None: zero)."""
    zl = z[layer]
    if mode == "zero":
        return None
    if mode == "mean":
        return means[:, layer].to(zl.device)[batch.special.long()].to(zl.dtype)
    if mode == "resample":
        b, s, H, dh = zl.shape
        return zl.reshape(b * s, H, dh)[src.reshape(-1)].reshape(b, s, H, dh)
    if mode == "uniform":
        return uniform_output(v[layer], batch.inputs["attention_mask"], causal)
    return zl - rotate(zl, rot[layer])  # random


def _readout(obj):
    """The sweep's ``read``: the objective's readouts of every row (detached)."""
    return lambda out, big, rows, k: obj.readout(out, big).detach()


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
        raise InputError(f"unknown removal mode(s) {', '.join(bad)}; use {', '.join(MODES)}")
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
    path = restart_path(adapter, stack)
    for _idx, batch in tqdm(
        obj.batches(adapter, corpus, batch_size), total=-(-n // batch_size), disable=not progress, desc="removals"
    ):
        run = clean_run(adapter, obj.forward, batch, layers, stack=stack, path=path, values="uniform" in modes)
        clean_parts.append(obj.readout(run.output, batch).detach().double().cpu())
        z = run.z
        v = {l: run.v[l].to(z[l].dtype) for l in run.v}
        src = resample_sources(batch.special.cpu(), batch.inputs["attention_mask"].cpu(), gen)
        rot = (
            {l: random_rotations(z[l].shape[0], z[l].shape[2], z[l].shape[3], gen) for l in layers}
            if "random" in modes
            else {}
        )
        src = src.to(z[layers[0]].device)
        trim = trimmable(adapter, obj, batch)
        for mode in modes:
            r = sweep_batch(
                adapter,
                obj.forward,
                _readout(obj),
                batch,
                run,
                units,
                lambda j, layer: _layer_value(mode, layer, z, v, batch, means, src, rot, causal),  # noqa: B023 (this mode's)
                stack=stack,
                path=path,
                trim=trim,
                max_tokens=MAX_TOKENS,
            )
            pert[mode].append(r.double().cpu())  # [units, b, ...] in unit order
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
