"""What the load-time padding check costs, and what it says per model type.

    python bench/bench_padding_check.py [--repeats 200] [--types convbert nystromformer ...]

1. The cost on MiniLM (the default model): :func:`probe.models.batching.padding_check`, a
   walk over the modules that finds no convolution, so no forward runs (median of
   ``--repeats`` calls), beside the time ``load_model("minilm")`` takes.
2. The cost where a convolution is found and the leak is measured (two forwards: a
   right-padded batch of a 3- and a 6-token row, and the short row alone): ConvBERT and
   Nyströmformer at their default (base) size, random weights from the config.
3. The verdict for each model type of ``--types``, built tiny as the coverage sweep builds it
   (``bench/coverage_sweep.py``): ``adapter.batching``, how many convolutions over positions
   it has and, where it is one length per batch, the card's reason.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

#: text model types whose modeling code holds a convolution (grep nn.Conv1d / nn.Conv2d in
#: transformers' models/), the masked-attention BERT for contrast
TYPES = [
    "bert",
    "convbert",
    "nystromformer",
    "squeezebert",
    "deberta-v2",
    "yoso",
    "lfm2",
    "lfm2_moe",
    "jamba",
    "bamba",
    "falcon_h1",
    "granitemoehybrid",
    "nemotron_h",
    "zamba",
    "zamba2",
    "qwen3_next",
    "recurrent_gemma",
    "olmo_hybrid",
]


def _median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=200)
    p.add_argument("--types", nargs="*", default=TYPES)
    p.add_argument("--no-base", action="store_true", help="skip the base-size ConvBERT / Nyströmformer timing")
    args = p.parse_args(argv)
    import transformers as T

    from probe.models import ModelAdapter, load_model
    from probe.models.architectures import family_for
    from probe.models.batching import padding_check, sequence_convolutions

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, transformers {T.__version__}")
    t = time.perf_counter()
    minilm = load_model("minilm")
    load_s = time.perf_counter() - t
    ms = _median_ms(lambda: padding_check(minilm.model, minilm.pad_token_id), args.repeats)
    print(
        f"minilm: load_model {load_s:.2f} s; padding_check median {ms:.3f} ms ({args.repeats} calls): {minilm.batching}"
    )
    if not args.no_base:
        for name, cls, cfg in (
            ("convbert (base, random)", T.ConvBertModel, T.ConvBertConfig()),
            ("nystromformer (base, random)", T.NystromformerModel, T.NystromformerConfig()),
        ):
            torch.manual_seed(0)
            model = cls(cfg).eval()
            padding_check(model, 0)  # warm-up: the first forward allocates
            ms = _median_ms(lambda model=model: padding_check(model, 0), 5)
            print(f"{name}: padding_check median {ms:.1f} ms (5 calls): {padding_check(model, 0)}")
    import coverage_sweep as sweep

    tok = sweep._tokenizer()
    for model_type in args.types:
        try:
            model = sweep.build_model(model_type, tok)
            adapter = ModelAdapter(name=f"tiny-{model_type}", model=model, tokenizer=tok, family=family_for(model_type))
        except Exception as e:  # a type the sweep cannot build or the toolkit refuses: say so and go on
            print(f"{model_type}: not checked ({type(e).__name__}: {str(e).splitlines()[0][:100]})")
            continue
        convs = len(sequence_convolutions(model))
        why = f" — {adapter.card['batching']}" if "batching" in adapter.card else ""
        print(f"{model_type}: {adapter.batching}; convolutions over positions: {convs}{why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
