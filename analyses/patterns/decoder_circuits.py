"""Heads read from their weights: the OV circuit's copying score and successor heads.

A head's OV circuit maps the token at a key to what it writes at the query:
``x ↦ W_O^h W_V^h x`` (``W_V^h`` ``[head_dim, d_model]``, ``W_O^h`` ``[d_model, head_dim]``,
grouped-query models: the key/value head the query head reads, :func:`probe.models.sites.kv_head_of`).
The *full* OV circuit from input token to output logit is the ``[vocab, vocab]`` matrix
``M = W_U W_O^h W_V^h W_Eᵀ`` (``W_E`` the input embedding ``[vocab, d_model]``, ``W_U`` the
unembedding ``[vocab, d_model]``).

* **Copying score** (Elhage et al. 2021, "A Mathematical Framework for Transformer
  Circuits"; Olsson et al. 2022, "In-context Learning and Induction Heads", who call an
  induction head one that both prefix-matches and copies): ``Σλ / Σ|λ|`` over the
  eigenvalues ``λ`` of ``M`` — the positive-eigenvalue share, ``1`` for a head whose OV
  circuit raises the logit of the token it attends to, ``-1`` for one that lowers it, ``0``
  when it does neither (a permutation of tokens, a random map). It is computed from the
  ``[head_dim, head_dim]`` matrix ``W_V^h W_Eᵀ W_U W_O^h``, whose eigenvalues are ``M``'s
  non-zero ones. This is the eigenvalue version, not the logit increase of the attended
  token on a forward. The norms' gains are folded in as TransformerLens folds them
  (:func:`probe.analyses.writes.token_circuits.copying_scores`, the one implementation). A
  head copies when the score exceeds 0.5 (:data:`COPYING_THRESHOLD`; ours: the papers show
  the distribution and do not threshold it; no head of a re-initialised SmolLM2 passes it,
  whose largest score is 0.08, :func:`.decoder_taxonomy.null_shares`).
* **Successor score** (Gould et al. 2023, "Successor Heads"): for the ordinal sequences the
  tokenizer holds as single tokens (numbers 1–20, letters, weekdays, months), the share of
  tokens ``t_i`` (not the last of its sequence) whose OV-circuit logits, among every
  ordinal token found, are highest at ``t_{i+1}``. Chance is ``1 / #ordinal tokens``. A
  head is a successor head when the score exceeds 0.5 (:data:`SUCCESSOR_THRESHOLD`; ours).

The successor score ignores the layer norms and biases on the way (their per-dimension
scales are not folded in); both leave out Gould et al.'s first-MLP "effective embedding":
the raw input embedding is used, which is what a model without such an MLP reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import pandas as pd
import torch

from probe.analyses.writes.token_circuits import COPYING_THRESHOLD, ov_circuit
from probe.analyses.writes.token_circuits import copying_scores as folded_copying_scores
from probe.errors import NotApplicable

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter

__all__ = [
    "COPYING_THRESHOLD",
    "SUCCESSOR_THRESHOLD",
    "ORDINAL_SEQUENCES",
    "ov_circuit",
    "copying_scores",
    "ordinal_tokens",
    "successor_scores",
    "TASK_MIN_ACCURACY",
    "successor_task_accuracy",
]

#: a head copies when Σλ/Σ|λ| of its full OV circuit exceeds this (ours)
#: a head is a successor head when its succession score exceeds this (ours; chance is 1/#tokens)
SUCCESSOR_THRESHOLD = 0.5
#: the share of its task a model must do for a task-bound detector (successor, retrieval) to
#: name heads (ours): below it the scores are kept but read as "the model cannot do the task"
TASK_MIN_ACCURACY = 0.5
#: Gould et al. (2023)'s ordinal sequences, as words (each tried with and without a leading
#: space and in lower case; elements that are not one token are left out)
ORDINAL_SEQUENCES = {
    "numbers": tuple(str(i) for i in range(1, 21)),
    "letters": tuple("ABCDEFGHIJKLMNOPQRSTUVWXYZ"),
    "days": ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"),
    "months": (
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ),
}


def _embed_unembed(adapter: ModelAdapter) -> tuple:
    """``(W_E [vocab, d], W_U [vocab, d])``; NotApplicable without an unembedding."""
    out = adapter.model.get_output_embeddings() if hasattr(adapter.model, "get_output_embeddings") else None
    if out is None or getattr(out, "weight", None) is None:
        raise NotApplicable(f"{adapter.name} has no unembedding (a language-model head): no OV circuit to logits")
    w_e = cast(torch.Tensor, adapter.embeddings().weight).detach().float()
    w_u = out.weight.detach().float()
    n = min(len(w_e), len(w_u))
    return w_e[:n], w_u[:n]


def _heads(adapter: ModelAdapter) -> list:
    return [(layer, h) for layer in range(adapter.n_layers_of()) for h in range(adapter.n_heads)]


def copying_scores(adapter: ModelAdapter) -> pd.DataFrame:
    """``layer, head, copying, copying_head``: ``Σλ/Σ|λ|`` of each head's full OV circuit with
    the norms' gains folded in — the one implementation,
    :func:`probe.analyses.writes.token_circuits.copying_scores`."""
    return folded_copying_scores(adapter, COPYING_THRESHOLD)


def _single_token(tok, word: str):
    for form in (" " + word, word, " " + word.lower(), word.lower()):
        ids = tok.encode(form, add_special_tokens=False)
        if len(ids) == 1 and tok.unk_token_id not in ids:
            return int(ids[0])
    return None


def ordinal_tokens(adapter: ModelAdapter, min_length: int = 3) -> dict:
    """``{sequence name: [token id, …]}``: the runs of :data:`ORDINAL_SEQUENCES` whose
    consecutive elements are single, distinct tokens of ``adapter``'s tokenizer (a run breaks
    where an element is not one token); runs shorter than ``min_length`` are left out.

    Raises:
        NotApplicable: no sequence has ``min_length`` consecutive single tokens.
    """
    tok = adapter.tokenizer
    seen: set = set()
    out = {}
    for name, words in ORDINAL_SEQUENCES.items():
        run: list = []
        runs = []
        for w in words:
            t = _single_token(tok, w)
            if t is None or t in seen or t in run:
                runs.append(run)
                run = []
            else:
                run.append(t)
        runs.append(run)
        best = max(runs, key=len)
        if len(best) >= min_length:
            out[name] = best
            seen.update(best)
    if not out:
        raise NotApplicable(
            f"{adapter.name}'s tokenizer holds no ordinal sequence (numbers 1-20, letters, weekdays, months) as "
            f"{min_length}+ consecutive single tokens: successor heads (Gould et al. 2023) cannot be scored"
        )
    return out


def successor_scores(adapter: ModelAdapter) -> pd.DataFrame:
    """``layer, head, successor, successor_head``: each head's succession score (module
    docstring) over :func:`ordinal_tokens`; ``attrs["n_pairs"]``, ``attrs["n_tokens"]`` and
    ``attrs["sequences"]`` say on what.

    Raises:
        NotApplicable: no ordinal sequence in the tokenizer; no unembedding.
    """
    seqs = ordinal_tokens(adapter)
    w_e, w_u = _embed_unembed(adapter)
    ids = [t for s in seqs.values() for t in s]
    index = {t: i for i, t in enumerate(ids)}
    src = [index[s[i]] for s in seqs.values() for i in range(len(s) - 1)]
    dst = torch.tensor([index[s[i + 1]] for s in seqs.values() for i in range(len(s) - 1)])
    e, u = w_e[ids], w_u[ids]  # [n, d]
    rows = []
    for layer, h in _heads(adapter):
        w_v, w_o = ov_circuit(adapter, layer, h)
        logits = (e[src] @ w_v.T @ w_o.T) @ u.T  # [pairs, n]
        score = float((logits.argmax(-1) == dst).float().mean())
        rows.append({"layer": layer, "head": h, "successor": score, "successor_head": score > SUCCESSOR_THRESHOLD})
    table = pd.DataFrame(rows)
    table.attrs.update(n_pairs=len(src), n_tokens=len(ids), sequences={k: len(v) for k, v in seqs.items()})
    return table


def successor_task_accuracy(adapter: ModelAdapter, context: int = 3) -> tuple:
    """``(accuracy, n_prompts)``: the share of prompts ``t_{i-context+1} … t_i`` (consecutive
    elements of one :func:`ordinal_tokens` sequence, after what the tokenizer puts first)
    whose greedy next token is ``t_{i+1}`` — Gould et al. (2023)'s incrementation task, the
    behaviour a successor head serves. One forward over all prompts.

    Raises:
        NotApplicable: no ordinal sequence in the tokenizer, or none longer than ``context``.
    """
    from .decoder_heads import text_prefix

    seqs = ordinal_tokens(adapter)
    prefix = text_prefix(adapter)
    prompts, answers = [], []
    for s in seqs.values():
        for i in range(context - 1, len(s) - 1):
            prompts.append(prefix + s[i - context + 1 : i + 1])
            answers.append(s[i + 1])
    if not prompts:
        raise NotApplicable(f"no ordinal sequence of {adapter.name}'s tokenizer is longer than {context} tokens")
    ids = torch.tensor(prompts, device=adapter.device)
    with torch.no_grad():
        logits = adapter.model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[:, -1]
    hit = logits.argmax(-1).cpu() == torch.tensor(answers)
    return float(hit.float().mean()), len(prompts)
