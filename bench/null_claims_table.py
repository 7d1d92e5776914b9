"""Random models must not get the claims: heads per claim that hold on models that learned
nothing, as a Markdown table (the matrix in docs/claims.md).

    python bench/null_claims_table.py [--limit 16] [--kinds bert bert-mlm ...] [--zoo prev-token ...]

Tiny random transformers checkpoints built from a config (2 layers × 4 heads, the
tokenizer of the bundled model; nothing downloaded) and the zoo models re-initialised
(:func:`probe.analyses.claims.null_model.reinitialised`, seed 1: a different draw from the
null model the claims are calibrated on, seed 0), each on the bundled sample sentences (the
zoo models on their own examples); every claim computed by
:func:`probe.analyses.claims.heads.head_claims` as the report does. Prints, never asserts
(tests/test_null_claims.py asserts the tiny models' rows); a claim holds on at most the
FDR share of the heads (q = 0.05: 0 of 8) when the calibration works.
"""

from __future__ import annotations

import argparse
import time

KINDS = ("bert", "bert-mlm", "bert-classifier", "gpt2", "llama-gqa", "t5")
ZOO = ("prev-token", "induction", "constructed", "brackets", "agreement")


def tiny_random(kind: str, tokenizer, seed: int = 0):
    """A ModelAdapter of a random 2-layer, 4-head model of ``kind`` (:data:`KINDS`)."""
    import torch
    import transformers as T_

    from probe.models import ModelAdapter

    common = dict(vocab_size=len(tokenizer), pad_token_id=0)
    bert = T_.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, **common)
    spec = {
        "bert": ("bert", T_.BertModel, bert),
        "bert-mlm": ("bert", T_.BertForMaskedLM, bert),
        "bert-classifier": ("bert", T_.BertForSequenceClassification, bert),
        "gpt2": (
            "gpt2",
            T_.GPT2LMHeadModel,
            T_.GPT2Config(n_embd=32, n_layer=2, n_head=4, bos_token_id=101, eos_token_id=102, **common),
        ),
        "llama-gqa": (
            "llama",
            T_.LlamaForCausalLM,
            T_.LlamaConfig(
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=2,
                intermediate_size=64,
                bos_token_id=101,
                eos_token_id=102,
                **common,
            ),
        ),
        "t5": (
            "t5",
            T_.T5ForConditionalGeneration,
            T_.T5Config(
                d_model=32,
                d_kv=8,
                d_ff=64,
                num_layers=2,
                num_heads=4,
                decoder_start_token_id=0,
                eos_token_id=102,
                **common,
            ),
        ),
    }
    family, cls, cfg = spec[kind]
    torch.manual_seed(seed)
    return ModelAdapter(name=f"random-{kind}", model=cls(cfg).eval(), tokenizer=tokenizer, family=family)


def random_claims(adapter, corpus, **kw):
    """:class:`probe.analyses.claims.heads.HeadClaims` of ``adapter`` on ``corpus``."""
    from probe.analyses.claims.heads import head_claims
    from probe.runs.capture import capture

    spans = list(corpus.word_spans) if corpus.word_spans else None
    maps = capture(adapter, list(corpus.texts), word_spans=spans)
    from probe.analyses.common.objective import resolve_objective

    kw.setdefault("objective", resolve_objective("auto", adapter, corpus)[0])  # the run's, resolved once
    return head_claims(adapter, corpus, maps, **kw)


def main() -> None:
    import transformers as T_

    from probe.analyses.claims.protocol import claim_kinds
    from probe.analyses.claims.null_model import reinitialised
    from probe.app.report.bundled import sample_corpus
    from probe.models import ModelAdapter, load_model
    from probe.models.registry import minilm_path
    from probe.inputs.corpus import fit_to_model, load_corpus

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=16, help="sentences / zoo examples per model")
    ap.add_argument("--kinds", nargs="*", default=list(KINDS))
    ap.add_argument("--zoo", nargs="*", default=list(ZOO))
    ap.add_argument(
        "--null",
        default=None,
        choices=("reinit", "permute"),
        help="the null the claims are calibrated on (default: the toolkit's)",
    )
    args = ap.parse_args()
    tok = T_.AutoTokenizer.from_pretrained(str(minilm_path()), local_files_only=True)
    rows = []
    for kind in args.kinds:
        t = time.time()
        hc = random_claims(tiny_random(kind, tok), sample_corpus(limit=args.limit), null=args.null)
        rows.append((f"random {kind}", hc, time.time() - t))
    for task in args.zoo:
        t = time.time()
        trained = load_model(f"zoo:{task}")
        adapter = ModelAdapter(
            name=f"zoo:{task} re-initialised",
            model=reinitialised(trained.model, seed=1),
            tokenizer=trained.tokenizer,
            family=trained.family,
            card=dict(trained.card),
        )
        corpus = fit_to_model(load_corpus(model=f"zoo:{task}", limit=args.limit), trained)
        rows.append((f"zoo:{task} re-initialised", random_claims(adapter, corpus, null=args.null), time.time() - t))
    CLAIMS = claim_kinds()
    print("| model | objective | heads | " + " | ".join(CLAIMS) + " | seconds |")
    print("| --- | --- | --- | " + " | ".join("---" for _ in CLAIMS) + " | --- |")
    for name, hc, sec in rows:
        counts = hc.counts()
        n = len(hc.claims)
        cells = []
        for c in CLAIMS:
            tested = n - int(counts.loc[c, "not tested"])
            cells.append(f"{int(counts.loc[c, 'holds'])} of {tested}" if tested else "not tested")
        print(f"| {name} | {hc.objective.get('objective', '—')} | {n} | " + " | ".join(cells) + f" | {sec:.0f} |")


if __name__ == "__main__":
    main()
