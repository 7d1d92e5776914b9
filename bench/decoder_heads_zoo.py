"""Print the decoder head taxonomy's scores for a model (default zoo:induction):
``python bench/decoder_heads_zoo.py [--model SPEC] [--tokens 10] [--examples 16]``."""

from __future__ import annotations

import argparse


def main(argv=None) -> int:
    import probe
    from probe.analyses.patterns.decoder_heads import decoder_head_scores

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="zoo:induction")
    ap.add_argument("--tokens", type=int, default=10)
    ap.add_argument("--examples", type=int, default=16)
    args = ap.parse_args(argv)
    result = decoder_head_scores(probe.load_model(args.model), n_tokens=args.tokens, n_examples=args.examples)
    cols = ["layer", "head", "previous_token", "duplicate_token", "induction", "sink"]
    print(result.table[cols].round(3).to_string(index=False))
    for role in ("previous_token", "duplicate_token", "induction", "sink"):
        print(f"{role} heads: {', '.join(f'L{l}H{h}' for l, h in result.heads(role)) or 'none'}")
    print(f"Sink_1^0.3: {result.sink_ratio:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
