"""The cache a trace fills: site name -> tensor, with every shape written once."""

from __future__ import annotations

from typing import Any, Iterator, Mapping, Optional

import torch

from probe.errors import InputError
from probe.models.sites import parse_site

__all__ = ["Cache"]


class Cache(Mapping):
    """What a trace read, by site name (detached unless the trace keeps gradients).

    Shapes (``batch`` = rows of the forward, ``seq`` = padded positions; encoder-decoder
    cross attention: ``query`` target, ``key`` source positions)::

        hook_embed, hook_pos_embed, ln_final.hook_normalized   [batch, seq, d_model]
        blocks.{l}.hook_resid_pre / _mid / _post, hook_attn_out, hook_mlp_in, hook_mlp_out
                                                     [batch, seq, d_model]
        blocks.{l}.attn.hook_q                       [batch, seq, head, head_dim]  (before rotary; hook_rot_q after)
        blocks.{l}.attn.hook_k                       [batch, seq, kv_head, head_dim]
        blocks.{l}.attn.hook_attn_scores, hook_pattern   [batch, head, query, key]
        blocks.{l}.attn.hook_v                       [batch, seq, head, head_dim]  (kv heads repeated)
        blocks.{l}.attn.hook_z                       [batch, seq, head, head_dim]
        blocks.{l}.attn.hook_proj_in                 [batch, seq, head * head_dim]
        blocks.{l}.attn.hook_result                  [batch, seq, head, d_model]
        blocks.{l}.mlp.hook_router_logits            [batch, seq, expert]

    ``cache[name]``, ``cache["pattern", 3]`` or ``cache[Site(...)]``: the last forward's
    value; :meth:`calls`: every forward's; :meth:`stack`: a kind over layers
    ``[layer, ...]``; :meth:`grad`: the gradient of ``trace(grad=...)``'s objective at a
    site. ``output``: the model's output (:func:`trace`), ``inputs`` the batch.
    """

    def __init__(self, default_stack: str) -> None:
        self._values: dict[str, list] = {}
        self._default = default_stack
        self.output: Any = None
        self.inputs: Optional[dict] = None
        self._grads: dict = {}

    def _key(self, key: Any) -> str:
        return key if isinstance(key, str) else parse_site(key).name(self._default)

    def __getitem__(self, key: Any) -> torch.Tensor:
        return self._values[self._key(key)][-1]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def calls(self, key: Any) -> list:
        """The value of every forward the site was read in, in order."""
        return list(self._values[self._key(key)])

    def stack(self, kind: str) -> torch.Tensor:
        """``[layer, ...]``: every read layer of the main stack's ``kind``, stacked."""
        names = sorted(
            (n for n in self._values if parse_site(n).kind == kind and parse_site(n).stack is None),
            key=lambda n: parse_site(n).layer,
        )
        return torch.stack([self[n] for n in names])

    def grad(self, key: Any) -> torch.Tensor:
        """The gradient of the trace's ``grad=`` objective at a read site (its shape).

        Raises:
            InputError: the trace computed no gradient, or the site's value is not a tensor
                the forward goes on with (``hook_v``, the router logits: derived copies).
        """
        name = self._key(key)
        if name not in self._grads:
            raise InputError(f"no gradient at {name}: pass grad=fn(output) -> scalar to trace()")
        g = self._grads[name]
        if g is None:
            raise InputError(f"{name} is a copy the forward does not go on with: no gradient flows through it")
        return g

    def set_grad(self, name: str, value: Optional[torch.Tensor]) -> None:
        """Store the gradient ``grad`` (the site's shape) of the trace's objective at site ``name``."""
        self._grads[name] = value

    def add(self, name: str, value: torch.Tensor) -> None:
        """Append ``value`` (the site's shape) as site ``name``'s value of this forward."""
        self._values.setdefault(name, []).append(value)
