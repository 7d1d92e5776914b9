"""The tour of the command line, generated from the registry and the commands.

    python -m probe.app.cli.tour            # print the table

The documentation site's CLI page (docs/cli.md) shows it, rendered when the site is built
(docs/hooks.py); tests/test_cli_contract.py checks that and runs every example in it.
"""

from __future__ import annotations

START = "<!-- tour: generated from the registry by `python -m probe.app.cli.tour` -->"
END = "<!-- end of tour -->"

#: the commands that are not analyses: (name, what it does, an example that runs in seconds)
OTHER_COMMANDS = [
    ("models", "the models it can open: `minilm` (default), the zoo with its cards, `hf:<id or path>`", "probe models"),
    (
        "capture",
        "capture a corpus to a store (ragged, sharded safetensors, resumable after a kill)",
        "probe capture --model zoo:prev-token --limit 8 --out out/store",
    ),
    (
        "store",
        "`probe store verify DIR` lists what is damaged in a store; `probe store repair DIR` drops "
        "damaged examples, a torn index tail and orphan shards (a capture then redoes them)",
        "probe store verify out/store",
    ),
    (
        "heatmap",
        "one head on one stored example, with token labels (CSV beside it)",
        "probe heatmap --store out/store --example 0 --head L0H0 --out out/heatmap",
    ),
    (
        "report",
        "the per-head report: index grid, a page per head, head view, summary.json, report.md; "
        "its sections are the analyses marked *section*",
        "probe report --limit 4 --sections syntax,roles --out out/report",
    ),
    (
        "train",
        "retrain a zoo model from scratch (zoo:constructed is set by hand: instant); "
        "`--checkpoint-every N` saves the run's checkpoints for `probe compare`",
        "probe train zoo:constructed --out out/constructed",
    ),
    (
        "evaluate",
        "reproduce a zoo model's held-out accuracy from its card",
        "probe evaluate --model zoo:constructed --limit 50 --json",
    ),
    (
        "compare",
        "heads across checkpoints: per head the change of every score, of the pattern (JSD) and of "
        "necessity, paired by example with FDR; a training run's scores against the step",
        "probe compare zoo:constructed out/constructed --limit 8 --out out/compare",
    ),
]


def rows() -> list:
    """``(command, what, example, section)`` for every command, analyses in registry order."""
    from probe.app.registry import registered

    out = [(name, what, example, False) for name, what, example in OTHER_COMMANDS]
    for a in registered():
        if a.command_name:
            out.append((a.command_name, a.title, a.example, bool(a.section)))
    return out


def examples() -> list:
    """Every example command line of the tour, in order."""
    return [r[2] for r in rows() if r[2]]


def table() -> str:
    lines = [START, "", "| command | what it does | example (runs in seconds) |", "| --- | --- | --- |"]
    for name, what, example, section in rows():
        what = what.replace("|", "\\|") + (" *(section)*" if section else "")
        lines.append(f"| `probe {name}` | {what} | `{example}` |")
    lines += ["", END]
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
