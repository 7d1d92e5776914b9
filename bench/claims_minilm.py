"""Claims of the bundled sentence model: heads per claim and status, and the 5 most
necessary heads (effect in the objective's units, 95% interval, count).

    python bench/claims_minilm.py                      # the bundled sample (24 sentences)
    python bench/claims_minilm.py --conllu ../shared/data/ud-english-ewt/en_ewt-ud-dev.conllu --sections claims
        # pattern and structure on every sentence; necessity, weights and redundancy on the report's
        # model-run cap (the first 128; --max-model-examples N, 0 for all)

Builds the report's faithfulness and claims sections (the default objective: the
similarity structure of the corpus under mean pooling) and prints Markdown. Prints,
never asserts (tests/test_objective.py and tests/test_similarity_claims.py assert).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--conllu", default=None)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--sections", default="faithfulness,claims", help="report sections (claims alone: no attribution)")
    ap.add_argument(
        "--max-model-examples", type=int, default=None, help="examples the model-running claims use (0: all)"
    )
    ap.add_argument(
        "--null", default=None, choices=("reinit", "permute"), help="the claims' null model (default: the toolkit's)"
    )
    args = ap.parse_args()
    from probe.app.report.build import build_report

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r"
        t0 = time.perf_counter()
        build_report(
            out,
            model="minilm",
            conllu=args.conllu,
            limit=args.limit,
            sections=args.sections.split(","),
            max_model_examples=args.max_model_examples,
            null=args.null,
        )
        seconds = time.perf_counter() - t0
        s = json.loads((out / "summary.json").read_text())
    claims = next(x for x in s["sections"] if x["name"] == "claims")
    obj = claims["summary"].get("objective", {})
    print(
        f"corpus: {s['corpus']['source']}, {s['corpus']['examples']} sentences; objective: {obj.get('described')}; "
        f"{seconds:.0f} s\n"
    )
    runs = {k: v for k, v in (s.get("settings") or {}).items() if "model-run" in str(k)}
    if runs:
        print(f"{runs}\n")
    counts = s["claims"]["counts"]
    from probe.analyses.claims.claim import STATUSES as statuses

    print("| claim | " + " | ".join(statuses) + " |\n| --- |" + " --- |" * len(statuses))
    for kind, row in counts.items():
        print(f"| {kind} | " + " | ".join(str(row.get(st, 0)) for st in statuses) + " |")
    nec0 = s["heads"][0]["claims"]["necessity"].get("extra") or {}
    if "null_source" in nec0:
        print(
            f"\nnecessity's null: {nec0['null_source']}; its per-example 95% head quantile, mean "
            f"{nec0['null_quantile']:.4f}; its largest head mean {nec0['null_max']:.4f}; the floor {nec0['min_effect']:g}"
        )
    heads = sorted(s["heads"], key=lambda h: -(h["claims"]["necessity"].get("effect") or 0))[:5]
    print(
        "\n| head | necessity | harm (1 − ρ) | 95% CI | n | nearest neighbour changed | zero-ablation | "
        "smallest detectable (if not) |\n| --- | --- | --- | --- | --- | --- | --- | --- |"
    )
    for h in heads:
        c = h["claims"]["necessity"]
        x = c["extra"]
        print(
            f"| L{h['layer']}H{h['head']} | {c['status']} | {c['effect']:.4f} | [{c['ci_low']:.4f}, "
            f"{c['ci_high']:.4f}] | {c['count']} | {x.get('neighbour_changed', float('nan')):.0%} | "
            f"{(x.get('zero_harm') or {}).get('effect', float('nan')):.4f} | "
            f"{'' if c['evidence'].get('detectable') is None else format(c['evidence']['detectable'], '.4f')} |"
        )
    confirmed = [h for h in s["heads"] if (h["claims"]["necessity"].get("extra") or {}).get("baselines")]
    if confirmed:  # a necessary head confirmed (or not) under each baseline (issue 58)
        modes = list(confirmed[0]["claims"]["necessity"]["extra"]["baselines"])
        print("\n| head | necessity | " + " | ".join(modes) + " |\n| --- | --- |" + " --- |" * len(modes))
        for h in confirmed:
            c = h["claims"]["necessity"]
            side = c["extra"]["baselines"]
            print(
                f"| L{h['layer']}H{h['head']} | {c['status']} | "
                + " | ".join(
                    f"{side[m]['effect']:.4f} ({'holds' if side[m]['holds'] else 'does not hold'})" for m in modes
                )
                + " |"
            )
    necessity_notes = [n for n in claims.get("notes", []) if "baseline" in n]
    for n in necessity_notes:
        print("\n" + n)
    if "faithfulness" not in args.sections:
        return
    att = [h["claims"]["attribution"] for h in s["heads"]]
    best = max(att, key=lambda c: c.get("effect") or -1)
    print(
        f"\nattribution: {sum(c['status'] != 'not tested' for c in att)} of {len(att)} heads tested; "
        f"largest mean τ {best.get('effect'):.3f}"
    )
    faith = next(x for x in s["sections"] if x["name"] == "faithfulness")
    print("faithfulness notes: " + " | ".join(faith["notes"]))


if __name__ == "__main__":
    main()
