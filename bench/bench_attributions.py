"""Integrated gradients: ``probe.analyses.explanation.attributions.attribute`` vs a direct captum call.

Both explain the same target (a probe logit on the bundled model's mean-pooled
embedding) on the same sentences with 50 Gauss–Legendre steps and the same
``internal_batch_size``, the direct call on the whole padded batch as a captum user
would write it. Ours sorts examples by length before batching (less padding). Prints
median wall times over ``--repeats`` runs, their ratio, and the peak resident memory of
each variant measured in a fresh subprocess (so one variant's peak does not hide the
other's), for two ``internal_batch_size`` values to show that it bounds memory.

    python bench/bench_attributions.py --sentences 64 --max-tokens 64 --repeats 3

Reference numbers are in the README (machine, threads and date noted there).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

EWT = "../shared/data/ud-english-ewt/en_ewt-ud-dev.conllu"


def _setup(n: int, max_tokens: int):
    import torch

    from probe.analyses.common.targets import ProbeLogit
    from probe.models import load_model
    from probe.inputs.readers import read_conllu

    adapter = load_model("minilm")
    try:
        sents = read_conllu(EWT)
        texts = [(s.text, s.spans) for s in sents]
    except ValueError:
        texts = [(f"sentence number {i} is about the old house near the river and its keys", None) for i in range(n)]
    encs = []
    for t, sp in texts:
        e = adapter.encode(t, sp, truncate=True)
        if 4 <= len(e) <= max_tokens:
            encs.append(e)
        if len(encs) == n:
            break
    torch.manual_seed(0)
    target = ProbeLogit(torch.nn.Linear(adapter.config.hidden_size, 1).requires_grad_(False))
    return adapter, target, encs


def run_one(variant: str, n: int, max_tokens: int, ibs: int, steps: int) -> float:

    from probe.analyses.explanation.attributions import _special_batch, attribute, baseline_ids
    from probe.analyses.common.targets import scalar_function

    adapter, target, encs = _setup(n, max_tokens)
    t0 = time.perf_counter()
    if variant == "ours":
        attribute(
            adapter, target, encs, methods=["ig"], n_steps=steps, internal_batch_size=ibs, batch_size=min(16, ibs)
        )
    else:  # a direct captum call on the whole padded batch
        from captum.attr import LayerIntegratedGradients

        b = adapter.batch(encs)
        ids, mask = b["input_ids"], b["attention_mask"]
        aux = target.aux(adapter, ids, mask)
        base = baseline_ids(adapter, ids, mask, _special_batch(encs, ids.shape[1], ids.device))
        lig = LayerIntegratedGradients(scalar_function(adapter, target), adapter.embeddings())
        lig.attribute(
            ids,
            baselines=base,
            additional_forward_args=(mask, aux),
            n_steps=steps,
            internal_batch_size=max(ibs, len(encs)),
            return_convergence_delta=True,
        )
    return time.perf_counter() - t0


def _subprocess(variant, args, ibs):
    code = (
        "import json, resource, sys; sys.path.insert(0, 'bench'); import bench_attributions as b; "
        f"t = b.run_one({variant!r}, {args.sentences}, {args.max_tokens}, {ibs}, {args.steps}); "
        "print(json.dumps({'seconds': t, 'peak_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sentences", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--internal-batch-sizes", default="64,256")
    args = ap.parse_args()
    for ibs in [int(x) for x in args.internal_batch_sizes.split(",")]:
        res = {"ours": [], "captum": []}
        for _ in range(args.repeats):
            for v in ("captum", "ours"):
                res[v].append(_subprocess(v, args, ibs))
        med = {v: statistics.median(r["seconds"] for r in rs) for v, rs in res.items()}
        peak = {v: max(r["peak_mb"] for r in rs) for v, rs in res.items()}
        print(
            f"internal_batch_size={ibs}: captum direct {med['captum']:.2f} s (peak {peak['captum']:.0f} MB), "
            f"ours {med['ours']:.2f} s (peak {peak['ours']:.0f} MB); ours/captum time ratio "
            f"{med['ours'] / med['captum']:.2f} (median of {args.repeats})"
        )


if __name__ == "__main__":
    main()
