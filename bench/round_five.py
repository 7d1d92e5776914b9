"""The bad inputs of issue 59 (reliability round five), run as a user would run them.

    python bench/round_five.py            # every row shown on the command line; prints each command and its output

Builds each input in a temporary directory (copies of the bundled MiniLM and of zoo
models with a damaged weights file or an absurd or contradicting config; a store captured
from zoo:induction; a hand-edited manifest; a training run whose cards lie), runs the real
``probe`` command there (paths print short) and prints ``$ command``, its exit status and
its last output lines, the temporary directory written as ``.``. The rows of the Python
API (6, 7b, 21) run as ``python -c`` one-liners. Rows 8, 14 and 17 need whole reports:
bench/round_five_reports.py runs them.
docs/reliability.md quotes this output.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from round_four import ROWS, edit_config, minilm_copy, probe, row

API = """
import probe, torch
from probe.tracing.edits import Zero
from probe.tracing.generate import trace_generate
from probe.errors import InputError
ad = probe.load_model("zoo:induction")
for what, call in [
    ("Zero(head=9) on a 4-head layer", lambda: probe.trace(ad, ["a b c"], edit={"blocks.1.attn.hook_z": Zero(head=9)})),
    ("a hook_pattern edit of the wrong shape", lambda: probe.trace(ad, ["a b c"], edit={"blocks.0.attn.hook_pattern": lambda x, c: x[..., :2, :2]})),
    ("Zero(head=-1)", lambda: Zero(head=-1)),
    ("Zero(head=1.9)", lambda: Zero(head=1.9)),
    ("Zero(head=0, rows=[-1])", lambda: Zero(head=0, rows=[-1])),
    ("trace_generate(..., 2.7)", lambda: trace_generate(ad, ["a b c"], 2.7)),
]:
    try:
        call()
        print(f"  {what}: accepted")
    except InputError as exc:
        print(f"  {what}: InputError: {exc}")
"""


def main() -> None:
    d = Path(tempfile.mkdtemp(prefix="round-five-"))
    try:
        row(1, "a model folder whose model.safetensors is truncated to half")
        m = minilm_copy(d, "half")
        w = m / "model.safetensors"
        w.write_bytes(w.read_bytes()[: w.stat().st_size // 2])
        probe(d, "capture", "--model", f"hf:{m.name}", "--text", "The dog barks.", "--out", "o1")

        row(2, "a safetensors file whose header length is absurd")
        m = minilm_copy(d, "absurd")
        w = m / "model.safetensors"
        w.write_bytes((2**60).to_bytes(8, "little") + w.read_bytes()[8:])
        probe(d, "capture", "--model", f"hf:{m.name}", "--text", "The dog barks.", "--out", "o2")

        row(3, "config.json with num_hidden_layers: 1000000000 (refused before any module is built)")
        m = minilm_copy(d, "billion")
        edit_config(m, num_hidden_layers=1_000_000_000)
        probe(d, "capture", "--model", f"hf:{m.name}", "--text", "The dog barks.", "--out", "o3")

        row(4, "the same as a float (1e9)")
        edit_config(m, num_hidden_layers=1e9)
        probe(d, "capture", "--model", f"hf:{m.name}", "--text", "The dog barks.", "--out", "o4")

        row(5, "a store captured from zoo:induction read as minilm's (roles, rollout, flow), and with its own model")
        probe(d, "capture", "--model", "zoo:induction", "--text", "a b c a b c", "--text", "d e f d e", "--out", "ind")
        probe(d, "roles", "--model", "minilm", "--store", "ind", "--out", "r.csv")
        probe(d, "rollout", "--model", "minilm", "--store", "ind", "--out", "ro")
        probe(d, "flow", "--model", "minilm", "--store", "ind", "--out", "fl")
        probe(d, "rollout", "--store", "ind", "--out", "ro-own", keep=1)

        row(6, "edits out of range in the Python API (rows 6, 7b, 21)")
        r = subprocess.run([sys.executable, "-c", API], capture_output=True, text=True, cwd=d)
        print("$ python -c '<probe.trace / Zero / trace_generate calls>'")
        print(r.stdout.rstrip() or r.stderr.strip().splitlines()[-1])

        row(7, "probe patch --group L5H0 on a 2-layer model (refused before any patching)")
        probe(d, "patch", "--model", "zoo:induction", "--text", "a b c a b c", "--group", "L5H0", "--out", "p")

        row(9, "probe report --sections ,")
        probe(d, "report", "--text", "The cat sat.", "--sections", ",", "--out", "rep", keep=1)

        row(10, "probe compare minilm hf:<minilm's weights with another tokenizer>")
        t = minilm_copy(d, "other-tokenizer")
        tj = json.loads((t / "tokenizer.json").read_text())
        tj["normalizer"]["lowercase"] = False
        (t / "tokenizer.json").write_text(json.dumps(tj))
        tc = json.loads((t / "tokenizer_config.json").read_text())
        tc["do_lower_case"] = False  # a cased tokenizer over the same weights
        (t / "tokenizer_config.json").write_text(json.dumps(tc))
        texts = [
            "--text",
            "The cat sat.",
            "--text",
            "A dog ran home.",
            "--text",
            "Birds fly south.",
            "--text",
            "It rained.",
        ]
        probe(d, "compare", "minilm", f"hf:{t.name}", *texts, "--no-necessity", "--out", "cmp", keep=3)

        row(11, "a store manifest edited by hand (n_input 10^30)")
        shutil.copytree(d / "ind", d / "edited")
        mf = json.loads((d / "edited" / "manifest.json").read_text())
        mf["n_input"] = 10**30
        (d / "edited" / "manifest.json").write_text(json.dumps(mf))
        probe(d, "store", "verify", "edited")
        probe(d, "roles", "--store", "edited", "--out", "r11.csv")

        row(12, "probe ablate --objective acuracy")
        probe(d, "ablate", "--objective", "acuracy", "--text", "The cat sat.", "--out", "a12")

        row(13, "probe roles --engine local")
        probe(
            d,
            "roles",
            "--engine",
            "local",
            "--text",
            "The cat sat.",
            "--text",
            "A dog ran.",
            "--out",
            "r13.csv",
            keep=1,
        )

        row(18, "1,000 copies of one sentence with --objective similarity-structure")
        (d / "copies.txt").write_text("The cat sat on the mat.\n" * 1000)
        probe(d, "claims", "--file", "copies.txt", "--objective", "similarity-structure", "--out", "a18")

        row(19, "probe train --steps 10 --stop-after 3")
        probe(d, "train", "zoo:prev-token", "--steps", "10", "--stop-after", "3", "--out", "t19", keep=1)

        row(20, "probe compare over checkpoints whose card gives a negative step, or two with one label")
        probe(d, "train", "zoo:prev-token", "--steps", "4", "--checkpoint-every", "2", "--out", "run", keep=1)
        card = d / "run" / "checkpoints" / "step-000002" / "card.json"
        c = json.loads(card.read_text())
        c["step"] = -7
        card.write_text(json.dumps(c))
        probe(d, "compare", "run", "--out", "c20")
        c["step"] = 2
        card.write_text(json.dumps(c))
        shutil.copytree(d / "run" / "checkpoints" / "step-000002", d / "copy" / "step-000002")
        probe(d, "compare", "run", "copy/step-000002", "--out", "c20b")  # a byte-identical copy, another folder
        probe(d, "compare", "zoo:induction", "zoo:induction", "--text", "a b c a b c", "--out", "c20c", keep=2)

        row(22, "a store captured with --skip-invalid (3 of 5 sentences invalid), then one index line removed")
        bad = ROWS.replace("\t0\troot", "\t9\troot")
        (d / "mixed.conllu").write_text(
            "# text = The dog barks\n"
            + ROWS
            + "\n"
            + ("# text = The dog barks\n" + bad + "\n") * 3
            + "# text = The dog barks\n"
            + ROWS
            + "\n"
        )
        probe(d, "capture", "--conllu", "mixed.conllu", "--skip-invalid", "--out", "skip", keep=1)
        probe(d, "store", "verify", "skip")
        idx = d / "skip" / "index.jsonl"
        idx.write_text(idx.read_text().splitlines()[0] + "\n")
        probe(d, "store", "verify", "skip")

        row(23, "a zoo checkpoint folder whose config says 3 layers over 2 layers of weights")
        from probe.models.zoo import WEIGHTS_DIR

        shutil.copytree(WEIGHTS_DIR / "induction", d / "three")
        edit_config(d / "three", num_hidden_layers=3)
        probe(d, "compare", "three", "zoo:induction", "--out", "c23")
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
