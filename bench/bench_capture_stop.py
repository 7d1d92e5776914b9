"""A capture that ends after its last layer against one that runs the whole model, side by side.

    python bench/bench_capture_stop.py --model smollm2 --limit 256 --repeats 3
    python bench/bench_capture_stop.py --model minilm --limit 2001 --repeats 3

``probe.capture`` reads attention maps and discards the model's output; its forward now ends
after the last captured layer (``AttentionCapture(stop=True)``: no final norm, no LM head; a
``--layers`` subset ends after its last layer). This runs, alternating in one process on the
same model, ``capture`` of the first ``--limit`` EWT dev sentences as it runs now and with the
stop switched off (``supports_restart`` patched to ``False`` in ``probe.runs.capture``: the
whole forward), ``--repeats`` rounds, and prints each round's seconds, the medians, their ratio and
the largest difference of the maps (they must be equal: the layers that run are the same).
SmolLM2's LM head projects every token onto 49,152 words (28 M multiply-adds a token against
about 3.5 M for each of its 30 layers); MiniLM (a ``BertModel``) has only its pooler after the
last layer.
"""

from __future__ import annotations

import argparse
import statistics
import time
from unittest import mock

EWT_DEV = "/work/shared/data/ud-english-ewt/en_ewt-ud-dev.conllu"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--conllu", default=EWT_DEV)
    ap.add_argument("--limit", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=16)
    args = ap.parse_args()

    import torch

    from probe.inputs.corpus import fit_to_model, load_corpus
    from probe.models import load_model
    from probe.runs.capture import capture

    adapter = load_model(args.model)
    corpus = fit_to_model(load_corpus(conllu=args.conllu, limit=args.limit), adapter)
    texts, spans = list(corpus.texts), list(corpus.word_spans) if corpus.word_spans else None

    def run(stop: bool) -> tuple:
        t = time.perf_counter()
        if stop:
            maps = capture(adapter, texts, word_spans=spans, batch_size=args.batch_size)
        else:
            with mock.patch("probe.runs.capture.supports_restart", lambda *a, **k: False):
                maps = capture(adapter, texts, word_spans=spans, batch_size=args.batch_size)
        return time.perf_counter() - t, maps

    run(True)  # warm-up
    times: dict = {True: [], False: []}
    diff = 0.0
    for r in range(args.repeats):
        for stop in (True, False) if r % 2 == 0 else (False, True):
            s, maps = run(stop)
            times[stop].append(s)
            if stop:
                kept = maps
            else:
                other = maps
        diff = max(diff, max(float((a.attentions - b.attentions).abs().max()) for a, b in zip(kept, other)))
        print(f"round {r + 1}: stops {times[True][-1]:.2f} s, whole forward {times[False][-1]:.2f} s", flush=True)
    stop_s, whole_s = statistics.median(times[True]), statistics.median(times[False])
    print(
        f"{args.model}, {len(texts)} sentences, torch threads {torch.get_num_threads()}: capture that stops "
        f"{stop_s:.2f} s, whole forward {whole_s:.2f} s (medians of {args.repeats}): {stop_s / whole_s:.2f}× "
        f"the time; maps differ by at most {diff:.1e}"
    )


if __name__ == "__main__":
    main()
