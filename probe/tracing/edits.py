"""Edits of a site as small objects: what :func:`probe.tracing.trace.trace` does to an activation.

An edit is called inside the forward with the site's value (a copy the edit may write in)
and a :class:`SiteContext`, and returns the value the model goes on with. Edits that name
a ``head`` act on that head's slice only (the site's head axis, see
:data:`probe.models.sites.SITE_KINDS`); ``rows`` restricts an edit to some batch rows, so
one forward can carry many different edits (the batched sweeps).

* :class:`Zero` — remove (Michel et al. 2019).
* :class:`Mean` — set to a given mean (mean-ablation).
* :class:`Resample` — set each row to another row's value (resampling ablation;
  Chan et al. 2022, causal scrubbing).
* :class:`Patch` — set to the value of another run (activation patching; Meng et al. 2022).
* :class:`Scale` — multiply by a constant.
* :class:`Gate` — multiply each head by a (differentiable) gate ξ (Michel et al. 2019).
* :class:`ReplaceWeights` — attention weights replaced by uniform, permuted or given
  ones and the head's output recomputed from its values (Jain & Wallace 2019; Serrano &
  Smith 2019); on the ``pattern`` site, on the attention-interface path.
* :class:`Apply` — your own function ``fn(value, ctx) -> value`` (a plain callable
  given as an edit is wrapped in it), as a TransformerLens hook function.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from probe.errors import InputError
from probe.models.sites import SITE_KINDS

__all__ = [
    "SiteContext",
    "Edit",
    "Zero",
    "Mean",
    "Resample",
    "Patch",
    "Scale",
    "Gate",
    "ReplaceWeights",
    "Apply",
    "as_edit",
    "allowed_keys",
    "WEIGHT_MODES",
    "checked",
    "check_at_site",
    "whole_number",
]

WEIGHT_MODES = ("uniform", "permute", "given")


@dataclass(frozen=True)
class SiteContext:
    """What an edit may know about where it runs: the site's ``name``, ``kind``,
    ``layer``, ``stack``, its ``head_axis`` (None: the site has no head axis) and, on the
    ``pattern`` site, the additive attention ``mask`` the weights were computed with."""

    name: str
    kind: str
    layer: int
    stack: str
    head_axis: Optional[int]
    mask: Optional[torch.Tensor] = None


def whole_number(value: Any, what: str, minimum: int = 0) -> int:
    """``value`` as an ``int`` when it is a whole number ≥ ``minimum`` (a Python, numpy or
    0-d torch integer; never a bool or a float, whose silent truncation would edit another
    head), else one line naming ``what`` and the value given.

    Raises:
        InputError: a float (``1.9``), a bool, a string, a negative index (``-1`` would
            silently count from the end).
    """
    import operator

    if isinstance(value, bool) or (torch.is_tensor(value) and value.dtype == torch.bool):
        raise InputError(f"{what} must be a whole number, got {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise InputError(f"{what} must be a whole number, got {value!r}") from None
    if number < minimum:
        note = " (negative indices are not counted from the end)" if minimum == 0 else ""
        raise InputError(f"{what} must be at least {minimum}, got {number}{note}")
    return int(number)


def _row_numbers(rows: Any, what: str) -> tuple:
    """``rows`` (one number, a sequence, a numpy array or a tensor) as a tuple of whole numbers ≥ 0."""
    rows = rows.tolist() if hasattr(rows, "tolist") else rows
    rows = rows if isinstance(rows, (list, tuple, range)) else [rows]
    return tuple(whole_number(r, what) for r in rows)


def checked(new: Any, old: torch.Tensor, ctx: SiteContext) -> torch.Tensor:
    """``new`` when it is a tensor of ``old``'s shape and dtype, else one line naming both
    (a wrong shape reaching the model's own code is a raw error deep inside it)."""
    if not torch.is_tensor(new) or tuple(new.shape) != tuple(old.shape):
        got = tuple(new.shape) if torch.is_tensor(new) else type(new).__name__
        raise InputError(
            f"the edit of {ctx.name} returned {got}, but the site is {tuple(old.shape)} "
            f"{SITE_KINDS[ctx.kind].shape if ctx.kind in SITE_KINDS else ''}: return a tensor of the site's shape"
        )
    if new.dtype != old.dtype:
        raise InputError(
            f"the edit of {ctx.name} returned a {new.dtype} tensor, but the site is {old.dtype}: "
            f"return the site's dtype (value.to({old.dtype}))"
        )
    return new


def check_at_site(edit: "Edit", ctx: SiteContext, n_heads: Optional[int]) -> None:
    """Refuse, before the forward, an edit that does not fit its site: a head on a site
    without a head axis, a head index past the site's ``n_heads``, gates of another width.

    Raises:
        InputError: naming the site, its head count and what was given.
    """
    head = getattr(edit, "head", None)
    if head is not None:
        if ctx.head_axis is None:
            raise InputError(f"site {ctx.name} has no head axis; give the edit no head (it was given head={head})")
        if n_heads is not None and head >= n_heads:
            raise InputError(
                f"site {ctx.name} has {n_heads} heads (0..{n_heads - 1}); the edit names head {head}: "
                f"give a head below {n_heads}"
            )
    gates = getattr(edit, "gates", None)
    if isinstance(edit, Gate) and torch.is_tensor(gates) and n_heads is not None and gates.shape[-1] != n_heads:
        raise InputError(
            f"site {ctx.name} has {n_heads} heads; the gates have {gates.shape[-1]} in their last axis: "
            f"give one gate per head"
        )


def _index(x: torch.Tensor, ctx: SiteContext, head: Optional[int], rows: Optional[tuple]) -> tuple:
    idx: list[Any] = [slice(None) if rows is None else list(rows)]
    if head is not None:
        if ctx.head_axis is None:
            raise InputError(f"site {ctx.name} has no head axis; give the edit no head")
        idx += [slice(None)] * (ctx.head_axis - 1) + [int(head)]
    return tuple(idx)


def _what(ctx: SiteContext, head: Optional[int]) -> str:
    return f"head ({ctx.layer}, {head})" if head is not None else f"site {ctx.name}"


class Edit:
    """Base: ``head`` (None: the whole site) and ``rows`` (None: every row, else the
    edit's own rows; a trace's ``rows=`` is the default). Subclasses implement
    :meth:`new` (the replacement of the selected part)."""

    head: Optional[int] = None
    rows: Optional[tuple] = None
    #: writes into the value it is given (the trace then hands it a copy)
    in_place: bool = True

    def __post_init__(self) -> None:
        """Heads and rows are whole numbers ≥ 0 (:func:`whole_number`), checked when the edit is made."""
        if self.head is not None:
            object.__setattr__(self, "head", whole_number(self.head, f"{type(self).__name__}'s head"))
        if self.rows is not None:
            object.__setattr__(self, "rows", _row_numbers(self.rows, f"{type(self).__name__}'s rows"))

    def __call__(self, x: torch.Tensor, ctx: SiteContext) -> torch.Tensor:
        if self.rows is not None and self.rows and max(self.rows) >= x.shape[0]:
            raise InputError(
                f"the edit of {ctx.name} names row {max(self.rows)} but the batch has {x.shape[0]} rows (0..{x.shape[0] - 1})"
            )
        idx = _index(x, ctx, self.head, self.rows)
        x[idx] = self.new(x[idx], x, ctx)
        return x

    def new(self, part: torch.Tensor, x: torch.Tensor, ctx: SiteContext) -> torch.Tensor:
        raise NotImplementedError

    def with_rows(self, rows: Optional[tuple]) -> "Edit":
        """This edit on ``rows`` where it names none itself."""
        if rows is None or self.rows is not None:
            return self
        import copy

        out = copy.copy(self)
        object.__setattr__(out, "rows", _row_numbers(rows, "the trace's rows"))
        return out


@dataclass(frozen=True)
class Zero(Edit):
    head: Optional[int] = None
    rows: Optional[tuple] = None

    def new(self, part: torch.Tensor, x: torch.Tensor, ctx: SiteContext) -> torch.Tensor:
        return torch.zeros((), dtype=part.dtype, device=part.device)


@dataclass(frozen=True)
class Scale(Edit):
    factor: float = 0.0
    head: Optional[int] = None
    rows: Optional[tuple] = None

    def new(self, part: torch.Tensor, x: torch.Tensor, ctx: SiteContext) -> torch.Tensor:
        return part * self.factor


@dataclass(frozen=True)
class Mean(Edit):
    """``value``: the mean of the selected part without its batch axis (``[head_dim]``
    broadcasts over positions; ``[seq', head_dim]`` with ``seq' ≥ seq`` is cut to the input)."""

    value: Optional[torch.Tensor] = None
    head: Optional[int] = None
    rows: Optional[tuple] = None

    def new(self, part: torch.Tensor, x: torch.Tensor, ctx: SiteContext) -> torch.Tensor:
        if self.value is None:
            raise InputError(f"Mean needs a value for {_what(ctx, self.head)}")
        v = self.value.to(part.dtype).to(part.device)
        s = part.shape[1]
        if v.dim() == part.dim() - 1 and v.dim() >= 2:
            if v.shape[0] < s:
                raise InputError(f"mean value covers {v.shape[0]} positions, input has {s}")
            v = v[:s]
        return v


@dataclass(frozen=True)
class Patch(Edit):
    """``value``: the selected part from another run, with its batch axis (one row per
    batch row, or per row of ``rows``) or without it (broadcast over rows).

    Raises (when run):
        ValueError: a value with another number of positions (clean and corrupted inputs
            must have the same length).
    """

    value: Optional[torch.Tensor] = None
    head: Optional[int] = None
    rows: Optional[tuple] = None

    def new(self, part: torch.Tensor, x: torch.Tensor, ctx: SiteContext) -> torch.Tensor:
        if self.value is None:
            raise InputError(f"Patch needs a value for {_what(ctx, self.head)}")
        v = self.value.to(part.dtype).to(part.device)
        if v.dim() == part.dim() - 1:
            v = v.unsqueeze(0)
        if v.shape[1] != part.shape[1]:
            raise InputError(
                f"patch for {_what(ctx, self.head)} has {v.shape[1]} positions but the input has "
                f"{part.shape[1]}: clean and corrupted inputs must have the same length"
            )
        if self.rows is not None and v.shape[0] == len(self.rows):
            return v
        if v.shape[0] == x.shape[0] and self.rows is not None:
            return v[list(self.rows)]
        return v


@dataclass(frozen=True)
class Resample(Edit):
    """Each row takes the value of another row of ``source`` (default: this forward's own
    value), row ``r`` from ``source[perm[r]]``; ``perm`` default: a seeded random
    permutation without fixed points where there are at least two rows."""

    source: Optional[torch.Tensor] = None
    perm: Optional[tuple] = None
    seed: int = 0
    head: Optional[int] = None
    rows: Optional[tuple] = None

    def new(self, part: torch.Tensor, x: torch.Tensor, ctx: SiteContext) -> torch.Tensor:
        src = x if self.source is None else self.source.to(part.dtype).to(part.device)
        src = src[_index(src, ctx, self.head, None)]
        b, n = part.shape[0], src.shape[0]
        if self.perm is not None:
            perm = torch.as_tensor(self.perm, dtype=torch.long)
        else:
            gen = torch.Generator().manual_seed(self.seed)
            perm = (
                torch.randperm(n, generator=gen)[:b]
                if n != b or n < 2
                else (torch.randperm(n - 1, generator=gen) + 1 + torch.arange(n)) % n
            )  # no row keeps its own
        if src.shape[1:] != part.shape[1:]:
            raise InputError(
                f"resample source for {_what(ctx, self.head)} has shape {tuple(src.shape[1:])} per "
                f"row, the input {tuple(part.shape[1:])}"
            )
        return src[perm.to(src.device)].clone()


@dataclass(frozen=True)
class Gate(Edit):
    """Multiply head ``h`` by ``gates[h]`` (``[n_heads]``, every row) or ``gates[r, h]``
    (``[rows, n_heads]``, one set per batch row); on a site with a head axis. Make the
    gates ``requires_grad`` to get ``∂L/∂ξ``. With ``layer``, ``gates`` holds every layer's
    (``[n_layers, n_heads]`` or ``[rows, n_layers, n_heads]``) and this layer's are sliced
    at each call, so a backward through each forward reaches ``gates``."""

    gates: Optional[torch.Tensor] = None
    layer: Optional[int] = None
    in_place = False

    def __post_init__(self) -> None:
        if self.layer is not None:
            object.__setattr__(self, "layer", whole_number(self.layer, "Gate's layer"))

    def __call__(self, x: torch.Tensor, ctx: SiteContext) -> torch.Tensor:
        if ctx.head_axis is None or self.gates is None:
            raise InputError(f"Gate needs gates and a site with a head axis, got {ctx.name}")
        gates = self.gates if self.layer is None else self.gates[..., self.layer, :]
        g = gates.to(x.dtype).to(x.device)
        shape = [1] * x.dim()
        if g.dim() == 2:
            if g.shape[0] != x.shape[0]:
                raise InputError(f"row gates cover {g.shape[0]} rows, the batch has {x.shape[0]}")
            shape[0] = g.shape[0]
        shape[ctx.head_axis] = g.shape[-1]
        return x * g.reshape(shape)


def allowed_keys(weights: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
    """Bool ``[batch, query, key]``: keys the additive mask leaves open (all when None)."""
    b, _, q, k = weights.shape
    if mask is None:
        return torch.ones(b, q, k, dtype=torch.bool, device=weights.device)
    m = mask[..., :k]
    open_ = m > torch.finfo(m.dtype).min / 2 if m.is_floating_point() else m.bool()
    return open_[:, 0].expand(b, q, k)


@dataclass(frozen=True)
class ReplaceWeights(Edit):
    """New attention weights for ``head`` on the ``pattern`` site: ``uniform`` (each query
    spreads evenly over the keys the mask allows: padding, causality and windows kept),
    ``permute`` (each query's weights shuffled among its allowed keys, seeded) or
    ``given`` (``weights`` ``[query, key]`` or ``[batch, query, key]``). The head's output
    is recomputed from the values (interface path)."""

    head: Optional[int] = None
    mode: str = "uniform"
    weights: Optional[torch.Tensor] = None
    rows: Optional[tuple] = None
    seed: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.mode not in WEIGHT_MODES:
            raise InputError(f"unknown reweighting mode {self.mode!r}; use one of {', '.join(WEIGHT_MODES)}")
        if self.mode == "given" and self.weights is None:
            raise InputError(f"mode 'given' needs weights for head {self.head}")
        if self.head is None:
            raise InputError("ReplaceWeights needs a head")

    def __call__(self, x: torch.Tensor, ctx: SiteContext) -> torch.Tensor:
        if ctx.kind != "pattern":
            raise InputError(f"ReplaceWeights edits attention weights (a hook_pattern site), not {ctx.name}")
        if self.rows and max(self.rows) >= x.shape[0]:
            raise InputError(f"the edit of {ctx.name} names row {max(self.rows)} but the batch has {x.shape[0]} rows")
        rows = slice(None) if self.rows is None else list(self.rows)
        alpha = x[:, self.head].clone()
        x[rows, self.head] = self.replacement(alpha, allowed_keys(x, ctx.mask), ctx)[rows]
        return x

    def replacement(self, alpha: torch.Tensor, allowed: torch.Tensor, ctx: SiteContext) -> torch.Tensor:
        """The replacement ``[batch, query, key]`` of one head's weights ``alpha``."""
        if self.mode == "uniform":
            a = allowed.to(alpha.dtype)
            return a / a.sum(-1, keepdim=True).clamp(min=1)
        if self.mode == "permute":
            gen = torch.Generator(device="cpu").manual_seed(self.seed)
            r = torch.rand(alpha.shape, generator=gen).to(alpha.device)
            r = r.masked_fill(~allowed, 2.0)
            target = r.argsort(-1)  # allowed keys in random order, then the closed ones
            source = (~allowed).to(torch.int8).argsort(dim=-1, stable=True)  # allowed keys in order
            return torch.zeros_like(alpha).scatter_(-1, target, alpha.gather(-1, source))
        assert self.weights is not None
        v = self.weights.to(alpha.dtype).to(alpha.device)
        if v.shape[-2:] != alpha.shape[-2:]:
            raise InputError(
                f"given weights for head ({ctx.layer}, {self.head}) have shape "
                f"{tuple(v.shape)}; the head's weights are [batch, {alpha.shape[-2]}, {alpha.shape[-1]}]"
            )
        return v.expand_as(alpha)


@dataclass(frozen=True)
class Apply(Edit):
    """Your own edit: ``fn(value, ctx)`` returns the new value (or None after editing
    ``value`` in place), as a TransformerLens hook ``fn(activation, hook)``. With
    ``in_place=False`` it is given the value itself, not a copy (it must not write into it;
    returning None leaves the value as it is)."""

    fn: Optional[Callable] = None
    in_place: bool = True

    def __call__(self, x: torch.Tensor, ctx: SiteContext) -> torch.Tensor:
        assert self.fn is not None
        out = self.fn(x, ctx)
        return x if out is None else out


def as_edit(edit: object) -> Edit:
    """An :class:`Edit` as is; a plain callable wrapped in :class:`Apply`.

    Raises:
        ValueError: anything else.
    """
    if isinstance(edit, Edit):
        return edit
    if callable(edit):
        return Apply(edit)
    raise InputError(f"an edit is an Edit object (Zero(), Patch(value), …) or a function, got {edit!r}")
