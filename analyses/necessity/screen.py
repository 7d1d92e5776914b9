"""Screen every head at once: attribution patching of each head's removal.

Attribution patching (Nanda 2023, "Attribution patching: activation patching at
industrial scale"; AtP, Kramár et al. 2024, "AtP*: an efficient and scalable method for
localizing LLM behaviour to components") replaces one forward per removed head by a
first-order Taylor expansion around the clean run. Removing head ``h`` of layer ``l``
replaces its output ``z_h`` (``blocks.{l}.attn.hook_z``, ``[b, seq, head, head_dim]``)
by ``r_h`` (the corpus mean at word / special positions, zero, or another sentence's
output at a position of the same kind — the values of
:mod:`probe.analyses.claims.removal`), so the readout ``R`` of example ``i`` changes by::

    ΔR_i,h ≈ ∂R_i/∂α_i,h   with   z_h ← z_h + α_i,h (r_h − z_h),  α = 0

One forward with a zero ``α`` per example, head and mode at every layer's ``hook_z``
(through the one trace, :class:`probe.tracing.trace_context.Trace`) and one backward of ``Σ_i R_i`` give
``∂R_i/∂α_i,h = g_i,h · (r_h − z_h)`` (summed over positions and ``head_dim``) for every
head, example and mode at once: the rows of a batch do not interact, so the gradient of
the sum with respect to row ``i``'s ``α`` is row ``i``'s own.

Two estimates, chosen by the objective (``kind="auto"``):

* ``first-order`` — objectives with one number per example that are not stationary at the
  clean model (a loss, a logit): ``estimate[mode] [n, L, H]`` is the AtP estimate of the
  harm, in the objective's units and sign (positive = worse). It is exact when the readout
  is linear in every head's output (:mod:`tests.test_screen` builds such a model).
* ``readout-sketch`` — objectives stationary at the clean model (``stationary_at_clean``:
  embedding drift), corpus-level ones (``corpus_level``: the similarity structure of a
  sentence encoder) or readouts with more than one number per example. Their first-order
  harm is zero (or undefined), so the screen ranks heads by the size of the linearised
  change of each example's readout instead: ``estimate[mode] [n, L, H]`` estimates
  ``‖J_i Δz_i,h‖²``, ``J_i`` the Jacobian of example ``i``'s unit-normalised readout
  ``R_i/‖R_i‖`` (what cosine similarities see) with respect to the head's output. With
  ``u ~ N(0, I)``, ``E[(uᵀ J Δz)²] = ‖J Δz‖²`` (the Hutchinson trick, Hutchinson 1989), so
  ``k = n_projections`` backwards of ``uᵀ R̂`` per batch give an unbiased estimate for every
  head at once (relative standard deviation ``√(2/k)`` per example). For the embedding
  drift ``1 − cos`` this is ``2 ×`` the second-order harm; for the similarity structure
  it is a ranking, not a harm.
* ``output-sketch`` (asked for, not chosen by ``auto``) — the same sketch of the model's
  log-probabilities at every valid position (a squared norm per example that is the mean
  over positions). For a loss the model has saturated (a trained zoo model, loss ≈ 0) the
  loss's gradient vanishes and first-order AtP ranks heads badly (the benchmark's
  zoo:induction: docs/necessity.md); the change of the output distribution does not
  vanish and ranks them.

AtP*'s two refinements and what they mean here: the *QK fix* recomputes the softmax when
the patched node is a head's query or key; the nodes screened here are head outputs
``z``, so the softmax of the head itself is not linearised (downstream heads' are, which is
the error that remains; :func:`probe.analyses.claims.removal.removal_sweep` confirms).
*GradDrop* (against effects that cancel along different paths): ``graddrop=True`` on a
first-order screen runs ``L`` more forwards and backwards per batch, each with the gradient
through one layer's contribution to the residual stream dropped, and averages the absolute
estimates, ``1/(L−1) Σ_ℓ |ΔR_ℓ|`` (:attr:`HeadScreen.graddrop`; docs/screening.md).

Cost: one forward + one backward per batch (``readout-sketch``: ``k`` backwards), against
``n_heads × n_modes`` restarted forwards per batch for the exact sweep. The ``mean`` mode
needs the corpus's head means before its replacement ``r_h`` is known; a first-order screen
given none takes them from its own forwards (its estimate is linear in them, :class:`_Fold`),
so the means cost no forward of their own.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np
import pandas as pd
import torch

from probe.analyses.claims.removal import resample_sources, sweep_batches
from probe.analyses.common.metrics import as_corpus
from probe.analyses.common.objective import Objective, given_objective
from probe.analyses.necessity.ablation import MEAN_SAMPLE, kind_means, position_kind_means, warn_few_mean_examples
from probe.analyses.necessity.position_kinds import KindMeans, PositionKinds, position_kinds
from probe.runs.blocks import InProcess, Part
from probe.tracing.edits import Apply
from probe.errors import InputError
from probe.models.sites import Site
from probe.tracing.trace_context import Trace

__all__ = [
    "SCREEN_MODES",
    "KINDS",
    "HeadScreen",
    "ScreenPlan",
    "ScreenJob",
    "screen_batches",
    "screen_heads",
    "screen_kind",
    "upper_bound",
    "folds_means",
    "FOLD_BYTES",
]

#: the removal modes a screen linearises (those that replace ``z`` by a value)
SCREEN_MODES = ("mean", "zero", "resample")
#: the most bytes a first-order screen holds to take the head means from its own forwards
#: (:func:`screen_heads`' ``means=None``: each example's gradient summed per position kind,
#: ``[kinds, L, H, head_dim]`` float32, counted at 4 kinds an example; SmolLM2 on 256
#: sentences: 71 MB); more, and the means take a forward of their own first
FOLD_BYTES = 512 * 2**20
KINDS = ("first-order", "readout-sketch", "output-sketch")


@dataclass(frozen=True)
class HeadScreen:
    """Screened estimates of every head's removal.

    Attributes:
        estimate: mode -> ``[n, n_layers, n_heads]`` per-example estimates (module docstring:
            a harm for ``first-order``, ``‖J Δz‖²`` for the sketches).
        kind: one of :data:`KINDS`; n_projections: ``k`` of a sketch (0 for first-order).
        objective: its name; n: examples; seconds: wall time of the screen (means included);
        units: what an estimate of 1 means.
        graddrop: mode -> ``[n, n_layers, n_heads]`` AtP*'s GradDrop estimates (``graddrop=True``,
            first-order only): ``1/(L−1) Σ_ℓ |ΔR_ℓ|``, ``ΔR_ℓ`` the first-order estimate with the
            gradient through layer ℓ's contribution to the residual stream dropped; else ``None``.
        clean: ``[n, ...]`` the objective's readouts of the clean model, read by the screen's
            own forwards (their ``α`` edits at 0 leave every value as is), which exact removals
            of the same examples need not run again to the end
            (:class:`probe.analyses.claims.removal.RemovalPlan`'s ``known``); ``None`` for an
            ``output-sketch`` (its forward reads the log-probabilities, not the readout).
        means: the per-kind head means (a ``KindMeans``) the ``mean`` mode replaced ``z`` by:
            those given, or computed for it (by the screen's own forwards where it folds
            them, :func:`screen_heads`); ``None`` without the ``mean`` mode.
        gate_gradient: ``[n, n_layers, n_heads]`` each example's ``∂R_i/∂ξ_h = Σ g·z_h``, the
            gradient of its readout with respect to a gate ``ξ`` on the head's output at 1
            (Michel et al. 2019's head importance per example), which a screen that folds the
            means computes on the way (the mean mode's ``−Σ g·z``); else ``None``.
    """

    estimate: dict
    kind: str
    objective: str
    n: int
    n_projections: int = 0
    seconds: float = 0.0
    units: str = ""
    graddrop: Optional[dict] = None
    clean: Optional[np.ndarray] = None
    means: Optional[KindMeans] = None
    gate_gradient: Optional[np.ndarray] = None

    @property
    def heads(self) -> list:
        """``[(layer, head)]`` in the flattened order of :meth:`mean`'s rows."""
        _, L, H = next(iter(self.estimate.values())).shape
        return [(layer, h) for layer in range(L) for h in range(H)]

    def mean(self, mode: str) -> np.ndarray:
        """``[n_layers · n_heads]`` the estimate's mean over examples (rows as :attr:`heads`)."""
        e = self.estimate[mode]
        return e.reshape(e.shape[0], -1).mean(0)

    def stderr(self, mode: str) -> np.ndarray:
        """``[n_layers · n_heads]`` the standard error of :meth:`mean` over examples."""
        e = self.estimate[mode]
        flat = e.reshape(e.shape[0], -1)
        return flat.std(0, ddof=1) / np.sqrt(len(flat)) if len(flat) > 1 else np.full(flat.shape[1], np.inf)

    def upper(self, mode: str, z: float = 2.0, slack: float = 0.0) -> np.ndarray:
        """``[n_layers · n_heads]`` an upper bound on the mean effect: ``mean + z · stderr +
        slack · |mean|`` (``slack``: a relative allowance for the linearisation's error).

        It bounds the *screened* mean, not the exact harm: where the first-order estimate is
        far from the harm (a saturated loss, docs/screening.md) it is no bound on the harm,
        which is why :mod:`.confirm` audits the heads it rules out."""
        e = self.estimate[mode]
        return upper_bound(e.reshape(e.shape[0], -1), z, slack)

    def to_frame(self) -> pd.DataFrame:
        """``layer, head, mode, estimate, stderr`` (one row per head and mode)."""
        rows = []
        for mode in self.estimate:
            for (layer, h), m, s in zip(self.heads, self.mean(mode), self.stderr(mode)):
                rows.append({"layer": layer, "head": h, "mode": mode, "estimate": m, "stderr": s})
        return pd.DataFrame(rows)


def upper_bound(values: np.ndarray, z: float = 2.0, slack: float = 0.0) -> np.ndarray:
    """``[m]``: ``mean + z · stderr + slack · |mean|`` over the rows of ``values [n, m]``
    (``stderr`` infinite with one row): the screen's bound on a head's mean effect, and the
    exact pilot's (:func:`probe.analyses.claims.screened.pilot_flags`)."""
    v = np.asarray(values, np.float64)
    mean = v.mean(0)
    se = v.std(0, ddof=1) / np.sqrt(len(v)) if len(v) > 1 else np.full(v.shape[1], np.inf)
    return mean + z * se + slack * np.abs(mean)


def screen_kind(objective) -> str:
    """``first-order`` or ``readout-sketch`` for a resolved objective (module docstring)."""
    if getattr(objective, "stationary_at_clean", False) or getattr(objective, "corpus_level", False):
        return "readout-sketch"
    return "first-order"


def _replacements(mode: str, z: torch.Tensor, layer: int, batch, means, src) -> torch.Tensor:
    """``r − z`` ``[b, s, H, dh]`` for ``mode`` (``z`` detached)."""
    if mode == "zero":
        return -z
    if mode == "mean":
        return means.at(layer, batch).to(z.device, z.dtype) - z
    b, s, H, dh = z.shape  # resample
    return z.reshape(b * s, H, dh)[src.reshape(-1)].reshape(b, s, H, dh) - z


def _linearised_edit(alpha: torch.Tensor, modes: Sequence[str], layer: int, batch, means, src, fold=None):
    """The edit ``z ← z + Σ_m α_m (r_m − z)`` of one layer (``alpha [M, b, H]``, zero); with
    ``fold`` (a :class:`_Fold`, the means not known yet) the ``mean`` mode's term is
    ``α (−z) + β[kind]`` and ``z`` is added to the fold's per-kind sums."""

    def edit(z, ctx):
        zd = z.detach()
        out = z
        for m, mode in enumerate(modes):
            if fold is not None and mode == "mean":
                out = out + alpha[m][:, None, :, None].to(z.dtype) * -zd + fold.term(layer, z)
                fold.add(layer, zd)
                continue
            out = out + alpha[m][:, None, :, None].to(z.dtype) * _replacements(mode, zd, layer, batch, means, src)
        return out

    return edit


class _Fold:
    """One batch of a screen that takes the head means from its own forward (:func:`screen_heads`
    with ``means=None``). The mean mode's first-order estimate is linear in the means:
    ``Σ_pos g·(m_kind(pos) − z) = −Σ_pos g·z + Σ_k m_k · S_k`` with ``S_k = Σ_{pos of kind k} g``
    (``g = ∂R/∂z``), so each layer gets a leaf ``β [b, P, H, head_dim]`` at zero (``P``: the
    batch's position kinds) added to ``z`` at each position's kind, whose gradient is ``S``;
    the means are summed from the same forward's ``z`` (as
    :func:`probe.analyses.necessity.ablation.position_kind_means` sums them) and the
    estimates finished once every batch has run (:func:`_placed`)."""

    def __init__(self, kinds: PositionKinds, batch: Any, n_layers: int, n_heads: int, head_dim: int) -> None:
        kind = kinds.index(batch)
        valid = batch.inputs["attention_mask"].bool().to(kind.device)
        self.present = torch.unique(kind)  # sorted; padding reads content (0), as KindMeans.at gives it
        self.slot = torch.searchsorted(self.present, kind)
        self.select = [(int(k), (valid & (kind == k)).cpu()) for k in self.present.tolist()]  # where sums are
        self.sums = torch.zeros(kinds.n, n_layers, n_heads, head_dim, dtype=torch.float64)
        self.counts = torch.zeros(kinds.n, dtype=torch.float64)
        for k, sel in self.select:
            self.counts[k] += float(sel.sum())
        b, P = kind.shape[0], len(self.present)
        self.betas = [
            torch.zeros(b, P, n_heads, head_dim, device=kind.device, requires_grad=True) for _ in range(n_layers)
        ]

    def term(self, layer: int, z: torch.Tensor) -> torch.Tensor:
        """``[b, seq, H, head_dim]``: layer ``layer``'s ``β`` at each position's kind."""
        rows = torch.arange(z.shape[0], device=z.device)[:, None]
        return self.betas[layer][rows, self.slot.to(z.device)].to(z.dtype)

    def add(self, layer: int, zd: torch.Tensor) -> None:
        """Add the valid positions' ``z`` ``[b, seq, H, head_dim]`` of ``layer`` to the kinds' sums."""
        z = zd.cpu().double()
        for k, sel in self.select:
            self.sums[k, layer] += z[sel].sum(0)

    def value(self, grads: list, sign: float) -> dict:
        """This batch's share: ``present [P]``, ``S [b, P, L, H, head_dim]`` (signed, float32),
        the kinds' ``sums`` and ``counts``."""
        S = torch.stack([g if g is not None else torch.zeros_like(b) for g, b in zip(grads, self.betas)], 2)
        return {
            "present": self.present.cpu().numpy(),
            "S": (S.detach().cpu() * sign).float().numpy(),
            "sums": self.sums.numpy(),
            "counts": self.counts.numpy(),
        }


def screen_heads(
    adapter,
    corpus,
    objective: Objective,
    *,
    modes: Sequence[str] = SCREEN_MODES,
    kind: str = "auto",
    n_projections: int = 4,
    batch_size: int = 8,
    seed: int = 0,
    stack: Optional[str] = None,
    means: Optional[KindMeans] = None,
    progress: bool = False,
    runner: Optional[Callable] = None,
    graddrop: bool = False,
) -> HeadScreen:
    """Screen every head's removal in every mode on every example (module docstring).

    Args:
        objective: the run's resolved :class:`probe.analyses.common.objective.Objective`.
        modes: of :data:`SCREEN_MODES`.
        kind: ``auto`` (from the objective, :func:`screen_kind`) or one of :data:`KINDS`.
        n_projections: random projections of the readout per batch (``readout-sketch``).
        batch_size, seed: as :func:`probe.analyses.claims.removal.removal_sweep` (the same
            batches and, for ``resample``, the same sources per batch, so estimates and
            exact harms are paired by example).
        means: the per-kind head means (a ``KindMeans``)
            (:func:`probe.analyses.necessity.ablation.position_kind_means`); when ``mean`` is
            screened and none is given, computed here: from the screen's own forwards where
            :func:`folds_means` (the first-order estimate is linear in the means,
            :class:`_Fold`: a forward of the corpus saved, the same values to float
            rounding), else by a forward of their own first; :attr:`HeadScreen.means` holds them.
        runner: where the batches run (:mod:`probe.runs.blocks`; default this process): each
            batch draws from its own number, so blocks split any way give the same estimates.
        graddrop: a first-order screen also gives AtP*'s GradDrop estimates (Kramár et al.
            2024, against effects that cancel along different paths): ``L`` more forwards and
            backwards per batch, each with the gradient through one layer's contribution to the
            residual stream dropped (the layer's output ``y = x + f(x)`` becomes
            ``x + (y − x).detach()``); :attr:`HeadScreen.graddrop`. In a post-LN model (BERT)
            ``y − x`` is not the layer's additive contribution, so there it drops the layer's
            whole Jacobian but the identity.

    Returns:
        :class:`HeadScreen` with ``estimate[mode] [n, L, H]``.

    Raises:
        InputError: an unknown mode or kind, ``n_projections < 1``, an objective that does not fit.
    """
    started = time.time()
    bad = [m for m in modes if m not in SCREEN_MODES]
    if bad:
        raise InputError(f"unknown screen mode(s) {', '.join(bad)}; use {', '.join(SCREEN_MODES)}")
    if kind not in ("auto", *KINDS):
        raise InputError(f"unknown screen kind {kind!r}; use auto, {', '.join(KINDS)}")
    if n_projections < 1:
        raise InputError(f"n_projections must be at least 1, got {n_projections}")
    graddrop = bool(graddrop)
    corpus = as_corpus(corpus)
    obj = given_objective(objective, adapter, corpus)
    kind = screen_kind(obj) if kind == "auto" else kind
    stack = stack or adapter.default_stack
    L, H = adapter.n_layers_of(stack), adapter.n_heads
    modes = tuple(modes)
    if graddrop and kind != "first-order":
        raise InputError(f"GradDrop refines a first-order screen; this one is {kind!r} (use graddrop=False)")
    fold = "mean" in modes and means is None and folds_means(adapter, kind, len(corpus), stack, graddrop)
    if fold:
        warn_few_mean_examples(len(corpus))
    elif "mean" in modes and means is None:
        means = position_kind_means(adapter, corpus, obj, batch_size, stack)
    plan = ScreenPlan(corpus, obj, modes, kind, n_projections, means, seed, stack, graddrop, fold)
    parts = (runner or InProcess(adapter, progress))(ScreenJob(plan), sweep_batches(adapter, corpus, batch_size))
    n = len(corpus)
    est, gd, clean, folded = _placed(parts, n, modes, (L, H), graddrop, position_kinds(adapter) if fold else None)
    sign = -1.0 if getattr(obj, "higher_is_better", False) else 1.0
    return HeadScreen(
        estimate=est,
        kind=kind,
        objective=obj.name,
        n=n,
        n_projections=0 if kind == "first-order" else n_projections,
        seconds=time.time() - started,
        units=_UNITS.get(kind, obj.units),
        graddrop=gd,
        clean=clean,
        means=folded[0] if folded else means,
        gate_gradient=-sign * folded[1] if folded else None,  # the mean mode's signed −Σ g·z, before Σ m·S
    )


def folds_means(adapter: Any, kind: str, n: int, stack: Optional[str] = None, graddrop: bool = False) -> bool:
    """Whether a screen of the ``mean`` mode given no means takes them from its own forwards
    (:class:`_Fold`) instead of a forward of their own first: a first-order screen without
    GradDrop, of at most :data:`~probe.analyses.necessity.ablation.MEAN_SAMPLE` examples
    (the means then average every one, as
    :func:`~probe.analyses.necessity.ablation.position_kind_means` does) whose per-kind
    gradient sums fit in :data:`FOLD_BYTES`."""
    if kind != "first-order" or graddrop or n > MEAN_SAMPLE:
        return False
    kinds = min(position_kinds(adapter).n, 4)
    return n * kinds * adapter.n_layers_of(stack) * adapter.n_heads * adapter.head_dim * 4 <= FOLD_BYTES


def _placed(parts, n: int, modes: tuple, shape: tuple, graddrop: bool, kinds: Optional[PositionKinds] = None) -> tuple:
    """``(estimates {mode: [n, L, H]}, GradDrop's or None, clean readouts [n, ...] or None,
    (the folded means, the mean mode's estimates before them) or None)`` of the screen's ``parts`` (:func:`screen_batches`' values),
    placed by example index; with ``kinds`` (a screen that folds the means), the means
    summed over every part and the mean mode's estimates finished with them."""
    est = {m: np.zeros((n, *shape)) for m in modes}
    gd = {m: np.zeros((n, *shape)) for m in modes} if graddrop else None
    clean: Optional[np.ndarray] = None
    shares: list = []
    for part in parts:
        idx, got, dropped, readouts, folds = part.value
        shares += folds or []
        for mode in modes:
            est[mode][idx] = got[mode]
            if gd is not None:
                gd[mode][idx] = dropped[mode]
        if readouts is not None:
            if clean is None:
                clean = np.full((n, *readouts.shape[1:]), np.nan, dtype=readouts.dtype)
            clean[idx] = readouts
    return est, gd, clean, _folded_means(est, shares, kinds) if kinds is not None else None


def _folded_means(est: dict, shares: list, kinds: PositionKinds) -> tuple:
    """``(the head means, the mean mode's estimates before)``: the means summed from every
    batch's ``shares`` (:meth:`_Fold.value`), and each example's mean-mode estimate in
    ``est`` finished: ``+ Σ_k m_k · S_k`` (before: the signed ``−Σ g·z`` alone)."""
    before = est["mean"].copy()
    sums = torch.from_numpy(np.sum([s["sums"] for _, s in shares], axis=0))
    counts = torch.from_numpy(np.sum([s["counts"] for _, s in shares], axis=0))
    means = kind_means(sums, counts, kinds)
    values = means.values.double().numpy()  # [K, L, H, dh]
    for idx, s in shares:
        est["mean"][list(idx)] += np.einsum("bplhd,plhd->blh", s["S"].astype(np.float64), values[s["present"]])
    return means, before


@dataclass(frozen=True)
class ScreenPlan:
    """What every batch of a screen runs with, decided once by the driver (picklable, as
    :class:`probe.analyses.claims.removal.RemovalPlan`): the examples, the resolved
    objective, the modes, the kind, ``k`` projections, the head means, the seed, the stack;
    ``fold``: the head means are taken from the screen's own forwards (``means`` is ``None``)."""

    corpus: Any
    objective: Objective
    modes: tuple
    kind: str
    n_projections: int
    means: Optional[KindMeans]
    seed: int
    stack: Optional[str]
    graddrop: bool = False
    fold: bool = False


def screen_batches(adapter, plan: ScreenPlan, batches: Sequence, progress: bool = False) -> tuple:
    """``(example indices [m], {mode: [m, L, H]}, GradDrop's {mode: [m, L, H]} or None, clean readouts
    [m, ...] or None, the folded means' shares or None)``: the screen of ``batches``
    (where ``plan.fold``, the mean mode's estimates lack their ``Σ_k m_k · S_k`` term, which
    :func:`_placed` adds from the shares ``[(example indices, _Fold.value)]`` once the means are known)
    (``(number, example indices)`` of :func:`probe.analyses.claims.removal.sweep_batches`);
    batch ``number`` draws its resample sources and projections from
    ``seed × 1,000,003 + number``, as the removal sweep's batch does."""
    from tqdm.auto import tqdm

    obj, modes, kind, stack = plan.objective, plan.modes, plan.kind, plan.stack or adapter.default_stack
    kinds = position_kinds(adapter)
    L, H = adapter.n_layers_of(stack), adapter.n_heads
    sign = -1.0 if getattr(obj, "higher_is_better", False) else 1.0
    indices: list = []
    out: dict = {m: [] for m in modes}
    dropped: dict = {m: [] for m in modes}  # GradDrop's estimates (plan.graddrop)
    readouts: list = []  # the clean readouts (the α edits at 0 change no value)
    folds: list = []  # (example indices, _Fold.value) where the means are taken from these forwards
    for number, idx in tqdm(batches, disable=not progress, desc="screen"):
        idx = list(idx)
        batch = obj.make_batch(adapter, plan.corpus, idx)
        gen = torch.Generator().manual_seed(plan.seed * 1_000_003 + int(number))  # as removal_sweep's batch
        src = resample_sources(kinds.index(batch).cpu(), batch.inputs["attention_mask"].cpu(), gen)
        device = batch.inputs["input_ids"].device
        src = src.to(device)

        fold = _Fold(kinds, batch, L, H, adapter.head_dim) if plan.fold else None
        readout, alphas = _linearised_forward(adapter, plan, batch, src, fold=fold)
        if kind != "output-sketch":
            readouts.append(readout.detach().cpu().numpy())
        if fold is not None:
            got, share = _folded_first_order(readout, alphas, fold, sign)
            folds.append((idx, share))
        elif kind == "first-order":
            got = _first_order(readout, alphas) * sign
        else:
            got = _sketch(readout, alphas, plan.n_projections, gen, normalise=kind == "readout-sketch")
        indices.extend(idx)
        for m, mode in enumerate(modes):
            out[mode].append(got[:, m].transpose(0, 1).numpy())  # [L, b, H] -> [b, L, H]
        if plan.graddrop:
            total = sum(_first_order(*_linearised_forward(adapter, plan, batch, src, drop)).abs() for drop in range(L))
            gd = total / max(L - 1, 1)
            for m, mode in enumerate(modes):
                dropped[mode].append(gd[:, m].transpose(0, 1).numpy())
    stacked = lambda d: {m: np.concatenate(v) if v else np.zeros((0, L, H)) for m, v in d.items()}  # noqa: E731
    clean = np.concatenate(readouts) if readouts else None
    return indices, stacked(out), stacked(dropped) if plan.graddrop else None, clean, folds if plan.fold else None


class ScreenJob:
    """Batches of a screen as a job over blocks (:mod:`probe.runs.blocks`), as
    :class:`probe.analyses.claims.removal.RemovalJob`: the items are the batches, the
    part's value is :func:`screen_batches`' ``(indices, estimates, GradDrop estimates, clean readouts,
    folded means' shares)``."""

    def __init__(self, plan: ScreenPlan):
        self.plan = plan

    def run(self, adapter, items: Sequence, indices: Sequence[int], progress: bool = False) -> Part:
        started = time.time()
        value = screen_batches(adapter, self.plan, list(items), progress)
        return Part(first=int(indices[0]), value=value, n_items=len(items), started=started, ended=time.time())


_UNITS = {
    "readout-sketch": "‖J Δz‖² of the unit-normalised readout",
    "output-sketch": "‖J Δz‖² of the log-probabilities (mean over positions)",
}


def _log_probs(out, batch) -> torch.Tensor:
    """``[b, seq · vocab]``: the log-probabilities of every valid position, scaled by
    ``1/√(valid positions)`` (so a squared norm is a mean over positions)."""
    logits = getattr(out, "logits", None)
    if logits is None or logits.dim() != 3:
        raise InputError("kind='output-sketch' needs a model with logits [batch, seq, vocab]; use readout-sketch")
    mask = batch.inputs.get("decoder_attention_mask", batch.inputs["attention_mask"]).to(logits.device)
    if mask.shape != logits.shape[:2]:
        mask = torch.ones(logits.shape[:2], device=logits.device)
    m = mask.double()[..., None]
    lp = torch.log_softmax(logits.double(), -1) * m / m.sum(1, keepdim=True).clamp(min=1).sqrt()
    return lp.reshape(lp.shape[0], -1)


def _linearised_forward(adapter, plan: ScreenPlan, batch, src, drop: Optional[int] = None, fold=None) -> tuple:
    """``(readout, alphas)`` of one forward of ``batch`` with every layer's ``α`` edit
    (``alphas``: ``L`` leaves ``[M, b, H]`` at zero) and, with ``drop``, the gradient through
    that layer's contribution to the residual stream dropped (:func:`_dropped_layer`); with
    ``fold`` (a :class:`_Fold`), the mean mode's terms of the means not yet known."""
    stack = plan.stack or adapter.default_stack
    L, H, modes = adapter.n_layers_of(stack), adapter.n_heads, plan.modes
    device = batch.inputs["input_ids"].device
    b = batch.inputs["input_ids"].shape[0]
    alphas = [torch.zeros(len(modes), b, H, device=device, requires_grad=True) for _ in range(L)]
    edit = {
        Site("z", layer, stack): Apply(
            _linearised_edit(alphas[layer], modes, layer, batch, plan.means, src, fold), in_place=False
        )
        for layer in range(L)
    }
    if drop is not None:
        edit.update(_dropped_layer(drop, stack))
    obj = plan.objective
    with torch.enable_grad(), Trace(adapter, edit=edit, stack=stack, path="hooks"):
        res = obj.forward(adapter, batch)
        readout = _log_probs(res, batch) if plan.kind == "output-sketch" else obj.readout(res, batch)
    return readout, alphas


def _dropped_layer(layer: int, stack: str) -> dict:
    """Edits that keep layer ``layer``'s output but drop the gradient through its
    contribution to the residual stream (GradDrop, Kramár et al. 2024): the output
    ``y = x + f(x)`` becomes ``x + (y − x).detach()``, ``x`` the layer's input."""
    held: dict = {}

    def keep(x, ctx):
        held["x"] = x  # the layer's input in this forward (resid_pre runs before resid_post)

    def cut(y, ctx):
        x = held.pop("x")
        return x + (y - x).detach()

    return {
        Site("resid_pre", layer, stack): Apply(keep, in_place=False),
        Site("resid_post", layer, stack): Apply(cut, in_place=False),
    }


def _first_order(readout: torch.Tensor, alphas: list) -> torch.Tensor:
    """``[L, M, b, H]``: ``∂R_i/∂α`` of a readout of one number per row."""
    _check_one_number(readout)
    return _stacked(alphas, torch.autograd.grad(readout.double().sum(), alphas, allow_unused=True))


def _check_one_number(readout: torch.Tensor) -> None:
    if readout.dim() != 1:
        raise InputError(
            f"a first-order screen needs one number per example, the readout has shape {tuple(readout.shape)}; "
            "use kind='readout-sketch'"
        )


def _folded_first_order(readout: torch.Tensor, alphas: list, fold: _Fold, sign: float) -> tuple:
    """``([L, M, b, H] signed, the fold's share)``: :func:`_first_order` and, from the same
    backward, the gradients of the fold's ``β`` (:meth:`_Fold.value`)."""
    _check_one_number(readout)
    grads = torch.autograd.grad(readout.double().sum(), [*alphas, *fold.betas], allow_unused=True)
    return _stacked(alphas, grads[: len(alphas)]) * sign, fold.value(list(grads[len(alphas) :]), sign)


def _stacked(alphas: list, grads: Sequence) -> torch.Tensor:
    """``[L, M, b, H]``: the gradients of the ``alphas`` leaves (zero where unused), float64."""
    return torch.stack([torch.zeros_like(a) if g is None else g for a, g in zip(alphas, grads)]).detach().double().cpu()


def _sketch(readout: torch.Tensor, alphas: list, k: int, gen: torch.Generator, normalise: bool = True) -> torch.Tensor:
    """``[L, M, b, H]``: the mean over ``k`` Gaussian projections ``u`` of ``(uᵀ J Δz)²``,
    ``J`` the Jacobian of the (``normalise``: unit-normalised) readout (module docstring).
    The ``k`` backwards run as one batched backward (``is_grads_batched``, vmap) where
    the model's ops allow it, one at a time otherwise."""
    r = readout.reshape(readout.shape[0], -1).double()
    if normalise and r.shape[1] > 1:  # a single number has no direction to keep
        r = r / r.norm(dim=-1, keepdim=True).clamp(min=1e-12)
    u = torch.randn((k,) + tuple(r.shape), generator=gen, dtype=torch.float64).to(r.device)
    try:
        grads = torch.autograd.grad(
            r, alphas, grad_outputs=u, retain_graph=True, is_grads_batched=True, allow_unused=True
        )
        sq = [
            torch.zeros_like(a, dtype=torch.float64) if g is None else (g.double() ** 2).mean(0)
            for a, g in zip(alphas, grads)
        ]
    except RuntimeError:  # an op without a batching rule: one backward per projection
        sq = [torch.zeros_like(a, dtype=torch.float64) for a in alphas]
        for j in range(k):
            got = torch.autograd.grad(r, alphas, grad_outputs=u[j], retain_graph=j < k - 1, allow_unused=True)
            sq = [s if g is None else s + g.double() ** 2 / k for s, g in zip(sq, got)]
    return torch.stack(sq).detach().cpu()
