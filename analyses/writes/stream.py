"""One text's residual stream split into what each component wrote, read by one trace.

The final residual stream (the final norm's input) of a pre-norm transformer is a sum:
the token (and position) embeddings, each head's output ``hook_result`` per layer, each
attention layer's output bias (``hook_attn_out − Σ_h hook_result``) and each MLP's output
``hook_mlp_out`` (Elhage et al. 2021; TransformerLens's ``decompose_resid`` /
``stack_head_results``). :func:`decompose` reads them in one forward and keeps what is
not covered as ``rest`` (0 up to float error where the sum holds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Optional, Sequence

import pandas as pd
import torch

from probe.errors import NotApplicable

from .folding import NormFold, check_fold, final_norm, unembedding

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter

__all__ = ["Stream", "decompose", "decompose_texts", "encode_text"]


@dataclass(frozen=True)
class Stream:
    """One text's decomposed stream (float64).

    Attributes:
        ids: token ids ``[seq]``; tokens: their strings.
        labels: one row per component (``component``: ``embed``, ``pos_embed``, ``head``,
            ``attn_bias``, ``mlp``; ``layer``, ``head``: -1 where not a head/layer).
        parts: ``[component, seq, d_model]`` what each wrote into the stream.
        rest: ``[seq, d_model]`` the final stream minus the parts.
        scale: ``[seq]`` the final norm's scale of the whole stream at each position.
        fold: the final norm as :class:`~.folding.NormFold`.
        logits: ``[seq, vocab]`` the model's own logits.
        pattern, values: ``[layer, head, q, k]`` and ``[layer, seq, head, head_dim]`` when
            read (per-source parts of a head), else None.
    """

    ids: torch.Tensor
    tokens: tuple
    labels: pd.DataFrame
    parts: torch.Tensor
    rest: torch.Tensor
    scale: torch.Tensor
    fold: NormFold
    logits: torch.Tensor
    pattern: Optional[torch.Tensor] = None
    values: Optional[torch.Tensor] = None


def encode_text(adapter: ModelAdapter, text: str) -> dict:
    """Model inputs ``{input_ids, attention_mask}`` ``[1, seq]`` of one text.

    Raises:
        InputError: empty, or longer than the model's positions (the adapter's one line).
    """
    enc = adapter.encode(text)
    return adapter.batch([enc])


def check_causal(adapter: ModelAdapter) -> None:
    if adapter.arch != "decoder":
        raise NotApplicable(
            f"{adapter.name} is {'an' if adapter.arch[0] in 'ae' else 'a'} {adapter.arch}: direct logit "
            "attribution reads a causal LM's next-token logits (an encoder's stream is not read out at the next token)"
        )


def _sites(adapter: ModelAdapter, layers: int, sources: bool) -> list:
    from probe.tracing.site_keys import available_sites

    have = set(available_sites(adapter))
    want = ["hook_embed", "hook_pos_embed"]
    for layer in range(layers):
        want += [f"blocks.{layer}.attn.hook_result", f"blocks.{layer}.hook_attn_out", f"blocks.{layer}.hook_mlp_out"]
        if sources:
            want += [f"blocks.{layer}.attn.hook_pattern", f"blocks.{layer}.attn.hook_v"]
    missing = [w for w in want if w not in have and w != "hook_pos_embed"]
    if missing:
        raise NotApplicable(f"{adapter.name} has no site {missing[0]}: its stream cannot be split into components")
    return [w for w in want if w in have]


def _read_sites(adapter: ModelAdapter, sources: bool) -> tuple:
    """``(fold, sites to read)`` of :func:`decompose`, refusing a model it does not apply to."""
    from probe.tracing.site_keys import ModuleSite

    unembedding(adapter)  # refuses a model without a language-model head
    module, fold = final_norm(adapter)  # refuses post-norm blocks (an MLM's BERT) with the reason
    check_causal(adapter)
    final_in = ModuleSite(module, "input", "final_resid")
    final_out = ModuleSite(module, "output", "final_normed")
    return fold, [*_sites(adapter, adapter.n_layers_of(), sources), final_in, final_out]


def _stream(
    adapter: ModelAdapter, cache, ids: torch.Tensor, row: int, fold: NormFold, *, check: bool, sources: bool
) -> Stream:
    """Row ``row`` of a traced batch ``cache`` (its first ``len(ids)`` positions, right
    padding after them) as one text's :class:`Stream`; ``check``: :func:`.folding.check_fold`
    on it first; ``sources``: the patterns and values were read."""
    n, layers = len(ids), adapter.n_layers_of()
    logits = cache.output.logits[row, :n].double()
    resid = cache["final_resid"][row, :n].double()
    if check:
        check_fold(adapter, fold, resid, cache["final_normed"][row, :n], logits)
    parts, rows = [], []
    for kind in ("hook_embed", "hook_pos_embed"):
        if kind in cache:
            t = cache[kind]
            parts.append(t[row if t.shape[0] > 1 else 0, :n].double())  # a position embedding: one row for all
            rows.append((kind[5:], -1, -1))
    for layer in range(layers):
        result = cache[f"blocks.{layer}.attn.hook_result"][row, :n].double()  # [seq, head, d]
        bias = cache[f"blocks.{layer}.hook_attn_out"][row, :n].double() - result.sum(1)
        if float((bias - bias[:1]).abs().max()) > 1e-4 * max(1.0, float(result.abs().max())):
            raise NotApplicable(
                f"{adapter.name}: layer {layer}'s attention output is not the sum of its heads' outputs plus a bias "
                "(a norm after attention): a head's direct effect on the logits is not defined"
            )
        parts += [*result.unbind(1), bias, cache[f"blocks.{layer}.hook_mlp_out"][row, :n].double()]
        rows += [("head", layer, h) for h in range(result.shape[1])] + [("attn_bias", layer, -1), ("mlp", layer, -1)]
    stacked = torch.stack(parts)
    pattern = values = None
    if sources:
        pattern = torch.stack([cache[f"blocks.{i}.attn.hook_pattern"][row, :, :n, :n] for i in range(layers)]).double()
        values = torch.stack([cache[f"blocks.{i}.attn.hook_v"][row, :n] for i in range(layers)]).double()
    return Stream(
        ids=ids,
        tokens=tuple(adapter.tokenizer.convert_ids_to_tokens(ids.tolist())),
        labels=pd.DataFrame(rows, columns=["component", "layer", "head"]),
        parts=stacked.cpu(),
        rest=(resid - stacked.sum(0)).cpu(),
        scale=fold.scale(resid).cpu(),
        fold=fold,
        logits=logits.cpu(),
        pattern=None if pattern is None else pattern.cpu(),
        values=None if values is None else values.cpu(),
    )


def decompose(adapter: ModelAdapter, text: str, *, sources: bool = False) -> Stream:
    """Split ``text``'s final residual stream into components (module docstring).

    Raises:
        InputError: empty text or longer than the model's positions.
        NotApplicable: not a causal LM, no unembedding, a post-norm block, a final norm
            that is not a LayerNorm/RMSNorm, logits that are not a linear read-out of the
            norm, or heads whose outputs pass through a norm before the stream (Gemma 2's
            post-attention norm: the heads' outputs do not add to it).
    """
    from probe.tracing.trace import trace

    fold, read = _read_sites(adapter, sources)
    batch = encode_text(adapter, text)
    cache = trace(adapter, batch, read=read)
    return _stream(adapter, cache, batch["input_ids"][0].cpu(), 0, fold, check=True, sources=sources)


#: most texts per forward of :func:`decompose_texts`
TEXTS_PER_FORWARD = 16


def decompose_texts(adapter: ModelAdapter, texts: Sequence[str]) -> Iterator[tuple]:
    """``(index, Stream)`` of every text of ``texts``, as :func:`decompose` gives each
    (float rounding of the batched float32 forward aside), from right-padded forwards of
    up to :data:`TEXTS_PER_FORWARD` texts of near lengths (padding at most
    :data:`probe.inputs.budget.PADDING` of their tokens; rows per forward under the memory budget as for a forward with
    gradients, whose kept activations are about the size of every layer's head results
    cached here): a causal LM's positions before the padding are those of the text alone.
    In the forwards' order (longest first); the fold is checked on each forward's first text.

    Raises:
        As :func:`decompose`.
    """
    from probe.inputs.budget import PADDING, length_groups
    from probe.tracing.trace import trace

    fold, read = _read_sites(adapter, False)
    encodings = [adapter.encode(t) for t in texts]
    for group in length_groups([len(e) for e in encodings], adapter, TEXTS_PER_FORWARD, waste=PADDING):
        batch = adapter.batch([encodings[i] for i in group])
        cache = trace(adapter, batch, read=read)
        for row, i in enumerate(group):
            ids = batch["input_ids"][row, : len(encodings[i])].cpu()
            yield i, _stream(adapter, cache, ids, row, fold, check=row == 0, sources=False)
