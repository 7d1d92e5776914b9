"""Remove heads and measure the harm on the model's objective: the evidence of *necessity*,
*weights* and *redundancy*.

A **unit** is one head or a group of heads removed together. For every unit and
example, the objective's readout (:mod:`probe.analyses.common.objective`) under each
**mode** of removal, compared with the clean readouts as a harm per example:

* ``mean`` (the default, deciding necessity) — the head's output replaced by its corpus
  mean, taken separately per position kind (content, each special token, a decoder's
  first position: :mod:`probe.analyses.necessity.position_kinds`), so the model stays on
  its input distribution (Wang et al. 2022, "Interpretability in the Wild");
* ``one-mean`` — the head's output replaced by its one corpus mean over all positions (a
  baseline a necessity claim must also hold under, :mod:`.baselines`);
* ``zero`` — the output set to 0 (Michel et al. 2019; off-distribution, reported beside);
* ``resample`` — each position's output taken from a random position of the same kind
  (as ``mean``'s) in another sentence of the batch (Chan et al. 2022, "Causal Scrubbing");
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

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch

from probe.analyses.common.batch import batch_indices, by_one_length
from probe.analyses.common.metrics import as_corpus
from probe.analyses.common.objective import Objective, given_objective
from probe.analyses.necessity.ablation import position_kind_means
from probe.analyses.necessity.position_kinds import KindMeans, position_kinds
from probe.analyses.necessity.sweep import clean_run, restart_path, sweep_batch, trim_lengths
from probe.runs.blocks import InProcess, Part
from probe.errors import InputError

from .perturb import random_rotations, rotate, uniform_output

__all__ = [
    "RemovalJob",
    "RemovalSweep",
    "RemovalPlan",
    "BatchReadouts",
    "removal_sweep",
    "run_removal_batches",
    "block_batches",
    "sweep_batches",
    "MODES",
    "resample_sources",
    "single_head_values",
    "reusable",
    "derives",
    "corpus_key",
]

MODES = ("mean", "one-mean", "zero", "resample", "uniform", "random")
#: most rows × tokens per forward (bounds memory)
MAX_TOKENS = 2048  # as the single-head sweep: larger forwards were slower on 2 cores (4096: ~10%)


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
    #: ``[n]`` the clean readouts, when the objective reads one number per example
    clean: Optional[np.ndarray] = None
    #: the pooling mode of a pooled-embedding readout (``mean`` | ``cls`` | ``max``), else ``""``
    pooling: str = ""
    #: the objective's direction (harm is ``clean − perturbed`` when True)
    higher_is_better: bool = False
    #: :func:`corpus_key` of the examples
    corpus_key: str = ""
    #: the mean modes' position kinds (``KindMeans.to_dict`` and ``described``; empty without them)
    kinds: dict = field(default_factory=dict)

    def row(self, unit: Any) -> int:
        return self.units.index(tuple(unit))


def single_head_values(sweep: RemovalSweep, objective: Objective, mode: str) -> Optional[tuple]:
    """``(clean [n], ablated [n_heads, n])`` of ``objective`` (a per-example objective, the
    ablation section's) for a sweep of single heads under ``mode``, read from the sweep
    instead of running the model again; ``None`` when the sweep's objective does not
    determine it.

    Determined: ``objective`` is the sweep's own and reads one number per example
    (``ablated = clean ± harm``), or ``embedding-drift`` (``1 − cos`` of the mean-pooled
    last hidden state, :class:`probe.analyses.common.metrics.DriftMetric`) from a
    similarity-structure sweep whose pooling is the mean: its ``embedding_drift`` measure
    is that number per example, and the clean run's drift is 0.
    """
    called = objective.called
    if mode not in sweep.harm or any(len(u) != 1 for u in sweep.units):
        return None
    if called == "embedding-drift" and sweep.pooling == "mean" and "embedding_drift" in sweep.measures.get(mode, {}):
        return np.zeros(sweep.n), np.asarray(sweep.measures[mode]["embedding_drift"], np.float64)
    if called == sweep.objective and sweep.clean is not None:
        sign = -1.0 if sweep.higher_is_better else 1.0
        return sweep.clean, sweep.clean[None, :] + sign * sweep.harm[mode]
    return None


def derives(swept: Objective, objective: Objective) -> bool:
    """Whether a sweep on ``swept`` (the claims' corpus objective) determines ``objective``
    (a per-example one) per head and example (:func:`single_head_values`), so a section
    measuring ``objective`` can read the sweep the claims run anyway instead of running
    the model again."""
    called = objective.called
    if called == "embedding-drift":
        pooling = getattr(getattr(swept, "pooling", None), "mode", "")
        return swept.name == "similarity-structure" and pooling == "mean"
    return (
        called == swept.name
        and not getattr(swept, "corpus_level", False)
        and getattr(type(swept), "reference", None) is Objective.reference  # a score without a clean reference
    )


def corpus_key(corpus: Any) -> str:
    """A fingerprint of the examples (texts and their order) a sweep ran on, the same in
    every process (a resumed report reuses a saved sweep)."""
    import hashlib

    h = hashlib.sha256()
    for t in corpus.texts:
        h.update(t.encode("utf-8", "surrogatepass") + b"\x00")
    return h.hexdigest()


def reusable(sweep: Optional[RemovalSweep], units: tuple, corpus: Any, objective: Objective) -> set:
    """The modes ``sweep`` already measured on these units, examples and objective (what
    :func:`removal_sweep` need not run again)."""
    if sweep is None or (sweep.units, sweep.n, sweep.objective) != (units, len(corpus), objective.name):
        return set()
    return set(sweep.harm) if sweep.corpus_key == corpus_key(corpus) else set()


def resample_sources(kind: torch.Tensor, mask: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """``[b, s]`` flat source index per position: a random position of the same kind
    (:meth:`probe.analyses.necessity.position_kinds.PositionKinds.index`: content, each
    special token, a decoder's first position) in another example of the batch (any
    example of the batch when no other has that kind).

    Args: ``kind``: long ``[b, s]``; ``mask``: ``[b, s]`` (padding is never a source).
    """
    b, s = mask.shape
    flat_kind = kind.reshape(-1).long()
    flat_valid = mask.reshape(-1).bool()
    owner = torch.arange(b).repeat_interleave(s)
    src = torch.arange(b * s)
    for k in torch.unique(flat_kind[flat_valid]).tolist():
        pool = torch.nonzero(flat_valid & (flat_kind == k)).flatten()
        for i in range(b):
            mine = torch.nonzero(flat_valid & (flat_kind == k) & (owner == i)).flatten()
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
    if mode in ("mean", "one-mean"):
        return (means if mode == "mean" else means.one_mean()).at(layer, batch).to(zl.device, zl.dtype)
    if mode == "resample":
        b, s, H, dh = zl.shape
        return zl.reshape(b * s, H, dh)[src.reshape(-1)].reshape(b, s, H, dh)
    if mode == "uniform":
        return uniform_output(v[layer], batch.inputs["attention_mask"], causal)
    return zl - rotate(zl, rot[layer])  # random


def _readout(objective):
    """The sweep's ``read``: the objective's readouts of every row (detached)."""
    return lambda out, big, rows, k: objective.readout(out, big).detach()


@dataclass(frozen=True)
class RemovalPlan:
    """What every batch of a removal sweep runs with, decided once by the driver
    (picklable: a Ray worker receives it with its block of batches).

    Attributes:
        corpus: the examples (a :class:`probe.inputs.corpus.Corpus`); objective: resolved.
        units: tuples of ``(layer, head)``; modes: the modes to run.
        means: the per-kind head means (:class:`probe.analyses.necessity.position_kinds.KindMeans`;
            ``mean`` and ``one-mean`` modes), else ``None``.
        seed: each batch draws its resample sources and rotations from
            ``seed × 1,000,003 + batch number``, so a batch's draws do not depend on
            which process runs it or what ran before.
        stack: the attention stack; batch_size: examples per batch.
        unit_modes: per unit, the modes it is removed in (``None``: every mode); a unit
            not removed in a mode reads NaN there (a sequential pass of several families,
            :func:`probe.analyses.necessity.sequential.sequential_removals`).
        known: ``{example index: clean readout}`` already read (an earlier pass's): a batch
            whose every example is known runs its clean forward only up to the units' last
            layer (:func:`probe.analyses.necessity.sweep.clean_run` with ``stop``) and takes
            these readouts.
    """

    corpus: Any
    objective: Objective
    units: tuple
    modes: tuple
    means: Optional[KindMeans]
    seed: int
    stack: Optional[str]
    batch_size: int
    unit_modes: Optional[tuple] = None
    known: Optional[dict] = None


@dataclass
class BatchReadouts:
    """The readouts of some batches of a sweep: ``clean [m, ...]`` and, per mode,
    ``perturbed[mode] [n_units, m, ...]``, for the examples ``indices`` (``m`` of them)."""

    indices: list
    clean: Optional[torch.Tensor]
    perturbed: dict


def sweep_batches(adapter: Any, corpus: Any, batch_size: int) -> list:
    """``[(number, example indices)]``: the sweep's batches, examples of similar length
    together (:func:`probe.analyses.common.batch.batch_indices`, as
    ``Objective.batches(by_length=True)`` forms them; of one length where the model's
    padding leaks, :func:`probe.analyses.common.batch.by_one_length`), numbered."""
    batches = by_one_length(
        adapter, batch_indices(corpus.texts, batch_size, by_length=True), corpus.texts, corpus.word_spans
    )
    return list(enumerate(tuple(idx) for idx in batches))


def block_batches(adapter: Any, corpus: Any, examples: Sequence[int], batch_size: int, first: int = 0) -> list:
    """``[(number, example indices)]``: the examples ``examples`` of ``corpus`` (one block of a
    sequential test) in batches of similar length (of one length where the model's padding
    leaks), numbered from ``first`` (a batch's random draws follow its number)."""
    idx = [int(i) for i in examples]
    texts = [corpus.texts[i] for i in idx]
    chunks = by_one_length(adapter, batch_indices(texts, batch_size, by_length=True), texts)
    return [(first + k, tuple(idx[c] for c in chunk)) for k, chunk in enumerate(chunks)]


@torch.no_grad()
def run_removal_batches(adapter: Any, plan: RemovalPlan, batches: Sequence, progress: bool = False) -> BatchReadouts:
    """Run ``batches`` (of :func:`sweep_batches`) of ``plan``: the clean run of each batch
    and every unit removed in every mode, restarted from the cached stream
    (:mod:`probe.analyses.necessity.sweep`). The same function runs in one process and
    in every Ray actor (``probe.app.engine.jobs.RemovalJob``)."""
    from tqdm.auto import tqdm

    obj, units, stack = plan.objective, plan.units, plan.stack
    kinds = position_kinds(adapter)
    layers = _unit_layers(units)
    causal = adapter.arch == "decoder"
    path = restart_path(adapter, stack)
    indices: list = []
    cleans: list = []
    pert: dict = {m: [] for m in plan.modes}
    for number, idx in tqdm(batches, disable=not progress, desc="removals"):
        idx = list(idx)
        batch = obj.make_batch(adapter, plan.corpus, idx)
        gen = torch.Generator().manual_seed(plan.seed * 1_000_003 + int(number))
        known = [plan.known.get(i) for i in idx] if plan.known else []
        stop = bool(known) and all(k is not None for k in known)
        run = clean_run(
            adapter, obj.forward, batch, layers, stack=stack, path=path, values="uniform" in plan.modes, stop=stop
        )
        clean = obj.readout(run.output, batch).detach().cpu() if run.output is not None else None
        indices.extend(idx)
        z = run.z
        v = {l: run.v[l].to(z[l].dtype) for l in run.v}
        src = None
        if {"resample", "random"} & set(plan.modes):  # the rotations are drawn after the sources
            src = resample_sources(kinds.index(batch).cpu(), batch.inputs["attention_mask"].cpu(), gen)
            src = src.to(z[layers[0]].device)
        rot = (
            {l: random_rotations(z[l].shape[0], z[l].shape[2], z[l].shape[3], gen) for l in layers}
            if "random" in plan.modes
            else {}
        )
        trim = trim_lengths(adapter, obj, batch)
        dtype: Optional[torch.dtype] = None  # the perturbed readouts' (the known clean ones take it)
        for mode in plan.modes:
            chosen = [j for j in range(len(units)) if plan.unit_modes is None or mode in plan.unit_modes[j]]
            if not chosen:
                continue
            r = sweep_batch(
                adapter,
                obj.forward,
                _readout(obj),
                batch,
                run,
                [units[j] for j in chosen],
                lambda j, layer: _layer_value(mode, layer, z, v, batch, plan.means, src, rot, causal),  # noqa: B023 (this mode's)
                stack=stack,
                path=path,
                trim=trim,
                max_tokens=MAX_TOKENS,
            ).cpu()
            if len(chosen) < len(units):  # NaN for the units not removed in this mode
                full = torch.full((len(units),) + tuple(r.shape[1:]), float("nan"), dtype=r.dtype)
                full[torch.as_tensor(chosen, dtype=torch.long)] = r
                r = full
            pert[mode].append(r)  # [units, b, ...] in unit order
            dtype = r.dtype
        if clean is None:  # a stopped clean forward: the known readouts, in the readouts' own precision
            clean = torch.as_tensor(np.stack([k for k in known if k is not None]))
            clean = clean.to(dtype) if dtype is not None else clean
        cleans.append(clean)
    return BatchReadouts(
        indices=indices,
        clean=torch.cat(cleans) if cleans else None,
        perturbed={m: torch.cat(rs, 1) for m, rs in pert.items() if rs},
    )


class RemovalJob:
    """Batches of the removal sweep as a job over blocks (:mod:`probe.runs.blocks`): the items
    are the sweep's batches ``(number, example indices)``, the plan (examples, objective,
    units, modes, head means, seed) was made by the driver; the part's value is the
    batches' readouts, which the driver places by example index and turns into harms.
    Each batch draws its random sources from its own number, so the readouts do not
    depend on how the batches were split between workers."""

    def __init__(self, plan: RemovalPlan) -> None:
        self.plan = plan

    def run(self, adapter: Any, items: Sequence, indices: Sequence[int], progress: bool = False) -> Part:
        started = time.time()
        value = run_removal_batches(adapter, self.plan, list(items), progress)
        return Part(first=int(indices[0]), value=value, n_items=len(items), started=started, ended=time.time())


def placed_readouts(parts: Sequence[BatchReadouts], n: int, n_units: int) -> tuple:
    """``(clean [n, ...], {mode: [n_units, n, ...]})``: the parts' rows at their indices."""
    clean: Optional[torch.Tensor] = None
    pert: dict = {}
    for part in parts:
        if part.clean is None:
            continue
        idx = torch.as_tensor(part.indices)
        if clean is None:  # the readouts' own precision (float64 harms are computed from them)
            clean = torch.zeros((n,) + tuple(part.clean.shape[1:]), dtype=part.clean.dtype)
        clean[idx] = part.clean
        for mode, r in part.perturbed.items():
            if mode not in pert:
                pert[mode] = torch.zeros((n_units, n) + tuple(r.shape[2:]), dtype=r.dtype)
            pert[mode][:, idx] = r
    return clean, pert


def known_readouts(known: Optional[np.ndarray], n: int) -> Optional[dict]:
    """``{example index: readout}`` of the rows of ``known`` ``[n, ...]`` (NaN rows: not
    read) that were read, for :class:`RemovalPlan`'s ``known``; ``None`` for none.

    Raises:
        InputError: ``known`` of another number of examples than the corpus's ``n``.
    """
    if known is None:
        return None
    if len(known) != n:
        raise InputError(f"known clean readouts of {len(known)} examples do not fit a corpus of {n}")
    read = {i: known[i] for i in range(n) if np.isfinite(known[i]).all()}
    return read or None


def _unit_layers(units: Sequence) -> list:
    """The layers ``units`` (tuples of ``(layer, head)``) remove heads of, sorted."""
    return sorted({layer for unit in units for layer, _ in unit})


def removal_sweep(
    adapter: Any,
    corpus: Any,
    objective: Objective,
    units: Optional[Sequence] = None,
    *,
    modes: Sequence[str] = MODES,
    batch_size: int = 8,
    seed: int = 0,
    stack: Optional[str] = None,
    progress: bool = False,
    reuse: Optional[RemovalSweep] = None,
    runner: Optional[Callable] = None,
    means: Optional[KindMeans] = None,
    known: Optional[np.ndarray] = None,
) -> RemovalSweep:
    """Remove every unit in every mode on every example; harms on ``objective``.

    Args:
        units: heads ``(layer, head)`` or groups (sequences of heads); default: every head.
        modes: of :data:`MODES`.
        reuse: an earlier sweep of the same units, examples and objective (the report's
            ablation section's): its modes are taken from it, not run again.
        runner: where the sweep's batches run (:mod:`probe.runs.blocks`: ``runner(job, items)``;
            an engine's workers, a block of batches each); default this process
            (:class:`probe.runs.blocks.InProcess`). The plan (objective,
            units, the mean mode's head means) is made here either way, and the harms
            are computed here from every example's readouts.
        means: the ``mean`` mode's per-kind head means (a ``KindMeans``) of this
            corpus (:func:`probe.analyses.necessity.ablation.position_kind_means`, the same
            batch size), when a caller already has them (one forward over the corpus
            saved per sweep: 10 s on EWT dev); computed here when ``None``, for the units'
            layers only (each forward ends after the last of them).
        known: ``[n, ...]`` the clean readouts of ``corpus`` an earlier pass read (a
            screen's, :class:`probe.analyses.necessity.screen.HeadScreen`'s ``clean``; NaN
            rows where it read none): a batch whose every example is known takes them and
            runs its clean forward only up to the units' last layer (:class:`RemovalPlan`).

    Raises:
        InputError: an unknown mode, an objective that does not fit, a head out of range,
            an empty corpus, a runner of this process bound to another model.
    """
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise InputError(f"unknown removal mode(s) {', '.join(bad)}; use {', '.join(MODES)}")
    if runner is not None:
        from probe.runs.blocks import check_runs_on

        check_runs_on(runner, adapter)
    corpus = as_corpus(corpus)
    obj = given_objective(objective, adapter, corpus)
    stack = stack or adapter.default_stack
    if units is None:
        units = [(l, h) for l in range(adapter.n_layers_of(stack)) for h in range(adapter.n_heads)]
    units = tuple(
        tuple([tuple(map(int, u))])
        if len(u) == 2 and not isinstance(u[0], (tuple, list))
        else tuple(tuple(map(int, x)) for x in u)
        for u in units
    )
    for layer, h in (x for u in units for x in u):
        adapter.check_head(layer, h, stack)
    n = len(corpus)
    done = reusable(reuse, units, corpus, obj)
    modes = list(modes)
    skipped = {}
    if "uniform" in modes and adapter.arch == "encoder-decoder":
        modes.remove("uniform")
        skipped["uniform"] = "attention replacement supports encoder or decoder models, not encoder-decoder"
    todo = tuple(m for m in modes if m not in done)
    clean: Optional[torch.Tensor] = None  # [n, ...] readouts, placed by example index
    pert: dict = {}  # mode -> [n_units, n, ...]
    if todo:
        if not {"mean", "one-mean"} & set(todo):
            means = None
        elif means is None:  # of the units' layers only: each forward ends after the last of them
            means = position_kind_means(adapter, corpus, obj, batch_size, stack, layers=_unit_layers(units))
        plan = RemovalPlan(corpus, obj, units, todo, means, seed, stack, batch_size, known=known_readouts(known, n))
        batches = sweep_batches(adapter, corpus, batch_size)
        parts = [p.value for p in (runner or InProcess(adapter, progress))(RemovalJob(plan), batches)]
        clean, pert = placed_readouts(parts, n, len(units))
    harm, measures, corpus_m = {}, {}, {}
    for mode in modes:
        if mode in done:  # measured by ``reuse``
            assert reuse is not None
            harm[mode], measures[mode], corpus_m[mode] = (
                reuse.harm[mode],
                reuse.measures.get(mode, {}),
                reuse.corpus.get(mode, {}),
            )
            continue
        assert clean is not None
        clean_np = clean.double().numpy()
        p = pert[mode].numpy()  # [units, n, ...] (each unit's rows to float64 in obj.harm)
        harm[mode] = np.stack([obj.harm(clean_np, p[j]) for j in range(len(units))])
        per = [obj.measures(clean_np, p[j]) for j in range(len(units))]
        measures[mode] = {k: np.stack([d[k] for d in per]) for k in (per[0] if per else {})}
        cm = [obj.corpus_measures(clean_np, p[j]) for j in range(len(units))]
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
        clean=(
            clean.double().numpy()
            if clean is not None and clean.dim() == 1
            else (reuse.clean if done and reuse else None)
        ),
        pooling=str(getattr(getattr(obj, "pooling", None), "mode", "") or ""),
        higher_is_better=bool(getattr(obj, "higher_is_better", False)),
        corpus_key=corpus_key(corpus),
        kinds=(
            dict(means.to_dict(), described=means.describe())
            if means is not None
            else (dict(reuse.kinds) if reuse is not None and done else {})
        ),
    )
