"""Duplicate-token, induction and retrieval heads on a two-layer GPT-2 whose weights are set by
hand, so that each head's role is known by construction; the toolkit's own taxonomy
(:func:`~probe.analyses.patterns.decoder_taxonomy.decoder_taxonomy`, what ``probe
decoder-heads`` runs) must name exactly those roles.

The residual stream (width 160, two heads of 80 per layer, MLPs zero, layer norms the
identity's scale) holds three one-hot subspaces: the token (``TOK``, ×10, the tied
unembedding reads only it), the previous token (``PREV``, empty until layer 0 writes it) and
the position (``POS``, ×10). The vocabulary is zoo:induction's word-level tokenizer (40 words
after ``<pad> <unk> <s>``).

* L0H0, previous-token (Olsson et al. 2022's first half): ``q_i = e_{i-1}`` against
  ``k_j = e_j`` on positions; its OV circuit copies the attended token's ``TOK`` into
  ``PREV``, so each position carries "my previous token was A".
* L0H1, duplicate-token: ``q·k = [t_i = t_j] − 2[i = j]`` (token against token, itself
  pushed away by its position): each token of the second copy attends to its earlier
  occurrence ``i − T``; its OV circuit is zero.
* L1H0, induction (K-composition, Olsson et al. 2022): its query reads ``TOK`` of the
  current token, its key ``PREV``, so ``t_i`` finds the position *after* its earlier
  occurrence, ``i − T + 1``; its OV circuit copies ``TOK`` to ``TOK`` ×3 (a copying head).
  On a needle in a haystack (Wu et al. 2024) the cue is the needle's first token: the head
  attends to the needle's next token and its OV circuit makes the model emit it, step after
  step, so it is a retrieval head by construction.
* L1H1, sink (Gu et al. 2024): a constant query against position 0's key; OV zero.

Each assertion separates the right offset from its neighbour: a duplicate-token detector that
read ``i − T + 1`` (the induction offset) or an induction detector that read ``i − T`` would
swap L0H1's and L1H0's names, and a copy-paste score that credited attention to the needle
without checking the attended token is the one emitted would name L0H1 (it attends to the
earlier copy of the current token, inside the needle) a retrieval head.
"""

from __future__ import annotations

import pytest
import torch

from probe.analyses.patterns.decoder_heads import THRESHOLDS
from probe.analyses.patterns.retrieval_heads import RETRIEVAL_THRESHOLD

V = 43  # zoo:induction's tokenizer: 3 specials + 40 words
N_POS = 32
TOK, PREV, POS = 0, V, 2 * V  # first residual dim of each subspace
D, DH = 160, 80


def hand_set_decoder(previous_token_ov: bool = True):
    """The model of the module docstring as a ModelAdapter; ``previous_token_ov=False`` leaves
    L0H0's OV circuit zero (nothing is written to ``PREV``: layer 1's keys go blind)."""
    import transformers
    from conftest import previous_token_by_position

    from probe.models import ModelAdapter
    from probe.models.zoo import induction

    tok = induction.tokenizer()
    assert len(tok) == V
    cfg = transformers.GPT2Config(
        vocab_size=V,
        n_embd=D,
        n_layer=2,
        n_head=2,
        n_positions=N_POS,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.bos_token_id,
    )
    model = transformers.GPT2LMHeadModel(cfg).eval()  # unembedding tied to wte
    m = model.transformer
    with torch.no_grad():
        for block in m.h:
            for p in (block.attn.c_attn, block.attn.c_proj, block.mlp.c_fc, block.mlp.c_proj):
                p.weight.zero_()
                p.bias.zero_()
        previous_token_by_position(model, first_dim=POS, n_positions=N_POS)  # L0H0's q, k
        m.wte.weight[:, TOK : TOK + V] = 10 * torch.eye(V)
        ids = torch.arange(V)
        qkv0, out0 = m.h[0].attn.c_attn.weight, m.h[0].attn.c_proj.weight  # [D, 3D] q|k|v; [D, D]
        if previous_token_ov:  # L0H0: v = the token, written to PREV
            qkv0[TOK + ids, 2 * D + ids] = 1.0
            out0[ids, PREV + ids] = 10 / 9
        # L0H1: q·k = token match − 2·(same position)
        qkv0[TOK + ids, DH + ids] = 1.0
        qkv0[TOK + ids, D + DH + ids] = 1.0
        pos = torch.arange(N_POS)
        qkv0[POS + pos, DH + V + pos] = -2.0
        qkv0[POS + pos, D + DH + V + pos] = 1.0
        qkv1, out1 = m.h[1].attn.c_attn.weight, m.h[1].attn.c_proj.weight
        # L1H0: query = current token, key = previous token; OV copies the token ×3
        qkv1[TOK + ids, ids] = 2.0
        qkv1[PREV + ids, D + ids] = 1.0
        qkv1[TOK + ids, 2 * D + ids] = 1.0
        out1[ids, TOK + ids] = 3.0
        # L1H1: a constant query that only position 0's key answers
        m.h[1].attn.c_attn.bias[DH] = 20.0
        qkv1[POS, D + DH] = 1.0
    return ModelAdapter(name="hand-set-2l", model=model, tokenizer=tok, family="gpt2")


@pytest.fixture(scope="module")
def taxonomy():
    from probe.analyses.patterns.decoder_taxonomy import decoder_taxonomy

    return decoder_taxonomy(hand_set_decoder())


def test_hand_set_duplicate_token_head_is_named_and_no_other(taxonomy):
    t = taxonomy.table.set_index(["layer", "head"])
    assert taxonomy.heads("duplicate-token") == [(0, 1)]
    assert t.loc[(0, 1), "duplicate_token"] > 0.95 > THRESHOLDS["duplicate_token"]
    assert t.loc[(0, 1), "induction"] < 0.05 and t.loc[(0, 1), "previous_token"] < 0.2
    others = [(0, 0), (1, 0), (1, 1)]
    assert (t.loc[others, "duplicate_token"] < 0.05).all()
    assert taxonomy.roles_of(0, 1) == ["duplicate-token"]


def test_hand_set_induction_head_is_named_by_k_composition(taxonomy):
    t = taxonomy.table.set_index(["layer", "head"])
    assert taxonomy.heads("induction") == [(1, 0)] and taxonomy.heads("previous-token") == [(0, 0)]
    assert t.loc[(1, 0), "induction"] > 0.95 > THRESHOLDS["induction"]
    assert t.loc[(1, 0), "duplicate_token"] < 0.05
    assert (t.loc[[(0, 0), (0, 1), (1, 1)], "induction"] < 0.05).all()
    assert t.loc[(0, 0), "previous_token"] > 0.95
    assert taxonomy.heads("copying") == [(1, 0)] and t.loc[(1, 0), "copying"] == pytest.approx(1.0)
    assert taxonomy.roles_of(0, 0) == ["previous-token", "positional"]
    # a sink points at position 0, an absolute position: its offset moves with the row, so it is
    # not positional in Voita et al.'s sense (one relative offset), though its content score is 0
    assert taxonomy.roles_of(1, 1) == ["sink"] and t.loc[(1, 1), "content"] < 0.01
    assert t.loc[(0, 0), "positional_offset"] == -1 and t.loc[(0, 0), "positional"] > 0.9


def test_hand_set_retrieval_head_copies_every_needle_token(taxonomy):
    """The model emits the whole answer (100%) and at every step L1H0's top key is the needle
    position holding the token emitted: score 1. L0H1 attends inside the needle too, to the
    earlier copy of the current token, which is not the one emitted: score 0."""
    t = taxonomy.table.set_index(["layer", "head"])
    assert any("the model emits the needle's answer tokens in 100% of the prompts" in n for n in taxonomy.notes)
    assert taxonomy.heads("retrieval") == [(1, 0)]
    assert t.loc[(1, 0), "retrieval"] == 1.0 > RETRIEVAL_THRESHOLD
    assert (t.loc[[(0, 0), (0, 1), (1, 1)], "retrieval"] == 0.0).all()
    assert taxonomy.roles_of(1, 0) == ["induction", "copying", "retrieval"]


def test_without_the_previous_token_write_the_induction_head_is_not_named():
    """The same weights with L0H0's OV circuit zero: layer 1's key reads an empty ``PREV``, so
    L1H0 attends evenly and is neither an induction nor a retrieval head (the scores read the
    mechanism, not the weights' layout); duplicate-token and previous-token stay."""
    from probe.analyses.patterns.decoder_heads import decoder_head_scores
    from probe.analyses.patterns.retrieval_heads import retrieval_scores

    adapter = hand_set_decoder(previous_token_ov=False)
    t = decoder_head_scores(adapter, n_tokens=10, n_examples=8).table.set_index(["layer", "head"])
    assert t.loc[(1, 0), "induction"] < 0.1 and not t["induction_head"].any()
    assert t.loc[(0, 1), "duplicate_token_head"] and t.loc[(0, 0), "previous_token_head"]
    r = retrieval_scores(adapter, n_context=24, n_examples=8).set_index(["layer", "head"])
    assert r.attrs["answer_recall"] == 0.0 and not r["retrieval_head"].any()  # it repeats the cue


if __name__ == "__main__":  # python tests/test_decoder_hand_set.py: the table docs/patterns.md quotes
    from probe.analyses.patterns.decoder_taxonomy import decoder_taxonomy

    tax = decoder_taxonomy(hand_set_decoder())
    cols = [
        "previous_token",
        "duplicate_token",
        "induction",
        "sink",
        "copying",
        "retrieval",
        "content",
        "positional",
        "positional_offset",
    ]
    print(tax.table[["layer", "head", *cols]].round(3).to_string(index=False))
    for layer, head in zip(tax.table["layer"], tax.table["head"]):
        print(f"L{layer}H{head}: {', '.join(tax.roles_of(layer, head)) or '-'}")
    print("\n".join(tax.notes))
