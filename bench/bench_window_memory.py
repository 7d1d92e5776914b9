"""Peak memory of `probe capture` on many long inputs: is it bounded by the byte-bounded
sort window (issue 19), whatever the number of texts?

    python bench/bench_window_memory.py [--texts 192] [--words 480]

Writes ``--texts`` lines of ``--words`` common one-token words each (482 tokens with
[CLS]/[SEP] on MiniLM: one example's maps are 6 × 12 × 482² × 4 B = 64 MiB), runs the real
CLI on a quarter of them and on all of them, each in a fresh process, and prints the
child's peak RSS (``os.wait4``) and wall time. Memory bounded by the window means the two
peaks are close; the stores (about 12 GB for 192 texts) are deleted afterwards.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import peak_rss

WORDS = "the cat sat on a mat and dog ran to big red house in new old day way".split()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--texts", type=int, default=192)
    ap.add_argument("--words", type=int, default=480)
    args = ap.parse_args()
    rng = random.Random(0)
    print(f"{os.cpu_count()} cores, 1-minute load average {os.getloadavg()[0]:.1f}")
    print(f"{'texts':>6} {'words':>6} {'peak RSS MiB':>13} {'seconds':>8}")
    for n in (max(1, args.texts // 4), args.texts):
        with tempfile.TemporaryDirectory() as tmp:
            text = Path(tmp) / "long.txt"
            text.write_text(
                "\n".join(" ".join(rng.choice(WORDS) for _ in range(args.words)) for _ in range(n)) + "\n",
                encoding="utf-8",
            )
            rss, sec = peak_rss(
                [
                    sys.executable,
                    "-m",
                    "probe",
                    "capture",
                    "--file",
                    str(text),
                    "--out",
                    str(Path(tmp) / "store"),
                    "--quiet",
                ]
            )
            print(f"{n:>6} {args.words:>6} {rss:>13.0f} {sec:>8.1f}", flush=True)


if __name__ == "__main__":
    main()
