"""The *redundancy* claim: heads not needed alone that share a named pattern are needed
together ("redundant: needed as a group of k").

When several heads implement the same step, removing any one changes little and removing
all removes the step (Olsson et al. 2022's induction heads; Wang et al. 2023's name
movers). The group is every head of one layer whose necessity claim does not hold and whose
pattern claim names the same role; it is zero-ablated at once
(:func:`probe.analyses.necessity.head_groups.ablate_group`) and compared, example by
example, with the null of :mod:`.perturb` applied to the whole group (each head's output
minus a randomly rotated copy). One-sided Wilcoxon, Bonferroni across the groups tested,
and the mean excess harm must reach :func:`.thresholds.min_effect`.
"""

from __future__ import annotations

import numpy as np
import torch

from probe.analyses.common.metrics import as_corpus, get_metric
from probe.analyses.necessity.head_groups import ablate_group
from probe.interventions import HeadEdit, HeadIntervention, HeadOutputRecorder

from . import thresholds as T
from .claim import Claim
from .perturb import random_rotations, rotate
from .statistics import mean_ci, paired_greater


@torch.no_grad()
def group_null(adapter, corpus, heads, metric, batch_size: int = 16, seed: int = 0) -> tuple:
    """``(clean [n], null [n])``: the metric with every head of ``heads`` moved by its own
    output turned in a random direction (``z − Q z``), all in the same forward."""
    corpus = as_corpus(corpus)
    metric = get_metric(metric, adapter, corpus)
    gen = torch.Generator().manual_seed(seed)
    n = len(corpus)
    clean, null = np.zeros(n), np.zeros(n)
    layers = sorted({l for l, _ in heads})
    for idx, batch in metric.batches(adapter, corpus, batch_size):
        with HeadOutputRecorder(adapter, layers=layers) as rec:
            out = metric.forward(adapter, batch)
        ref = metric.reference(out, batch)
        clean[idx] = metric.score(out, batch, ref).double().cpu().numpy()
        edits = []
        for l in layers:
            z = rec.outputs[l]
            moved = z - rotate(z, random_rotations(z.shape[0], z.shape[2], z.shape[3], gen))
            edits += [HeadEdit(l, h, "patch", value=moved[:, :, h]) for ll, h in heads if ll == l]
        with HeadIntervention(adapter, edits):
            out = metric.forward(adapter, batch)
        null[idx] = metric.score(out, batch, ref).double().cpu().numpy()
    return clean, null


def candidate_groups(pattern: dict, necessity: dict) -> dict:
    """``"<role> (layer l)"`` -> heads of layer ``l`` whose pattern holds with that role and
    whose necessity does not hold (parallel heads of one layer can stand in for each other)."""
    groups: dict = {}
    for key, p in pattern.items():
        n = necessity.get(key)
        if p.holds and n is not None and n.status == "does not hold":
            groups.setdefault(f"{p.statement} (layer {key[0]})", []).append(key)
    return {r: sorted(h) for r, h in groups.items() if len(h) >= T.GROUP_MIN}


def redundancy_claims(adapter, corpus, metric: str, pattern: dict, necessity: dict, seed: int = 0) -> tuple:
    """``({(layer, head): Claim}, groups table rows)`` for every head in ``necessity``."""
    groups = candidate_groups(pattern, necessity)
    higher = bool(get_metric(metric, adapter, as_corpus(corpus)).higher_is_better)
    floor = T.min_effect(metric)
    claims, rows = {}, []
    for key, n in necessity.items():
        if n.status == "holds":
            claims[key] = Claim("redundancy", "not tested", reason="needed alone")
        elif n.status != "does not hold":
            claims[key] = Claim("redundancy", "not tested", reason=f"necessity {n.status}")
        else:
            claims[key] = Claim("redundancy", "not tested",
                                reason="no other head that is not needed alone shares a named pattern")
    for gi, (role, heads) in enumerate(sorted(groups.items())):
        res = ablate_group(adapter, corpus, heads, metric=metric, seed=seed)
        clean, null = group_null(adapter, corpus, heads, metric, seed=seed + gi)
        sign = -1.0 if higher else 1.0
        harm, harm0 = sign * (res.intervened - res.clean), sign * (null - clean)
        p = paired_greater(harm, harm0)
        eff, lo, hi = mean_ci(harm - harm0, seed=gi)
        holds = len(harm) >= T.MIN_EXAMPLES and p <= T.FDR / len(groups) and eff >= floor
        k = len(heads)
        names = "+".join(f"L{l}H{h}" for l, h in heads)
        rows.append({"role": role, "heads": names, "k": k, "harm": float(harm.mean()), "null": float(harm0.mean()),
                     "effect": eff, "ci_low": lo, "ci_high": hi, "p": p, "holds": holds})
        for key in heads:
            claims[key] = Claim("redundancy", "holds" if holds else "does not hold",
                                statement=f"needed as a group of {k}" if holds else f"group of {k} not needed either",
                                effect=eff, ci_low=lo, ci_high=hi, count=len(harm), null=float(harm0.mean()),
                                unit=f"{metric} harm above the null",
                                threshold="fdr (Bonferroni over groups)+min_effect",
                                reason=f"{role} heads {names} ablated together",
                                extra={"group": names, "k": k, "harm": float(harm.mean()), "p": p, "role": role})
    return claims, rows
