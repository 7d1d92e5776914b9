"""The report's faithfulness section on SmolLM2, alone: seconds, whether it ran, its reference (issue 54).

    OMP_NUM_THREADS=1 python bench/bench_faithfulness_smollm2.py --limit 256

Runs :func:`probe.analyses.explanation.faithfulness.run_faithfulness` the way the report's
section does (:mod:`probe.app.registry.analyses.faithfulness`): the section's report
parameters (``report_params``: IG only, its steps, 1 permutation, the null model), the
examples the report explains at more than 144 heads (16, drawn across the corpus in length
strata), ``loss:-1`` (the report's explain objective for a causal LM), on EWT dev's first
``--limit`` sentences. The permuted heads: the report permutes the heads its ablation
section's screen removed exactly, which this section alone does not have; it takes the
section's fallback, 32 heads drawn at random, each on 16 explained examples. Prints wall
and CPU seconds (``time.process_time``: with ``OMP_NUM_THREADS=1`` one thread, so a loaded
machine stretches the wall time, not the CPU seconds), whether the section ran or why not,
its reference and the IG gate's numbers. The model: the Q4_1 GGUF dequantised (the
quantised model's heads, not the bf16 checkpoint's).

``--pilot 0`` runs the IG gate without its pilot (every example raised at once, as before
the pilot); run it beside the default to compare (``--out`` keeps each run's verdict table):

    OMP_NUM_THREADS=1 python bench/bench_faithfulness_smollm2.py --pilot 0 --out /tmp/f0 &
    OMP_NUM_THREADS=1 python bench/bench_faithfulness_smollm2.py --out /tmp/f4

``--no-padding-bound`` groups the attributed examples as before ``attributions.PADDING`` (up
to 16 of any lengths that fit the memory budget).
"""

from __future__ import annotations

import argparse
import json
import os
import time

EWT_DEV = "/work/shared/data/ud-english-ewt/en_ewt-ud-dev.conllu"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conllu", default=EWT_DEV)
    ap.add_argument("--limit", type=int, default=256)
    ap.add_argument("--pilot", type=int, default=None, help="the IG gate's pilot size (0: none; default: PILOT)")
    ap.add_argument("--out", default=None, help="write the verdict table to OUT/verdict.csv")
    ap.add_argument("--no-padding-bound", action="store_true", help="group attributed examples as before PADDING")
    args = ap.parse_args()

    import numpy as np

    from probe.analyses.common.objective import resolve_objective
    from probe.analyses.explanation import attributions, completeness
    from probe.analyses.explanation.faithfulness import run_faithfulness
    from probe.app.registry.analyses import faithfulness as section
    from probe.app.registry.analyses._shared import head_count
    from probe.app.report.sections import params_with
    from probe.errors import NotApplicable
    from probe.inputs.corpus import fit_to_model, load_corpus
    from probe.models import load_model

    if args.pilot is not None:
        completeness.PILOT = args.pilot
    if args.no_padding_bound:
        attributions.PADDING = None
    adapter = load_model("smollm2")
    corpus = fit_to_model(load_corpus(conllu=args.conllu, limit=args.limit), adapter)
    target, _ = resolve_objective("loss:-1", adapter, corpus, use="explain")
    p = params_with(section.ANALYSIS, {})
    limit, _ = section._explained(p, head_count(adapter))
    m = head_count(adapter)
    pick = np.random.default_rng(int(p["seed"])).choice(m, min(m, section.PERMUTED_AT_SCALE), replace=False)
    heads = [divmod(int(i), int(adapter.n_heads)) for i in sorted(pick)]
    print(f"threads: OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}; load average {os.getloadavg()}")
    print(f"target {target.called}; explained {limit} of {len(corpus)}; steps {p['steps']}; methods {p['methods']}")
    print(f"IG gate pilot: {completeness.PILOT}; padding bound: {attributions.PADDING}")
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        rep = run_faithfulness(
            adapter, corpus, target, methods=list(p["methods"]), attention_methods=list(p["attention_methods"]),
            n_steps=p["steps"], internal_batch_size=p["internal_batch_size"],
            **section._permutations(p, heads, section.PERMUTED_EXAMPLES_AT_SCALE),
            max_examples=limit, seed=p["seed"], null=True,
        )  # fmt: skip
        outcome, info = "ran", rep.info
    except NotApplicable as exc:
        outcome, info = f"skipped: {exc.reason}", {}
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"faithfulness section: {outcome}; wall {wall:.1f} s, CPU {cpu:.1f} s; load average {os.getloadavg()}")
    if info:
        print("reference:", info.get("reference"), "|", info.get("reference_why", ""))
        print("ig_gate:", json.dumps(info.get("ig_gate")))
        null = info.get("null_agreement") or {}
        print("null agreement:", json.dumps({k: null.get(k) for k in ("reference", "n", "tau_max")}))
        print("verdicts:", rep.verdict["verdict"].value_counts().to_dict())
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            rep.verdict.to_csv(os.path.join(args.out, "verdict.csv"), index=False)


if __name__ == "__main__":
    main()
