"""Blank-out on SmolLM2 from the clean prefix's key/value cache against captum's whole forwards (issue 54).

    OMP_NUM_THREADS=1 python bench/bench_causal_occlusion.py

Faithfulness's reference on SmolLM2 is blank-out (integrated gradients miss 1% completeness
there), on the model and on its null model: a forward per token of each explained sentence.
:mod:`probe.analyses.explanation.causal_occlusion` runs each occlusion only from the
occluded token to the position the target reads, on the clean prefix's cache. This runs
``loss:-1`` blank-out of ``--sentences`` EWT dev sentences (spread over the lengths of the
first ``--limit``) both ways in one process, alternating ``--repeats`` times, and prints
each way's CPU seconds (median), their ratio, the largest difference of the scores and the
token-forwards each way would run (:func:`~probe.analyses.explanation.causal_occlusion.occlusion_cost`).
"""

from __future__ import annotations

import argparse
import statistics
import time

EWT_DEV = "/work/shared/data/ud-english-ewt/en_ewt-ud-dev.conllu"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conllu", default=EWT_DEV)
    ap.add_argument("--limit", type=int, default=256)
    ap.add_argument("--sentences", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    import numpy as np
    import torch

    from probe.analyses.common.targets import LMLoss
    from probe.analyses.explanation import causal_occlusion as C
    from probe.analyses.explanation.attributions import attribute
    from probe.inputs.corpus import load_corpus
    from probe.models import load_model

    adapter = load_model("smollm2")
    texts = sorted(load_corpus(conllu=args.conllu, limit=args.limit).texts, key=len)
    picks = np.linspace(len(texts) // 4, len(texts) - 1, args.sentences).astype(int)
    encs = [adapter.encode(texts[i]) for i in picks]
    objective = LMLoss(-1)
    applies = C.applies

    def run(prefix: bool) -> tuple:
        C.applies = applies if prefix else (lambda *a: False)
        try:
            started = time.process_time()
            got = attribute(adapter, objective, encs, methods=("blank_out",))
            return time.process_time() - started, [e.scores["blank_out"] for e in got.examples]
        finally:
            C.applies = applies

    times: dict = {"prefix cache": [], "captum": []}
    scores: dict = {}
    for _ in range(args.repeats):
        for name, prefix in (("prefix cache", True), ("captum", False)):
            seconds, scores[name] = run(prefix)
            times[name].append(seconds)
    diff = max(float(np.abs(a - b).max()) for a, b in zip(scores["prefix cache"], scores["captum"]))
    top = max(float(np.abs(b).max()) for b in scores["captum"])
    lengths = [len(e) for e in encs]
    here = sum(C.occlusion_cost(n)[0] for n in lengths)
    whole = sum(C.occlusion_cost(n)[1] for n in lengths)
    fast, slow = statistics.median(times["prefix cache"]), statistics.median(times["captum"])
    print(f"SmolLM2 (Q4_1 dequantised), loss:-1 blank-out of {len(encs)} sentences of {lengths} tokens, "
          f"torch threads {torch.get_num_threads()}, {args.repeats} alternating rounds")  # fmt: skip
    print(f"  prefix cache: {fast:.1f} s CPU (median of {times['prefix cache']})")
    print(f"  captum FeatureAblation: {slow:.1f} s CPU (median of {times['captum']})")
    print(f"  ratio {fast / slow:.2f}; token-forwards {here} vs {whole} ({here / whole:.2f})")
    print(f"  largest |difference| of the scores {diff:.2e} (largest |score| {top:.3g})")


if __name__ == "__main__":
    main()
