"""Issue 59's report rows (8, 14, 17), run as a user would run them: whole reports, so minutes.

    python bench/round_five_reports.py          # rows 8, 14, 15, 16 and 17; prints each command and what it said
    python bench/round_five_reports.py 15,16    # only those rows

Row 8: ``probe report --file one.txt`` (one sentence, minilm, every section): each section's
line, the warnings, the exit status. Row 17: ``probe report --file two.txt --causal
sequential`` and the same on one sentence: the claims per kind from summary.json. Row 14: a
report on a saved 2-layer BERT (``hf:<folder>``) killed as its faithfulness section starts,
the folder's weights changed in place, the same command run again, then a clean run, and
``bench/compare_summaries.py`` between them; then killed again and rerun with only
``--explained-examples`` changed (which sections are resumed). Rows 15 and 16: a file written
into ``--out`` while ``probe compare`` runs; a second report on one ``--out``. The temporary directory is
printed as ``.``. docs/reliability.md quotes this output; bench/round_five.py has the other rows.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from round_four import row

PROBE = [sys.executable, "-m", "probe"]
BENCH = Path(__file__).resolve().parent


def shown(cwd: Path, text: str) -> str:
    return text.replace(f"{cwd}/", "./").replace(str(cwd), ".")


def report(cwd: Path, *args: str, keep=lambda line: True, kill_at: str = "") -> subprocess.CompletedProcess:
    """Run ``probe report args`` in ``cwd`` and print the command, its exit status and the
    lines ``keep`` selects (progress bars left out); with ``kill_at``, SIGKILL it when a
    stderr line holds that text (a report killed mid-run)."""
    print(f"$ probe report {' '.join(args)}" + (f"   # killed once '{kill_at}' is printed" if kill_at else ""))
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [*PROBE, "report", *args], cwd=cwd, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    lines = []
    if kill_at:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if kill_at in line:
                os.kill(proc.pid, signal.SIGKILL)
                break
        proc.wait()
        out, err = "", ""
    else:
        out, err = proc.communicate()
    said = [
        ln for ln in (out + "".join(lines) + err).splitlines() if ln.strip() and "it/s]" not in ln and "%|" not in ln
    ]
    print(f"  (exit {proc.returncode})")
    for ln in said:
        if keep(ln):
            print("  " + shown(cwd, ln))
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def claim_counts(folder: Path) -> None:
    """The claims per kind of a report's summary.json, the statuses that occur."""
    counts = json.loads((folder / "summary.json").read_text())["claims"]["counts"]
    for kind, by in counts.items():
        print(f"  {kind:<12} " + ", ".join(f"{s} {n}" for s, n in by.items() if n))


def tiny_bert(folder: Path, seed: int) -> None:
    """A saved 2-layer BERT (hidden 16, 2 heads) with MiniLM's tokenizer, weights from ``seed``."""
    import torch
    import transformers as T

    from probe.models.registry import minilm_path

    tok = T.AutoTokenizer.from_pretrained(minilm_path())
    cfg = T.BertConfig(
        hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=16,
        vocab_size=len(tok), architectures=["BertModel"],
    )  # fmt: skip
    torch.manual_seed(seed)
    T.BertModel(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)


def row14(d: Path) -> None:
    row(14, "a report killed, the weights of its hf: folder changed in place, the same command run again")
    tiny_bert(d / "tiny", seed=0)
    (d / "four.txt").write_text(
        "The cat sat on the mat.\nA dog ran in the park.\nBirds fly south.\nIt rained all day.\n"
    )
    args = ["--model", "hf:tiny", "--file", "four.txt", "--sections", "ablation,importance,faithfulness,claims"]
    sections = lambda ln: ln.startswith("[") or "WARNING probe.app.report" in ln or ln.startswith(("Error", "wrote"))  # noqa: E731
    report(d, *args, "--out", "r", kill_at="faithfulness …")
    print("$ python -c '<tiny_bert(folder, seed=1)>'   # the folder's weights changed in place")
    tiny_bert(d / "tiny", seed=1)
    report(d, *args, "--out", "r", keep=sections)
    report(d, *args, "--out", "clean", keep=lambda ln: ln.startswith("wrote"))
    compare(d, "r", "clean")
    print("# only an option changed: --explained-examples 2 (faithfulness' option; claims read faithfulness)")
    report(d, *args, "--out", "o", kill_at="faithfulness …")
    report(d, *args, "--explained-examples", "2", "--out", "o", keep=sections)
    report(d, *args, "--explained-examples", "2", "--out", "o-clean", keep=lambda ln: ln.startswith("wrote"))
    compare(d, "o", "o-clean")


def compare(d: Path, a: str, b: str) -> None:
    r = subprocess.run(
        [sys.executable, str(BENCH / "compare_summaries.py"), a, b], cwd=d, capture_output=True, text=True
    )
    print(f"$ python bench/compare_summaries.py {a} {b}\n  (exit {r.returncode})")
    print("  " + (r.stdout.strip().splitlines() or [r.stderr.strip()])[-1])


def row15(d: Path) -> None:
    import time

    row(15, "probe compare <models> --out c15 while another program writes a file into c15")
    args = ["compare", "zoo:induction", "zoo:induction", "--text", "a b c a b c", "--out", "c15", "-q"]
    print(f"$ probe {' '.join(args)}   # c15/theirs.txt written by another program once the run is under way")
    proc = subprocess.Popen([*PROBE, *args], cwd=d, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    while not list(d.glob(".c15.tmp-*")) and proc.poll() is None:  # --out checked, its result being built
        time.sleep(0.2)
    (d / "c15").mkdir()
    (d / "c15" / "theirs.txt").write_text("another program's")
    out, _ = proc.communicate()
    print(f"  (exit {proc.returncode})")
    for ln in out.strip().splitlines()[-1:]:
        print("  " + shown(d, ln))
    print(f"$ cat c15/theirs.txt\n  {(d / 'c15' / 'theirs.txt').read_text()}")


def row16(d: Path) -> None:
    row(16, "two probe report runs on one --out, the second with --no-resume")
    args = ["report", "--file", "two.txt", "--out", "r16"]
    print(f"$ probe {' '.join(args)} &   # the first, left running")
    first = subprocess.Popen([*PROBE, *args], cwd=d, text=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert first.stderr is not None
    for line in first.stderr:
        if line.startswith("["):  # its lock is taken and its first section running
            break
    second = subprocess.run([*PROBE, *args, "--no-resume"], cwd=d, text=True, capture_output=True)
    print(f"$ probe {' '.join(args)} --no-resume\n  (exit {second.returncode})")
    print("  " + shown(d, (second.stdout + second.stderr).strip().splitlines()[-1]))
    first.kill()
    first.wait()


ROWS = {"8": None, "14": row14, "15": row15, "16": row16, "17": None}


def rows_8_17(d: Path, which: set) -> None:
    if "8" in which:
        row(8, "probe report --file one.txt (one sentence, every section)")
        report(d, "--file", "one.txt", "--out", "one")
    if "17" in which:
        row(17, "probe report --file two.txt --causal sequential (and one sentence): the claims per kind")
        for name in ("two", "one"):
            report(d, "--file", f"{name}.txt", "--causal", "sequential", "--out", f"{name}-seq", "-q")
            claim_counts(d / f"{name}-seq")


def main() -> None:
    which = set(sys.argv[1].split(",")) if len(sys.argv) > 1 else set(ROWS)  # e.g. 15,16
    d = Path(tempfile.mkdtemp(prefix="round-five-reports-"))
    try:
        (d / "one.txt").write_text("The cat sat on the mat.\n")
        (d / "two.txt").write_text("The cat sat on the mat.\nA dog ran in the park.\n")
        rows_8_17(d, which)
        for name in sorted(which & {"14", "15", "16"}, key=int):
            ROWS[name](d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
