"""Benchmark: head roles over 500 EWT sentences through the bundled model (issue 4).

Times, side by side in one run, a per-head / per-token Python-loop reference of the core
features (offsets −2…+2, argmax offsets, [CLS]/[SEP]/punctuation mass, entropy) against
the vectorised :class:`probe.analyses.patterns.role_features.HeadFeatureAccumulator`, on the same
examples; then the full ``roles_report`` (both levels, rare words, JS clusters on the
first 100 examples) on the whole store, which the issue wants ≤ 30 s beyond capture on
2 cores. Each measurement runs in a fresh subprocess (peak RSS is per process); the
medians of ``--repeats`` runs are printed with the ratio and the largest difference
between the two implementations' features.

    python bench/bench_roles.py                       # captures 500 EWT dev sentences first
    python bench/bench_roles.py --store /tmp/ewt500   # reuse a store (`probe capture`)

Torch runs with one thread (``BENCH_THREADS``): the per-example tensors are small, and on
a loaded 2-core machine two intra-op threads made the vectorised pass 14× slower.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
EWT = ROOT.parent / "shared" / "data" / "ud-english-ewt" / "en_ewt-ud-dev.conllu"


def reference_features(store, n):
    """Per-head, per-row Python loops: the baseline (core features only)."""
    from probe.analyses.patterns.role_features import is_punctuation

    sums, counts = {}, {}

    def add(key, v):
        sums[key] = sums.get(key, 0.0) + v
        counts[key] = counts.get(key, 0) + 1

    for e, m in enumerate(store):
        if e >= n:
            break
        a = m.attentions.float().tolist()
        special = m.special_mask.tolist()
        punct = [is_punctuation(t) and not s for t, s in zip(m.tokens, special)]
        for li, layer in enumerate(a):
            for h, head in enumerate(layer):
                for i, row in enumerate(head):
                    if special[i]:
                        continue
                    best = max(range(len(row)), key=row.__getitem__)
                    for k in (-2, -1, 0, 1, 2):
                        j = i + k
                        if 0 <= j < len(row) and not special[j]:
                            add((li, h, f"o{k}"), row[j])
                            add((li, h, f"a{k}"), float(best == j))
                    if special[0]:
                        add((li, h, "cls"), row[0])
                    add((li, h, "punct"), sum(x for x, p in zip(row, punct) if p))
                    add((li, h, "entropy"), -sum(x * math.log(x) for x in row if x > 0))
    return {k: sums[k] / counts[k] for k in sums}


def worker(variant, store_dir, n):
    import torch

    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
    from probe.store.directory import Store

    store = Store(store_dir)
    from probe.analyses.patterns.head_clusters import HeadDivergenceAccumulator  # noqa: F401  (imports outside timing)
    from probe.analyses.patterns.role_features import HeadFeatureAccumulator
    from probe.analyses.patterns.roles import roles_report
    import sklearn.cluster
    import sklearn.manifold  # noqa: F401

    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    out = {}
    if variant == "reference":
        ref = reference_features(store, n)
        out["values"] = {f"{k[0]},{k[1]},{k[2]}": v for k, v in ref.items()}
    elif variant == "features":
        acc = HeadFeatureAccumulator(level="token", frequencies={})
        for e, m in enumerate(store):
            if e >= n:
                break
            acc.update(m)
        f = acc.result()
        names = {
            "o-2": "prev2",
            "o-1": "prev",
            "o0": "self",
            "o1": "next",
            "o2": "next2",
            "a-2": "argmax_prev2",
            "a-1": "argmax_prev",
            "a0": "argmax_self",
            "a1": "argmax_next",
            "a2": "argmax_next2",
            "cls": "to_cls",
            "punct": "to_punct",
            "entropy": "entropy",
        }
        out["values"] = {
            f"{r.layer},{r.head},{k}": float(getattr(r, c)) for r in f.itertuples(index=False) for k, c in names.items()
        }
    else:  # the whole report, as `probe roles` runs it
        rep = roles_report(store, n_clusters=8, cluster_examples=100)
        out["counts"] = dict(zip(rep.counts.role, map(int, rep.counts.heads)))
    out["seconds"] = time.perf_counter() - t
    out["peak_rss_mb"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base_rss) / 1024
    print(json.dumps(out))


def run(variant, store_dir, n):
    res = subprocess.run(
        [sys.executable, __file__, "--worker", variant, "--store", str(store_dir), "--n", str(n)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(res.stdout.strip().splitlines()[-1])


def capture_store(out, n):
    import torch

    torch.set_num_threads(2)
    from probe.models import load_model
    from probe.inputs.corpus import load_corpus
    from probe.runs.pipeline import capture_corpus

    t = time.perf_counter()
    store = capture_corpus(load_model("minilm"), load_corpus(conllu=str(EWT), limit=n), out, batch_size=32)
    return store, time.perf_counter() - t


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", default=None, help="an existing store of MiniLM on EWT dev")
    p.add_argument("--n", type=int, default=500, help="examples for the full report")
    p.add_argument("--n-reference", type=int, default=40, help="examples for the loop-vs-vectorised case")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args.worker, args.store, args.n)

    tmp = None
    if args.store is None:
        tmp = tempfile.TemporaryDirectory()
        store, secs = capture_store(Path(tmp.name) / "ewt", args.n)
        store_dir = store.path
        print(f"capture: {len(store)} EWT dev sentences through minilm in {secs:.1f}s (not counted below)")
    else:
        store_dir = Path(args.store)
    try:
        ref = [run("reference", store_dir, args.n_reference) for _ in range(args.repeats)]
        ours = [run("features", store_dir, args.n_reference) for _ in range(args.repeats)]
        t_ref = statistics.median(r["seconds"] for r in ref)
        t_ours = statistics.median(r["seconds"] for r in ours)
        diff = max(abs(ref[0]["values"][k] - ours[0]["values"][k]) for k in ref[0]["values"])
        print(
            f"core features, {args.n_reference} examples: loops {t_ref:.2f}s, vectorised {t_ours:.3f}s, "
            f"ratio {t_ref / t_ours:.0f}x; peak RSS +{statistics.median(r['peak_rss_mb'] for r in ref):.0f} MB vs "
            f"+{statistics.median(r['peak_rss_mb'] for r in ours):.0f} MB; largest feature difference {diff:.2e}"
        )
        full = [run("report", store_dir, args.n) for _ in range(args.repeats)]
        t_full = statistics.median(r["seconds"] for r in full)
        print(
            f"full roles report (token+word features, rare words, JS clusters on 100 examples), "
            f"{args.n} examples: median {t_full:.1f}s over {args.repeats} runs "
            f"(target ≤ 30 s), peak RSS +{statistics.median(r['peak_rss_mb'] for r in full):.0f} MB"
        )
        print("heads per role:", full[0]["counts"])
    finally:
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    main()
