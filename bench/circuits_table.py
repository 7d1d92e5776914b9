"""The README's circuits table: on zoo models whose edges are known, ROC AUC of each
edge ranking (exact path patching, EAP, EAP-IG) against the known edges, precision and
recall of the circuit it yields, the rank agreement of EAP/EAP-IG with exact path
patching (Spearman over all edges), and on a randomly initialised model of the same
configuration the share the known circuit recovers vs random edge sets of its composition.

    python bench/circuits_table.py [--pairs 16]
"""

from __future__ import annotations

import argparse
from probe.analyses.common.objective import get_metric


def _pairs(task: str, n: int):
    from probe.analyses.necessity.patching import corrupt_zoo
    from probe.models import zoo
    from probe.models.zoo import relay

    from probe.inputs.corpus import Corpus

    ex = zoo.eval_examples(task, n=n)
    bad = relay.corrupt(ex) if task == "relay" else corrupt_zoo("induction", ex)
    return (
        Corpus(texts=tuple(e["text"] for e in ex), examples=tuple(ex)),
        Corpus(texts=tuple(e["text"] for e in bad), examples=tuple(bad)),
    )


def _random_null(a, clean, bad, known, draws: int = 20):
    import numpy as np
    import torch
    from probe.analyses.circuits.discovery import circuit_objective
    from probe.analyses.circuits.known import matched_random_circuits
    from probe.analyses.circuits.edges import all_edges
    from probe.models import ModelAdapter

    torch.manual_seed(0)
    cls = type(a.model)
    rand = ModelAdapter(name="random", model=cls(a.model.config), tokenizer=a.tokenizer, family=a.family)
    graph = all_edges(rand)
    null = matched_random_circuits(graph, known, draws)
    out = {}
    for name, model in (("trained/hand-set", a), ("random init", rand)):
        vals = circuit_objective(model, clean, bad, get_metric("loss", model), [known] + null + [graph, []], graph)
        faith = (vals[:-2] - vals[-1]) / (vals[-2] - vals[-1])
        out[name] = (
            faith[0],
            float(np.quantile(faith[1:], 0.5)),
            float(np.quantile(faith[1:], 0.95)),
            float(vals[-2] - vals[-1]),
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=16)
    args = ap.parse_args()
    import torch
    from probe.analyses.circuits.known import known_edges
    from probe.analyses.circuits.study import study_circuit
    from probe.models import load_model

    torch.set_num_threads(2)
    rows, nulls = [], []
    for task in ("relay", "induction"):
        a = load_model(f"zoo:{task}")
        clean, bad = _pairs(task, args.pairs)
        known = known_edges(a)
        st = study_circuit(a, clean, bad, get_metric("loss", a), known=known, batch_size=16)
        for col, label in (("exact", "exact path patching"), ("eap", "EAP"), ("eap_ig", "EAP-IG (5 steps)")):
            k = st.known[col]
            rho = "1" if col == "exact" else f"{st.agreement[col]:.2f}"
            circ = "smallest 90% circuit" if col == "exact" else f"top {len(known)}"
            rows.append(
                f"| zoo:{task} | {k['n_edges']} / {k['n_known']} | {label} | {k['auc']:.2f} | "
                f"{k['precision']:.2f} / {k['recall']:.2f} ({circ}, {k['n_found']} edges) | {rho} |"
            )
        null = _random_null(a, clean, bad, known)
        for name, (f, med, q95, gap) in null.items():
            nulls.append(f"| zoo:{task} | {name} | {gap:.3g} | {f:.2f} | {med:.2f} / {q95:.2f} |")
    print(f"{args.pairs} clean/corrupted pairs per model, objective: the zoo task's loss")
    print("| model | edges / known | ranking | ROC AUC | precision / recall | Spearman vs exact |")
    print("| --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))
    print()
    print(
        "| model | weights | m(full) - m(none) | known circuit's faithfulness | "
        "20 random edge sets of its composition: median / 95th pct |"
    )
    print("| --- | --- | --- | --- | --- |")
    print("\n".join(nulls))


if __name__ == "__main__":
    main()
