"""IG through SmolLM2's LM head at the read position only vs at every position (issue 57).

    OMP_NUM_THREADS=1 python bench/bench_lm_head_positions.py --sentences 8 --steps 16 --repeats 3

``loss:-1`` reads one position per example; the attribution forward
(:meth:`probe.analyses.common.targets.LMLoss.gradient_output`) asks the model for the logits
of the predicting positions only (Hugging Face's ``logits_to_keep``), where the objective's
sweep forward (:meth:`~probe.analyses.common.objective_base.Objective.output`) projects every
position onto the 49,152-token vocabulary. Times
:func:`probe.analyses.explanation.attributions.attribute` (IG, ``--steps``) on the first
``--sentences`` EWT dev sentences of at least 8 words, both ways, interleaved, and prints the
median wall and CPU seconds of ``--repeats`` runs each, their ratio and the largest difference
of the attributions (they must agree). The model: the Q4_1 GGUF dequantised (the quantised
model's heads).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

EWT_DEV = "/work/shared/data/ud-english-ewt/en_ewt-ud-dev.conllu"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sentences", type=int, default=8)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    import numpy as np

    from probe.analyses.common.objective import resolve_objective
    from probe.analyses.common.objective_base import Objective
    from probe.analyses.common.targets import LMLoss
    from probe.analyses.explanation.attributions import attribute
    from probe.inputs.corpus import load_corpus
    from probe.models import load_model

    class EveryPosition(LMLoss):
        """``loss:-1`` with the head on every position (the forward before issue 57)."""

        def gradient_output(self, adapter, input_ids, attention_mask, aux):
            return Objective.gradient_output(self, adapter, input_ids, attention_mask, aux)

    adapter = load_model("smollm2")
    corpus = load_corpus(conllu=EWT_DEV, limit=200)
    spans = corpus.word_spans or [None] * len(corpus)
    picked = [i for i, t in enumerate(corpus.texts) if len(t.split()) >= 8][: args.sentences]
    encs = [adapter.encode(corpus.texts[i], spans[i]) for i in picked]
    kept, _ = resolve_objective("loss:-1", adapter, corpus, use="explain")
    every = EveryPosition(-1)
    print(f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}; load average {os.getloadavg()}")
    print(f"{len(encs)} sentences, {min(map(len, encs))}–{max(map(len, encs))} tokens; IG {args.steps} steps")
    times: dict = {"read positions": [], "every position": []}
    out: dict = {}
    for _ in range(args.repeats):
        for name, obj in (("read positions", kept), ("every position", every)):
            t0, c0 = time.perf_counter(), time.process_time()
            out[name] = attribute(adapter, obj, encs, methods=("ig",), n_steps=args.steps)
            times[name].append((time.perf_counter() - t0, time.process_time() - c0))
    for name, ts in times.items():
        wall, cpu = statistics.median(t[0] for t in ts), statistics.median(t[1] for t in ts)
        print(f"{name:15s} median wall {wall:6.2f} s  CPU {cpu:6.2f} s  (runs: {[round(t[0], 2) for t in ts]})")
    w = [statistics.median(t[0] for t in times[k]) for k in ("read positions", "every position")]
    c = [statistics.median(t[1] for t in times[k]) for k in ("read positions", "every position")]
    print(f"ratio read/every: wall {w[0] / w[1]:.3f}, CPU {c[0] / c[1]:.3f}")
    diff = max(
        float(np.max(np.abs(a.scores["ig"] - b.scores["ig"])))
        for a, b in zip(out["read positions"].examples, out["every position"].examples)
    )
    print(f"largest |IG difference| {diff:.2e}")


if __name__ == "__main__":
    main()
