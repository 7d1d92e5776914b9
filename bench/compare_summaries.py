"""Compare two reports' summary.json, fact by fact: ``python bench/compare_summaries.py A B``.

Prints, per section, whether its status, summary (floats to 1e-6) and notes agree, and counts the per-head
facts (every section's per-head columns, and every field of every head's claims) that differ (floats beyond 1e-6, relative or
absolute; other values when unequal) and the verdicts that differ. Exit status 1 when any
fact differs. Used for ``probe report --engine local`` against ``--engine ray``
(docs/scale.md).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv) -> int:
    from probe.app.report.compare import close, fact_count, fact_differences

    a, b = (json.loads((Path(p) / "summary.json").read_text(encoding="utf-8")) for p in argv[1:3])
    for sa, sb in zip(a["sections"], b["sections"]):
        print(
            f"{sa['name']:<14} {sa['status']}/{sb['status']}  "
            f"summary {'same (1e-6)' if close(sa['summary'], sb['summary']) else 'DIFFERS'}"
            f"  notes {'same' if sa['notes'] == sb['notes'] else 'DIFFER'}"
        )
    diff = fact_differences(a, b)
    n, n_claims = fact_count(a)
    verdicts = sum(ha["verdict"] != hb["verdict"] for ha, hb in zip(a["heads"], b["heads"]))
    for row in diff[:20]:
        print("differs:", *row)
    print(
        f"{n} per-head facts and {n_claims} claim fields compared, {len(diff)} differ (1e-6); "
        f"{verdicts} of {len(a['heads'])} verdicts differ"
    )
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
