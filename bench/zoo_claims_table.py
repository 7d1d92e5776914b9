"""Expected (from each zoo card) vs reported claims for every zoo head, as a Markdown table.

    python bench/zoo_claims_table.py [--limit 64] [--tasks prev-token induction ...] [--null reinit|permute]

Builds ``probe report --model zoo:<task> --limit N`` for each task into a temporary
directory and reads the claims from its ``summary.json``. The expected claims are the
cards' ground truth (``models/zoo/weights/<task>/card.json``) written as checks; a head
the card says nothing about has no expectation (``—``). Prints, never asserts (the
assertions live in tests/test_claims.py).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

TASKS = ("prev-token", "induction", "constructed", "brackets", "agreement", "translate", "translate-rnn")


def _status(c: dict, kind: str) -> str:
    return (c.get(kind) or {}).get("status", "")


def _statement(c: dict, kind: str) -> str:
    return (c.get(kind) or {}).get("statement", "")


#: per task: head -> (expected claims in words, from the card; check on the head's claims dict and verdict)
EXPECTED = {
    "prev-token": {  # card: a head attending i -> i-1 is required; training concentrates the task in one head
        (0, 1): (
            "pattern previous-token; necessity holds; weights holds",
            lambda c, v: (
                _statement(c, "pattern") == "previous-token"
                and _status(c, "necessity") == "holds"
                and _status(c, "weights") == "holds"
            ),
        ),
        (0, 0): (
            "pattern previous-token; necessity does not hold (output trained to ≈ 0)",
            lambda c, v: _statement(c, "pattern") == "previous-token" and _status(c, "necessity") == "does not hold",
        ),
    },
    "induction": {  # card: previous-token head in layer 0 + induction heads in layer 1 (Olsson et al. 2022)
        (0, 3): (
            "pattern previous-token; necessity holds",
            lambda c, v: _statement(c, "pattern") == "previous-token" and _status(c, "necessity") == "holds",
        ),
        **{
            (1, h): (
                "pattern induction; redundancy: needed as a group of 4",
                lambda c, v: (
                    _statement(c, "pattern") == "induction" and _statement(c, "redundancy") == "needed as a group of 4"
                ),
            )
            for h in range(4)
        },
    },
    "constructed": {  # card ground_truth.heads: 0.0 previous token, 0.1 [CLS]
        (0, 0): ("pattern previous-token", lambda c, v: _statement(c, "pattern") == "previous-token"),
        (0, 1): (
            "pattern special-token on [CLS]",
            lambda c, v: (
                _statement(c, "pattern") == "special-token"
                and ((c.get("pattern") or {}).get("extra") or {}).get("parks_on") == "[CLS]"
            ),
        ),
    },
    "brackets": {  # card: supervised_head [2, 1] trained to attend closer -> matching opener
        (2, 1): (
            "structure holds: match",
            lambda c, v: _status(c, "structure") == "holds" and _statement(c, "structure").startswith("match"),
        ),
    },
}
#: every head of the task: a check that holds for all
EVERY_HEAD = {
    "agreement": (
        "not called meaningless (evidence: subject noun)",
        lambda c, v: not any(w in v for w in ("irrelevant", "meaningless")),
    ),
}


def reported(c: dict) -> str:
    """A head's claims in a few words: ``P previous-token · S — · N holds · R — · W holds · A —``."""
    out = []
    for kind, letter in (
        ("pattern", "P"),
        ("structure", "S"),
        ("necessity", "N"),
        ("redundancy", "R"),
        ("weights", "W"),
        ("attribution", "A"),
    ):
        st = _status(c, kind)
        if st == "holds":
            word = _statement(c, kind) or "holds"
        elif st == "does not hold":
            word = "no" if kind != "pattern" else f"({_statement(c, kind)})"
        else:
            word = "—"
        out.append(f"{letter} {word}")
    return " · ".join(out)


def run(tasks, limit: int, null=None) -> list:
    from probe.app.report import build_report

    rows = []
    for task in tasks:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            build_report(Path(tmp) / "r", model=f"zoo:{task}", limit=limit, null=null)
            seconds = time.perf_counter() - t0
            summary = json.loads((Path(tmp) / "r" / "summary.json").read_text())
        for h in summary["heads"]:
            key = (h["layer"], h["head"])
            claims = h.get("claims") or {}
            exp = EXPECTED.get(task, {}).get(key) or EVERY_HEAD.get(task)
            if exp is None:
                words, agree = "—", ""
            else:
                words, check = exp
                agree = "yes" if check(claims, h["verdict"]) else "**NO**"
            rows.append((task, f"L{key[0]}H{key[1]}", words, reported(claims), agree, h["verdict"]))
        print(f"zoo:{task}: {seconds:.0f}s", flush=True)
    return rows


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=64, help="examples per zoo model (default 64)")
    parser.add_argument("--tasks", nargs="*", default=list(TASKS))
    parser.add_argument(
        "--null", default=None, choices=("reinit", "permute"), help="the claims' null model (default: the toolkit's)"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = run(args.tasks, args.limit, null=args.null)
    print(
        "\n| model | head | expected (card) | reported (P pattern · S structure · N necessity · R redundancy · "
        "W weights · A attribution) | agree |\n| --- | --- | --- | --- | --- |"
    )
    for task, head, words, rep, agree, _ in rows:
        print(f"| zoo:{task} | {head} | {words} | {rep} | {agree} |")
    checked = [r for r in rows if r[4]]
    print(f"\n{sum(r[4] == 'yes' for r in checked)} of {len(checked)} expectations met")


if __name__ == "__main__":
    main()
