"""Capture throughput against a plain forward, side by side in one run, and peak memory
of capturing a treebank to a store.

    python bench/bench_capture.py [--repeats 5] [--batch 16] [--store-limit 2001]

Prints, for n = 32, 128, 512 tokens: median seconds of a plain eager forward, a plain
SDPA forward, the same batch through the capture hooks and per-example trimming, and
`probe.capture` end to end from text (adds tokenization with word alignment), with ratios; then
the peak RSS of `probe capture --conllu EWT-dev` at two corpus sizes (memory bounded by
one batch means the two peaks are close).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
EWT = ROOT.parent / "shared" / "data" / "ud-english-ewt" / "en_ewt-ud-dev.conllu"


def median_time(fn, repeats):
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def throughput(repeats: int, batch: int):
    from probe.models import load_model
    from probe.capture import _capture_batch, capture

    adapter = load_model("minilm")
    model = adapter.model
    print(f"{'n':>5} {'eager s':>9} {'sdpa s':>9} {'hooks s':>9} {'capture s':>10} "
          f"{'hooks/eager':>12} {'capture/eager':>14} {'capture/sdpa':>13}")
    for n in (32, 128, 512):
        words = " ".join(["token"] * (n - 2))  # n tokens with [CLS]/[SEP]
        texts = [words] * batch
        encs = [adapter.encode(t) for t in texts]
        inputs = adapter.batch(encs)

        def plain(impl):
            def run():
                model.set_attn_implementation(impl)
                with torch.no_grad():
                    model(**inputs)
            return run

        eager = median_time(plain("eager"), repeats)
        sdpa = median_time(plain("sdpa"), repeats)
        model.set_attn_implementation("sdpa")
        # the same batch through the capture hooks and per-example trimming (no tokenization)
        hooks = median_time(lambda: _capture_batch(adapter, encs, None, None, "encoder", False, torch.float32),
                            repeats)
        # end to end from text: tokenization with word alignment, batching, hooks, trimming
        cap = median_time(lambda: capture(adapter, texts, batch_size=batch), repeats)
        print(f"{n:>5} {eager:>9.4f} {sdpa:>9.4f} {hooks:>9.4f} {cap:>10.4f} "
              f"{hooks / eager:>12.2f} {cap / eager:>14.2f} {cap / sdpa:>13.2f}")


def peak_rss_of_store_capture(limit: int) -> tuple[float, float]:
    """Peak RSS (MiB) and wall time of `probe capture` on the first `limit` EWT sentences."""
    with tempfile.TemporaryDirectory() as tmp:
        code = ("import resource, sys; from probe.app.cli import main\n"
                "try:\n    main()\nexcept SystemExit:\n    pass\n"
                "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, file=sys.stderr)")
        t = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", code, "capture", "--conllu", str(EWT), "--limit", str(limit),
                              "--out", os.path.join(tmp, "s")], capture_output=True, text=True, check=True)
        wall = time.perf_counter() - t
        return float(out.stderr.strip().splitlines()[-1]), wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--store-limit", type=int, default=2001)
    args = ap.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    throughput(args.repeats, args.batch)
    if not EWT.exists():
        print(f"skipping the store case: {EWT} is missing")
        return
    small, t_small = peak_rss_of_store_capture(100)
    big, t_big = peak_rss_of_store_capture(args.store_limit)
    print(f"peak RSS capturing EWT dev to a store: {small:.0f} MiB for 100 sentences ({t_small:.0f} s), "
          f"{big:.0f} MiB for {args.store_limit} ({t_big:.0f} s); ratio {big / small:.2f}")


if __name__ == "__main__":
    main()
