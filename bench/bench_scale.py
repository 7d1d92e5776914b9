"""Benchmark: streaming vs today's memory, and Ray throughput (issue 15).

Part 1, peak RSS (each variant a fresh subprocess of the real CLI; ``os.wait4`` gives
the child's own peak RSS), variants interleaved A B A B:

* ``probe roles`` on texts of ~512 tokens made by joining EWT dev sentences
  (``--roles-texts`` of them, ``--clusters 0``: the clustering keeps whole examples by
  design), with ``--engine local`` (today: every layer of a window of maps) and
  ``--engine stream`` (one layer of one batch);
* ``probe syntax`` on the first ``--syntax-limit`` EWT dev sentences (relations only:
  ``--tree-limit 0 --probe-limit 0``), both engines;

on MiniLM (6 layers × 12 heads) and a random Llama of 24 layers × 4 heads (hidden 64,
saved as an ``hf:`` directory; the MiniLM tokenizer).

Part 2, throughput of the token-level head features over the first ``--ray-sentences``
EWT dev sentences on MiniLM: one process (the streaming path, one torch thread), Ray
with 1 worker and Ray with 2 workers (one torch thread each), interleaved, medians of
``--repeats``. The Ray times include starting the actor pool (each actor loads the
model) but not starting the local cluster, which is printed once.

    python bench/bench_scale.py                  # everything (~10 min on a shared 2-core box)
    python bench/bench_scale.py --skip-ray       # part 1 only
    python bench/bench_scale.py --costs          # per-token costs behind docs/scale.md
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from probe.streaming import feed, stream_layers

ROOT = Path(__file__).resolve().parents[1]
EWT = ROOT.parent / "shared" / "data" / "ud-english-ewt" / "en_ewt-ud-dev.conllu"


def tiny_llama(path: Path, layers: int = 24) -> str:
    import torch
    import transformers as T

    from probe.models.registry import minilm_path

    tok = T.AutoTokenizer.from_pretrained(str(minilm_path()), local_files_only=True)
    torch.manual_seed(0)
    cfg = T.LlamaConfig(hidden_size=64, num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                        intermediate_size=128, vocab_size=len(tok), pad_token_id=0, max_position_embeddings=1024)
    T.LlamaForCausalLM(cfg).save_pretrained(path, safe_serialization=True)
    tok.save_pretrained(path)
    return f"hf:{path}"


def long_texts(n_texts: int, tokens: int = 512) -> list:
    """EWT dev sentences joined until the MiniLM tokenizer counts ~``tokens`` tokens."""
    import transformers as T

    from probe.corpus import read_conllu
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


def peak_rss(cmd: list) -> tuple:
    """(peak RSS MiB of the child, seconds) of one CLI run."""
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(os.environ, OMP_NUM_THREADS="1"))
    _, status, usage = os.wait4(p.pid, 0)
    err = p.stderr.read().decode()
    if status != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{err[-2000:]}")
    return usage.ru_maxrss / 1024, time.perf_counter() - t


def part_memory(args, tmp: Path) -> None:
    llama = tiny_llama(tmp / "llama24")
    texts = tmp / "long.txt"
    lines = long_texts(args.roles_texts)
    texts.write_text("\n".join(lines) + "\n")
    probe = [sys.executable, "-m", "probe"]
    models = {"minilm": "minilm", "llama-24L": llama}
    print(f"peak RSS (MiB) of one CLI process; roles on {len(lines)} texts of ~512 tokens (--batch-size 4, "
          f"--clusters 0), syntax on the first {args.syntax_limit} EWT dev sentences (relations only)")
    print(f"{'model':<10} {'command':<7} {'local MiB':>10} {'stream MiB':>11} {'ratio':>6} {'local s':>8} {'stream s':>9}")
    for name, spec in models.items():
        for command in ("roles", "syntax"):
            res = {"local": [], "stream": []}
            for _ in range(args.repeats):
                for engine in ("local", "stream"):  # interleaved
                    out = tmp / f"{name}-{command}-{engine}"
                    if command == "roles":
                        cmd = probe + ["roles", "-m", spec, "--file", str(texts), "--batch-size", "4", "--clusters", "0",
                                       "--no-figure", "--min-examples", "1", "--engine", engine, "--out", str(out),
                                       "--force", "--quiet"]
                    else:
                        cmd = probe + ["syntax", "-m", spec, "--conllu", str(EWT), "--limit", str(args.syntax_limit),
                                       "--tree-limit", "0", "--probe-limit", "0", "--engine", engine, "--out", str(out),
                                       "--force", "--quiet"]
                    res[engine].append(peak_rss(cmd))
            m = {e: statistics.median(r[0] for r in v) for e, v in res.items()}
            s = {e: statistics.median(r[1] for r in v) for e, v in res.items()}
            print(f"{name:<10} {command:<7} {m['local']:>10.0f} {m['stream']:>11.0f} {m['local'] / m['stream']:>5.1f}× "
                  f"{s['local']:>8.1f} {s['stream']:>9.1f}", flush=True)


def part_ray(args) -> None:
    import torch

    from probe.analyses.patterns.role_features import LayerwiseHeadFeatures
    from probe.app.engine.ray_engine import ensure_ray
    from probe.app.engine.run import run_corpus
    from probe.corpus import read_conllu
    from probe.models import load_model

    torch.set_num_threads(1)
    sents = read_conllu(EWT, limit=args.ray_sentences)
    t = time.perf_counter()
    ensure_ray(None, 2)
    print(f"\nRay local cluster (2 CPUs) started in {time.perf_counter() - t:.1f} s (not counted below)")
    adapter = load_model("minilm")
    variants = {
        "one process": lambda: run_corpus(adapter, sents, [LayerwiseHeadFeatures()], batch_size=16),
        # one torch thread per actor, as the one process has (by default a lone worker would
        # take every CPU of the local cluster)
        "ray 1 worker": lambda: run_corpus("minilm", sents, [LayerwiseHeadFeatures()], engine="ray", workers=1,
                                           block_size=args.block_size, batch_size=16, threads_per_worker=1),
        "ray 2 workers": lambda: run_corpus("minilm", sents, [LayerwiseHeadFeatures()], engine="ray", workers=2,
                                            block_size=args.block_size, batch_size=16, threads_per_worker=1),
    }
    import probe.app.engine.run as engine_run

    inside = {k: [] for k in variants}
    real_merge = engine_run.StreamJob.merge

    def merge_and_time(parts):  # the seconds each block spent inside job.run
        inside[current].append(sum(p.seconds for p in parts))
        return real_merge(parts)

    engine_run.StreamJob.merge = staticmethod(merge_and_time)
    times = {k: [] for k in variants}
    results = {}
    for _ in range(args.repeats):
        for current, fn in variants.items():  # interleaved
            t = time.perf_counter()
            (acc,), _ = fn()
            times[current].append(time.perf_counter() - t)
            results[current] = acc.result()
    base = statistics.median(times["one process"])
    print(f"head features (token level) of {len(sents)} EWT dev sentences on MiniLM, block size {args.block_size}, "
          f"median of {args.repeats}:")
    for k, v in times.items():
        med = statistics.median(v)
        diff = (results[k].select_dtypes("number") - results["one process"].select_dtypes("number")).abs().max().max()
        print(f"  {k:<14} {med:7.1f} s  {len(sents) / med:6.1f} sentences/s  {med / base:5.2f}× one process  "
              f"(inside the job: {statistics.median(inside[k]):.1f} s summed over blocks; max |Δ feature| {diff:.1e})")
    r1, r2 = statistics.median(times["ray 1 worker"]), statistics.median(times["ray 2 workers"])
    print(f"  2 workers vs 1: {r1 / r2:.2f}× the throughput; Ray overhead with 1 worker: {r1 / base:.2f}× "
          f"(target ≤ 1.15×); 1-minute load average {os.getloadavg()[0]:.1f}")


def part_costs(args) -> None:
    """Per-token costs on this CPU (one torch thread, MiniLM, the first 200 EWT dev
    sentences; ablation on 20): the inputs of docs/scale.md's 8B plan. Best of two."""
    import torch

    from probe.analyses.necessity.ablation import sweep_heads
    from probe.analyses.patterns.role_features import LayerwiseHeadFeatures
    from probe.analyses.structure.streaming import LayerwiseRelations
    from probe.corpus import read_conllu
    from probe.models import load_model

    torch.set_num_threads(1)
    sents = read_conllu(EWT, limit=200)
    ad = load_model("minilm")
    ntok = sum(len(x) for x in ad.tokenizer([s.text for s in sents])["input_ids"])

    def forward():
        for i in range(0, len(sents), 16):
            with torch.no_grad():
                ad.model(**ad.batch([ad.encode(s.text, s.spans) for s in sents[i:i + 16]]))

    steps = {
        "forward": forward,
        "stream capture": lambda: stream_layers(ad, sents, lambda b: None, batch_size=16),
        "roles (2 levels)": lambda: stream_layers(ad, sents, feed([LayerwiseHeadFeatures("token"),
                                                                  LayerwiseHeadFeatures("word")]), batch_size=16),
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
    sweep_heads(ad, texts, "embedding-drift", n_boot=10)
    sec = time.perf_counter() - t
    print(f"  ablate 72 heads    {sec:7.2f} s  {sec / n20 * 1e3:7.3f} ms/token (embedding-drift, 20 sentences)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--roles-texts", type=int, default=8)
    ap.add_argument("--syntax-limit", type=int, default=300)
    ap.add_argument("--ray-sentences", type=int, default=600)
    ap.add_argument("--block-size", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--skip-ray", action="store_true")
    ap.add_argument("--costs", action="store_true", help="only the per-token costs behind docs/scale.md")
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} cores, 1-minute load average {os.getloadavg()[0]:.1f}; "
          "numbers are medians of interleaved runs")
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
