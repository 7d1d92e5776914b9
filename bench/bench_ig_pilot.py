"""The IG gate with its pilot attributed first, beside every example attributed first (issue 54).

    python bench/bench_ig_pilot.py                                   # minilm, the bundled sample
    python bench/bench_ig_pilot.py --conllu ../shared/data/ud-english-ewt/en_ewt-ud-dev.conllu --limit 0
    python bench/bench_ig_pilot.py --model smollm2 --conllu ../shared/data/ud-english-ewt/en_ewt-ud-dev.conllu --limit 256

Runs :func:`probe.analyses.explanation.faithfulness.run_faithfulness` on the examples the
report explains (its ``report_params``: IG only, its steps; the number the report explains at
the model's head count; the report's explain objective), without permutations or the null
model, twice in one process: with the gate's pilot (:data:`~probe.analyses.explanation.completeness.PILOT`
examples spread over the lengths attributed first, :func:`~probe.analyses.explanation.completeness.gated_attributions`)
and with none (``PILOT = 0``: every example attributed at the first steps, then raised,
:func:`~probe.analyses.explanation.completeness.gate_ig`). Prints each run's wall and CPU
seconds, its reference and the gate's numbers, and whether the two agree on every example's
steps, on its relative completeness error (to 1e-4) and on the verdict table. Where a pilot
example passes they must agree; where none does, the pilot gives IG up before the others are
attributed, and the reference is blank-out in both runs wherever no example would pass.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def run(adapter, corpus, target, p: dict, limit, pilot: int) -> tuple:
    """``(report, wall s, CPU s)`` of the faithfulness study with the gate's pilot ``pilot``."""
    from probe.analyses.explanation import completeness
    from probe.analyses.explanation.faithfulness import run_faithfulness

    saved, completeness.PILOT = completeness.PILOT, pilot
    try:
        t0, c0 = time.perf_counter(), time.process_time()
        rep = run_faithfulness(
            adapter, corpus, target, methods=list(p["methods"]), attention_methods=list(p["attention_methods"]),
            n_steps=p["steps"], internal_batch_size=p["internal_batch_size"], permute=False, max_examples=limit,
            seed=p["seed"], null=False,
        )  # fmt: skip
        return rep, time.perf_counter() - t0, time.process_time() - c0
    finally:
        completeness.PILOT = saved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--conllu", default="bundled", help="a CoNLL-U file, or 'bundled' (the report's own sample)")
    ap.add_argument("--limit", type=int, default=0, help="first N sentences (0: all)")
    args = ap.parse_args()

    from probe.analyses.common.objective import resolve_objective
    from probe.analyses.explanation import completeness
    from probe.app.registry.analyses import faithfulness as section
    from probe.app.registry.analyses._shared import head_count
    from probe.app.report.bundled import sample_corpus
    from probe.app.report.sections import params_with
    from probe.inputs.corpus import fit_to_model, load_corpus
    from probe.models import load_model

    adapter = load_model(args.model)
    limit_n = args.limit or None
    raw = sample_corpus(limit_n) if args.conllu == "bundled" else load_corpus(conllu=args.conllu, limit=limit_n)
    corpus = fit_to_model(raw, adapter)
    target, _ = resolve_objective("auto", adapter, corpus, use="explain")
    p = params_with(section.ANALYSIS, {})
    limit, _ = section._explained(p, head_count(adapter))
    print(f"{args.model} on {args.conllu} ({len(corpus)} examples): target {target.called}; explained {limit}")
    reps = {}
    for pilot in (completeness.PILOT, 0):
        rep, wall, cpu = run(adapter, corpus, target, p, limit, pilot)
        reps[pilot] = rep
        gate = rep.info.get("ig_gate") or {}
        print(f"pilot {pilot}: wall {wall:.1f} s, CPU {cpu:.1f} s; reference {rep.info.get('reference')}")
        print(
            f"  passed {gate.get('n', 0) - gate.get('excluded', 0)} of {gate.get('n')}; steps {gate.get('steps_counts')}; "
            f"untried {gate.get('untried')}"
        )
    a, b = (reps[k].attributions.completeness() for k in (completeness.PILOT, 0))
    tried = a["steps"].to_numpy() > 0
    same_steps = bool((a["steps"].to_numpy()[tried] == b["steps"].to_numpy()[tried]).all())
    same_err = bool(np.allclose(a["relative_error"][tried], b["relative_error"][tried], atol=1e-4, rtol=0))
    verdicts = [reps[k].verdict.sort_values(["layer", "head"])["verdict"].tolist() for k in (completeness.PILOT, 0)]
    print(
        f"examples given IG in both: {int(tried.sum())} of {len(tried)}; the same steps: {same_steps}; "
        f"the same errors (1e-4): {same_err}; the same verdicts: {verdicts[0] == verdicts[1]}"
    )


if __name__ == "__main__":
    main()
