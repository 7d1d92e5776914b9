"""Capture throughput against HF's eager forward with ``output_attentions``, side by
side in one run, and peak memory of capturing a treebank to a store.

    python bench/bench_capture.py [--repeats 9] [--batch 16] [--lengths 32 128 512] [--no-store]

For n = 32, 128, 512 tokens (a batch of different EWT dev passages of that length) it
runs, interleaved (each round every variant once, in a seeded random order; torch 1 thread;
``--repeats`` rounds at n = 512, ×2 at 128 and ×4 at 32, where a run is short and noisier)
and prints the medians and ratios of:
the eager forward returning its attention maps on the already tokenized batch (the
floor; under ``torch.no_grad`` as users run it, and under ``torch.inference_mode`` as the
capture runs its own forward), the same batch through the capture's recording (``hooks``
column: the interface records each layer's weights into the batch's buffer, each example a
view without padding), and ``probe.capture`` end to end from text (one tokenizer call with
offsets, vectorised word alignment, batching, recording). Then the peak RSS of ``probe capture --conllu
EWT-dev`` at two corpus sizes (memory bounded by one batch means the two peaks are close).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
EWT = ROOT.parent / "shared" / "data" / "ud-english-ewt" / "en_ewt-ud-dev.conllu"


def ewt_texts(adapter, n: int, batch: int) -> list[str]:
    """``batch`` different EWT dev passages of about n−2 word pieces each (decoded from
    consecutive chunks of the treebank's token stream); "token token …" without it."""
    if not EWT.exists():
        return [" ".join(["token"] * (n - 2))] * batch
    lines = [x[len("# text = ") :] for x in EWT.read_text(encoding="utf-8").splitlines() if x.startswith("# text = ")]
    ids = adapter.tokenizer(" ".join(lines[:3000]), add_special_tokens=False)["input_ids"]
    return [adapter.tokenizer.decode(ids[k * (n - 2) : (k + 1) * (n - 2)]) for k in range(batch)]


def interleaved(fns: dict, repeats: int, seed: int = 0) -> dict:
    """Median seconds of each function over ``repeats`` rounds after one warm-up round;
    each round runs every function once, in a seeded random order (a fixed order A B C
    would always give C the memory state B left behind)."""
    for fn in fns.values():
        fn()
    times = {k: [] for k in fns}
    rng = random.Random(seed)
    for _ in range(repeats):
        order = list(fns)
        rng.shuffle(order)
        for k in order:
            t = time.perf_counter()
            fns[k]()
            times[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def throughput(repeats: int, batch: int, lengths=(32, 128, 512)):
    from probe.models import load_model
    from probe.runs.capture import _capture_batch, capture

    adapter = load_model("minilm")
    model = adapter.model
    print(
        f"{'n':>5} {'rounds':>6} {'tokens':>7} {'eager+attn s':>13} {'(inf.) s':>10} {'hooks s':>9} {'capture s':>10} "
        f"{'hooks/eager':>12} {'capture/eager':>14} {'capture/inf.':>14}"
    )
    for n in lengths:
        texts = ewt_texts(adapter, n, batch)
        encs = adapter.encode_batch(texts, truncate=True)
        inputs = adapter.batch(encs)

        def eager_forward():
            # the baseline: HF eager attention returning its maps, same batch, no tokenization
            with torch.no_grad():
                model(**inputs, output_attentions=True)

        def eager_inference():
            # the same under inference_mode, as capture runs its forward: the strictest floor
            with torch.inference_mode():
                model(**inputs, output_attentions=True)

        # eager set once, outside the timings (switching costs ~1 ms; capture switches to
        # its own interface implementation per batch, inside its timing, and back)
        model.set_attn_implementation("eager")
        rounds = repeats * (4 if n <= 32 else 2 if n <= 128 else 1)  # short runs are noisier: more rounds
        res = interleaved(
            {
                "eager": eager_forward,
                "eager_inf": eager_inference,
                # the same batch through the capture's recording and per-example views (no tokenization)
                "hooks": lambda: _capture_batch(adapter, encs, None, None, "encoder", False, torch.float32),
                # end to end from text: tokenization with word alignment, batching, recording, views
                "capture": lambda: capture(adapter, texts, batch_size=batch, truncate=True),
            },
            rounds,
        )
        model.set_attn_implementation("sdpa")
        e, ei, h, c = res["eager"], res["eager_inf"], res["hooks"], res["capture"]
        print(
            f"{n:>5} {rounds:>6} {inputs['input_ids'].shape[1]:>7} {e:>13.4f} {ei:>10.4f} {h:>9.4f} {c:>10.4f} "
            f"{h / e:>12.3f} {c / e:>14.3f} {c / ei:>14.3f}"
        )


def peak_rss_of_store_capture(limit: int) -> tuple[float, float]:
    """Peak RSS (MiB) and wall time of `probe capture` on the first `limit` EWT sentences."""
    with tempfile.TemporaryDirectory() as tmp:
        code = (
            "import resource, sys; from probe.app.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, file=sys.stderr)"
        )
        t = time.perf_counter()
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                code,
                "capture",
                "--conllu",
                str(EWT),
                "--limit",
                str(limit),
                "--out",
                os.path.join(tmp, "s"),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        wall = time.perf_counter() - t
        return float(out.stderr.strip().splitlines()[-1]), wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--store-limit", type=int, default=2001)
    ap.add_argument("--lengths", type=int, nargs="+", default=[32, 128, 512], help="token lengths to time")
    ap.add_argument("--no-store", action="store_true", help="skip the peak-RSS runs")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread; {os.cpu_count()} cores, "
        f"1-minute load average {os.getloadavg()[0]:.1f}; medians of interleaved rounds"
    )
    throughput(args.repeats, args.batch, args.lengths)
    print(f"1-minute load average at the end of the throughput runs: {os.getloadavg()[0]:.1f}")
    if args.no_store:
        return
    if not EWT.exists():
        print(f"skipping the store case: {EWT} is missing")
        return
    small, t_small = peak_rss_of_store_capture(100)
    big, t_big = peak_rss_of_store_capture(args.store_limit)
    print(
        f"peak RSS capturing EWT dev to a store: {small:.0f} MiB for 100 sentences ({t_small:.0f} s), "
        f"{big:.0f} MiB for {args.store_limit} ({t_big:.0f} s); ratio {big / small:.2f}"
    )


if __name__ == "__main__":
    main()
