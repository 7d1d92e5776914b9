"""Indirect-object identification on SmolLM2 (Wang et al. 2022): accuracy first, then the
heads with the largest logit-difference DLA, confirmed by path patching (sender -> logits).

    python bench/writes_ioi_smollm2.py [N_PROMPTS]

Template (ABBA): "When{A} and{B} went to the store,{B} gave a drink to" -> {A}; names are
first names that are one token (with their leading space) in SmolLM2's vocabulary, so every
prompt has the same length and the names sit at positions 1 (IO) and 3 (S). The corrupted
partner of a prompt (ABC) replaces the second{B} with a third name: the path patching
effect of a head's direct path to the logits is the share of the logit difference's drop it
carries (analyses/circuits/path_patching.py).
"""

from __future__ import annotations

import random
import sys
import time

import numpy as np
import pandas as pd
import torch

import probe
from probe.analyses.circuits.edges import Edge
from probe.analyses.circuits.path_patching import path_patch
from probe.analyses.common.metrics import CallableMetric
from probe.analyses.writes.answers import Target
from probe.analyses.writes.claim import head_effects

NAMES = (
    "Mary John Tom James Paul Mark David Sarah Anna Lisa Emma Kate Peter Mike Jack Alice Bob Steve Laura Linda "
    "Susan Karen George Henry Rachel Jessica Daniel Michael Robert William Richard Thomas Chris Amy Ben Sam Dan"
).split()
TEMPLATE = "When{a} and{b} went to the store,{c} gave a drink to"
IO, S, S2 = 1, 3, 9  # token positions of the indirect object, the subject and its second occurrence


def single_token_names(adapter) -> list:
    tok = adapter.tokenizer
    return [f" {n}" for n in NAMES if len(tok.encode(f" {n}", add_special_tokens=False)) == 1]


def prompts(names: list, n: int, seed: int = 0) -> tuple:
    rng = random.Random(seed)
    clean, corrupt, answers = [], [], []
    for _ in range(n):
        a, b, c = rng.sample(names, 3)
        clean.append(TEMPLATE.format(a=a, b=b, c=b))
        corrupt.append(TEMPLATE.format(a=a, b=b, c=c))
        answers.append((a, b))
    return clean, corrupt, answers


def logit_difference(outputs, batch) -> torch.Tensor:
    """``[rows]``: logit(IO) − logit(S) at the last position (names read from positions 1, 3)."""
    ids = batch.inputs["input_ids"]
    last = outputs.logits[:, -1]
    rows = torch.arange(len(ids))
    return last[rows, ids[:, IO]] - last[rows, ids[:, S]]


def reads_and_writes(adapter, clean: list, targets: list, best) -> None:
    """For each listed head: its attention from the last position to IO, S1 and S2 (mean over
    prompts, and the prompts where IO gets more than S1 + S2), and its DLA split into the part
    that raises IO and the part that lowers S (DLA to IO alone, and minus DLA to S alone)."""
    from probe.tracing.trace import trace

    pattern = trace(adapter, adapter.inputs_of(clean), read="pattern")
    io_only, _ = head_effects(adapter, clean, [Target(t.answer) for t in targets])
    s_only, index = head_effects(adapter, clean, [Target(t.against) for t in targets])
    rows = []
    for r in best.itertuples():
        p = pattern[f"blocks.{r.layer}.attn.hook_pattern"][:, r.head, -1]  # [prompt, key]
        i = int(index[(index["layer"] == r.layer) & (index["head"] == r.head)].index[0])
        rows.append(
            {
                "layer": r.layer,
                "head": r.head,
                "attn_IO": float(p[:, IO].mean()),
                "attn_S1": float(p[:, S].mean()),
                "attn_S2": float(p[:, S2].mean()),
                "IO_above_S": f"{int((p[:, IO] > p[:, S] + p[:, S2]).sum())}/{len(clean)}",
                "dla_IO": float(io_only[i].mean()),
                "dla_minus_S": float(-s_only[i].mean()),
            }
        )
    print("attention from the last position (mean over prompts) and the DLA split (IO up, S down):")
    print(pd.DataFrame(rows).round(3).to_string(index=False))


def main(n: int = 24) -> None:
    adapter = probe.load_model("smollm2")
    tok = adapter.tokenizer
    names = single_token_names(adapter)
    clean, corrupt, answers = prompts(names, n)
    lengths = {len(tok.encode(t, add_special_tokens=False)) for t in clean + corrupt}
    assert len(lengths) == 1, lengths
    t0 = time.time()
    batch = adapter.inputs_of(clean)
    with torch.no_grad():
        last = adapter.model(**batch).logits[:, -1]
    ids = batch["input_ids"]
    diff = (last[torch.arange(n), ids[:, IO]] - last[torch.arange(n), ids[:, S]]).numpy()
    top1 = (last.argmax(-1) == ids[:, IO]).float().mean().item()
    print(f"{len(names)} single-token names; {n} ABBA prompts, e.g. {clean[0]!r} -> {answers[0][0]!r}")
    print(
        f"accuracy (logit IO > logit S) {np.mean(diff > 0):.3f}; IO top-1 {top1:.3f}; mean logit difference {diff.mean():.3f}"
    )
    targets = [
        Target(tok.encode(a, add_special_tokens=False)[0], tok.encode(b, add_special_tokens=False)[0])
        for a, b in answers
    ]
    effects, index = head_effects(adapter, clean, targets)
    table = index.assign(dla=effects.mean(1))
    best = table.reindex(table["dla"].abs().sort_values(ascending=False).index).head(6)
    print("largest logit-difference DLA (mean over prompts):")
    print(best.round(3).to_string(index=False))
    edges = [Edge(int(r.layer), int(r.head), -1, -1, "out") for r in best.itertuples()]
    res = path_patch(adapter, clean, corrupt, objective=CallableMetric(logit_difference), edges=edges, batch_size=8)
    print(
        f"path patching (ABBA -> ABC), sender -> logits: clean {res.clean.mean():.3f}, corrupted {res.corrupted.mean():.3f}"
    )
    print(res.table[["sender_layer", "sender_head", "delta", "effect"]].round(3).to_string(index=False))
    reads_and_writes(adapter, clean, targets, best)
    print(f"({time.time() - t0:.0f} s after loading)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 24)
