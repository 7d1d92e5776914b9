"""Benchmark: streaming vs today's memory, and Ray throughput (issue 15).

Part 1, peak RSS (each variant a fresh subprocess of the real CLI; ``os.wait4`` gives
the child's own peak RSS), variants interleaved A B A B:

* ``probe roles`` on texts of ~512 tokens made by joining EWT dev sentences
  (``--roles-texts`` of them, ``--clusters 0``: the clustering keeps whole examples by
  design), with ``--engine stream`` (one layer of one batch; these commands always stream,
  so they offer no ``local``, which holds every example's maps);
* ``probe syntax`` on the first ``--syntax-limit`` EWT dev sentences (relations only:
  ``--tree-limit 0 --probe-limit 0``), the same;

on MiniLM (6 layers × 12 heads) and a random Llama of 24 layers × 4 heads (hidden 64,
saved as an ``hf:`` directory; the MiniLM tokenizer).

Part 2, throughput of the token-level head features over the first ``--ray-small`` and
``--ray-sentences`` EWT dev sentences on MiniLM: one process (the streaming path, one
torch thread), Ray with 1 worker and Ray with 2 workers (one torch thread each),
interleaved in a seeded random order, medians of ``--repeats``. Every variant starts from
the model's name: the one process loads the model, the Ray runs start the actor pool
(each actor imports torch and loads the model); starting the local cluster is not
counted (printed once; an ``--address`` cluster is already up). Two corpus sizes separate
the fixed cost of a run (start-up) from its marginal cost per sentence (the slope): the
Ray overhead is quoted both ways.

    python bench/bench_scale.py                  # everything (~10 min on a shared 2-core box)
    python bench/bench_scale.py --skip-ray       # part 1 only
    python bench/bench_scale.py --costs          # per-token costs behind docs/scale.md
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from probe.runs.streaming import feed, stream_layers

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import peak_rss
from probe.analyses.common.objective import get_metric

ROOT = Path(__file__).resolve().parents[1]
EWT = ROOT.parent / "shared" / "data" / "ud-english-ewt" / "en_ewt-ud-dev.conllu"


def tiny_llama(path: Path, layers: int = 24) -> str:
    import torch
    import transformers as T

    from probe.models.registry import minilm_path

    tok = T.AutoTokenizer.from_pretrained(str(minilm_path()), local_files_only=True)
    torch.manual_seed(0)
    cfg = T.LlamaConfig(
        hidden_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        vocab_size=len(tok),
        pad_token_id=0,
        max_position_embeddings=1024,
    )
    T.LlamaForCausalLM(cfg).save_pretrained(path, safe_serialization=True)
    tok.save_pretrained(path)
    return f"hf:{path}"


def long_texts(n_texts: int, tokens: int = 512) -> list:
    """EWT dev sentences joined until the MiniLM tokenizer counts ~``tokens`` tokens."""
    import transformers as T

    from probe.inputs.readers import read_conllu
    from probe.models.registry import minilm_path

    tok = T.AutoTokenizer.from_pretrained(str(minilm_path()), local_files_only=True)
    out, cur = [], []
    for s in read_conllu(EWT):
        cur.append(s.text)
        if len(tok(" ".join(cur))["input_ids"]) >= tokens - 40:
            out.append(" ".join(cur))
            cur = []
            if len(out) == n_texts:
                break
    return out


def part_memory(args, tmp: Path) -> None:
    llama = tiny_llama(tmp / "llama24")
    texts = tmp / "long.txt"
    lines = long_texts(args.roles_texts)
    texts.write_text("\n".join(lines) + "\n")
    probe = [sys.executable, "-m", "probe"]
    models = {"minilm": "minilm", "llama-24L": llama}
    print(
        f"peak RSS (MiB) of one CLI process; roles on {len(lines)} texts of ~512 tokens (--batch-size 4, "
        f"--clusters 0), syntax on the first {args.syntax_limit} EWT dev sentences (relations only)"
    )
    print(f"{'model':<10} {'command':<7} {'stream MiB':>11} {'stream s':>9}")
    for name, spec in models.items():
        for command in ("roles", "syntax"):
            res: dict = {"stream": []}
            for _ in range(args.repeats):
                for engine in res:
                    out = tmp / f"{name}-{command}-{engine}"
                    if command == "roles":
                        cmd = probe + [
                            "roles",
                            "-m",
                            spec,
                            "--file",
                            str(texts),
                            "--batch-size",
                            "4",
                            "--clusters",
                            "0",
                            "--no-figure",
                            "--min-examples",
                            "1",
                            "--engine",
                            engine,
                            "--out",
                            str(out),
                            "--force",
                            "--quiet",
                        ]
                    else:
                        cmd = probe + [
                            "syntax",
                            "-m",
                            spec,
                            "--conllu",
                            str(EWT),
                            "--limit",
                            str(args.syntax_limit),
                            "--tree-limit",
                            "0",
                            "--probe-limit",
                            "0",
                            "--engine",
                            engine,
                            "--out",
                            str(out),
                            "--force",
                            "--quiet",
                        ]
                    res[engine].append(peak_rss(cmd, env={"OMP_NUM_THREADS": "1"}))
            m = {e: statistics.median(r[0] for r in v) for e, v in res.items()}
            s = {e: statistics.median(r[1] for r in v) for e, v in res.items()}
            print(f"{name:<10} {command:<7} {m['stream']:>11.0f} {s['stream']:>9.1f}", flush=True)


def part_ray(args) -> None:
    import random

    import torch

    from probe.analyses.patterns.role_features import LayerwiseHeadFeatures
    from probe.app.engine.ray_engine import ensure_ray
    from probe.app.engine.run import run_corpus
    from probe.inputs.readers import read_conllu
    from probe.models import load_model

    torch.set_num_threads(1)
    sizes = (args.ray_small, args.ray_sentences)
    corpora = {n: read_conllu(EWT, limit=n) for n in sizes}
    sizes = tuple(len(corpora[n]) for n in sizes)
    corpora = {len(c): c for c in corpora.values()}
    t = time.perf_counter()
    ray = ensure_ray(None, 2)
    print(
        f"\nRay local cluster ({ray.cluster_resources().get('CPU', 0):.0f} CPUs) started in "
        f"{time.perf_counter() - t:.1f} s (not counted below)"
    )
    load_model("minilm")  # warm the file cache; each run below loads the model itself

    def runner(engine: str, workers: int):
        def run(sents):
            if engine == "local":  # from the model's name to the result, as a Ray worker does
                return run_corpus("minilm", sents, [LayerwiseHeadFeatures()], batch_size=16)
            # one torch thread per actor, as the one process has (by default a lone worker
            # would take every CPU of the local cluster)
            return run_corpus(
                "minilm",
                sents,
                [LayerwiseHeadFeatures()],
                engine="ray",
                workers=workers,
                block_size=args.block_size,
                batch_size=16,
                threads_per_worker=1,
            )

        return run

    variants = {"one process": runner("local", 1), "ray 1 worker": runner("ray", 1), "ray 2 workers": runner("ray", 2)}
    from probe.runs.blocks import StreamJob

    seen: list = []
    real_merge = StreamJob.merge

    def merge_and_keep(parts):  # the parts' timestamps: start-up, blocks, hand-over
        seen[:] = list(parts)
        return real_merge(parts)

    StreamJob.merge = staticmethod(merge_and_keep)
    times = {(k, n): [] for k in variants for n in sizes}
    phases = {k: [] for k in variants}  # at the larger size: (start-up, blocks, hand-over) seconds
    results = {}
    rng = random.Random(0)
    for _ in range(args.repeats):
        order = list(times)
        rng.shuffle(order)  # interleaved, in a seeded random order per round
        for k, n in order:
            t0 = time.time()
            t = time.perf_counter()
            (acc,), _ = variants[k](corpora[n])
            times[k, n].append(time.perf_counter() - t)
            if n == sizes[1]:
                t1 = time.time()
                first, last = min(p.started for p in seen), max(p.ended for p in seen)
                phases[k].append((first - t0, last - first, t1 - last))
                results[k] = acc.result()
    med = {key: statistics.median(v) for key, v in times.items()}
    small, big = sizes
    print(
        f"head features (token level) of EWT dev sentences on MiniLM, one torch thread per process, block size "
        f"{args.block_size or 'auto'}, medians of {args.repeats} interleaved runs at {small} and {big} sentences; "
        f"marginal = (t({big}) − t({small})) / {big - small} sentences, fixed = t({small}) − marginal × {small}:"
    )
    print(
        f"  {'':<14} {'t(' + str(small) + ') s':>9} {'t(' + str(big) + ') s':>10} {'fixed s':>8} "
        f"{'marginal sent/s':>16} {'marginal ×':>11} {'end-to-end ×':>13} {'max |Δ|':>8}"
    )
    marginal = {k: (med[k, big] - med[k, small]) / (big - small) for k in variants}
    for k in variants:
        fixed = med[k, small] - marginal[k] * small
        diff = (results[k].select_dtypes("number") - results["one process"].select_dtypes("number")).abs().max().max()
        print(
            f"  {k:<14} {med[k, small]:9.1f} {med[k, big]:10.1f} {fixed:8.1f} {1 / marginal[k]:16.1f} "
            f"{marginal[k] / marginal['one process']:11.2f} {med[k, big] / med['one process', big]:13.2f} {diff:8.1e}"
        )
    print(
        f"  where the time of a run over {big} sentences went (medians; blocks = first block's start to the "
        "last one's end, the steady state):"
    )
    blocks_base = statistics.median(b for _, b, _ in phases["one process"])
    for k in variants:
        start, blocks, handover = (statistics.median(x[i] for x in phases[k]) for i in range(3))
        print(
            f"  {k:<14} start-up {start:5.1f} s  blocks {blocks:6.1f} s ({blocks / blocks_base:4.2f}× one "
            f"process)  hand-over {handover:4.1f} s"
        )
    print(
        f"  2 workers vs 1 at {big} sentences: {med['ray 1 worker', big] / med['ray 2 workers', big]:.2f}× the "
        f"throughput (marginal: {marginal['ray 1 worker'] / marginal['ray 2 workers']:.2f}×); Ray overhead with 1 "
        f"worker: marginal {marginal['ray 1 worker'] / marginal['one process']:.2f}× (target ≤ 1.15×), end to end "
        f"{med['ray 1 worker', big] / med['one process', big]:.2f}×; 1-minute load average {os.getloadavg()[0]:.1f}"
    )


def part_costs(args) -> None:
    """Per-token costs on this CPU (one torch thread, MiniLM, the first 200 EWT dev
    sentences; ablation on 20): the inputs of docs/scale.md's 8B plan. Best of two."""
    import torch

    from probe.analyses.necessity.ablation import sweep_heads
    from probe.analyses.patterns.role_features import LayerwiseHeadFeatures
    from probe.analyses.structure.streaming import LayerwiseRelations
    from probe.inputs.readers import read_conllu
    from probe.models import load_model

    torch.set_num_threads(1)
    sents = read_conllu(EWT, limit=200)
    ad = load_model("minilm")
    ntok = sum(len(x) for x in ad.tokenizer([s.text for s in sents])["input_ids"])

    def forward():
        for i in range(0, len(sents), 16):
            with torch.no_grad():
                ad.model(**ad.batch([ad.encode(s.text, s.spans) for s in sents[i : i + 16]]))

    steps = {
        "forward": forward,
        "stream capture": lambda: stream_layers(ad, sents, lambda b: None, batch_size=16),
        "roles (2 levels)": lambda: stream_layers(
            ad, sents, feed([LayerwiseHeadFeatures("token"), LayerwiseHeadFeatures("word")]), batch_size=16
        ),
        "syntax": lambda: stream_layers(ad, sents, feed([LayerwiseRelations()]), batch_size=16),
    }
    best = {}
    for _ in range(2):
        for name, fn in steps.items():  # interleaved
            t = time.perf_counter()
            fn()
            best[name] = min(best.get(name, 1e9), time.perf_counter() - t)
    print(f"\nper-token cost on this CPU (1 thread, MiniLM, {len(sents)} EWT dev sentences, {ntok} tokens):")
    for name, sec in best.items():
        print(f"  {name:<18} {sec:7.2f} s  {sec / ntok * 1e3:7.3f} ms/token")
    texts = [s.text for s in sents[:20]]
    n20 = sum(len(x) for x in ad.tokenizer(texts)["input_ids"])
    t = time.perf_counter()
    sweep_heads(ad, texts, get_metric("embedding-drift", ad), n_boot=10)
    sec = time.perf_counter() - t
    print(f"  ablate 72 heads    {sec:7.2f} s  {sec / n20 * 1e3:7.3f} ms/token (embedding-drift, 20 sentences)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--roles-texts", type=int, default=8)
    ap.add_argument("--syntax-limit", type=int, default=300)
    ap.add_argument("--ray-sentences", type=int, default=2001, help="the larger corpus (EWT dev has 2,001)")
    ap.add_argument("--ray-small", type=int, default=500, help="the smaller corpus (marginal cost and fixed cost)")
    ap.add_argument("--block-size", type=int, default=None, help="items per Ray block (default: automatic)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--skip-ray", action="store_true")
    ap.add_argument("--costs", action="store_true", help="only the per-token costs behind docs/scale.md")
    args = ap.parse_args()
    print(
        f"machine: {os.cpu_count()} cores, 1-minute load average {os.getloadavg()[0]:.1f}; "
        "numbers are medians of interleaved runs"
    )
    if args.costs:
        part_costs(args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        if not args.skip_memory:
            part_memory(args, Path(tmp))
        if not args.skip_ray:
            part_ray(args)


if __name__ == "__main__":
    main()
