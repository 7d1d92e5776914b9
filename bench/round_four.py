"""The bad inputs of issue 41 (reliability round four), run as a user would run them.

    python bench/round_four.py            # every row; prints each command and its output

Builds each input in a temporary directory (copies of the bundled MiniLM with a changed
weight, a config of 8 or 3 layers over 6, an embedding cut to 1,000 rows; CoNLL-U with a
``# text`` the tokens lack, stray spaces, a superscript HEAD; a CR-only text file; stores
with negative maps or a missing index line), runs the real ``probe`` command in that
directory (paths print short) and prints ``$ command``, its exit status and its output
(stdout and stderr, the last lines), the temporary directory written as ``.``.
docs/reliability.md quotes this output.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROWS = (
    "1\tThe\tthe\tDET\t_\t_\t2\tdet\t_\t_\n"
    "2\tdog\tdog\tNOUN\t_\t_\t3\tnsubj\t_\t_\n"
    "3\tbarks\tbark\tVERB\t_\t_\t0\troot\t_\t_\n"
)
TEXTS = ["The cat sat on the mat.", "A dog barked at night.", "Birds fly south.", "It rained.", "Go home."]


def probe(cwd: Path, *args: str, keep: int = 3) -> int:
    """Run ``probe args`` in ``cwd``; print the command, exit status and last output lines."""
    r = subprocess.run(
        [sys.executable, "-m", "probe", *args, "-q"]
        if args[0] not in ("store",)
        else [sys.executable, "-m", "probe", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    shown = " ".join(a if " " not in a and a else repr(a) for a in args)
    lines = [ln.replace(f"{cwd}/", "./") for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
    print(f"$ probe {shown}\n  (exit {r.returncode})")
    for ln in lines[-keep:]:
        print("  " + ln)
    return r.returncode


def minilm_copy(d: Path, name: str) -> Path:
    from probe.models.registry import minilm_path

    out = d / name
    src = minilm_path()
    shutil.copytree(src, out, ignore=shutil.ignore_patterns("onnx", "openvino", "*.onnx", "*.bin", "*.h5", "*.ot"))
    return out


def edit_config(folder: Path, **changes) -> None:
    c = json.loads((folder / "config.json").read_text())
    c.update(changes)
    (folder / "config.json").write_text(json.dumps(c, indent=2))


def edit_weights(folder: Path, fn) -> None:
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    w = load_file(str(path))
    fn(w)
    save_file(w, str(path), metadata={"format": "pt"})


def row(n: int, title: str) -> None:
    print(f"\n## row {n}: {title}")


def main() -> None:
    d = Path(tempfile.mkdtemp(prefix="round-four-"))
    try:
        (d / "five.txt").write_text("\n".join(TEXTS) + "\n")

        row(1, "a capture resumed after the weights changed, or with another --dtype")
        m = minilm_copy(d, "minilm-copy")
        probe(d, "capture", "--model", f"hf:{m.name}", "--file", "five.txt", "--out", "store")

        def nudge(w):
            w["encoder.layer.0.attention.self.query.weight"][0, 0] += 0.5

        edit_weights(m, nudge)
        probe(d, "capture", "--model", f"hf:{m.name}", "--file", "five.txt", "--out", "store")
        probe(d, "capture", "--file", "five.txt", "--out", "minilm-store")
        probe(d, "capture", "--file", "five.txt", "--out", "minilm-store", "--dtype", "bfloat16")

        row(2, "a config whose num_hidden_layers (8, or 3) contradicts the weights (6)")
        for layers in (8, 3):
            c = minilm_copy(d, f"layers-{layers}")
            edit_config(c, num_hidden_layers=layers)
            probe(d, "capture", "--model", f"hf:{c.name}", "--text", "The dog barks.", "--out", f"out-{layers}")
            print(f"  out-{layers} exists: {(d / f'out-{layers}').exists()}")

        row(3, "a tokenizer whose vocabulary is larger than the embedding")
        small = minilm_copy(d, "small-embedding")

        def cut(w):
            w["embeddings.word_embeddings.weight"] = w["embeddings.word_embeddings.weight"][:1000].clone()

        edit_weights(small, cut)
        edit_config(small, vocab_size=1000)
        probe(d, "capture", "--model", f"hf:{small.name}", "--text", "The zebra barks.", "--out", "out-small")
        print(f"  out-small exists: {(d / 'out-small').exists()}")

        row(4, "CoNLL-U whose # text holds words the token lines lack")
        (d / "text.conllu").write_text("# text = The dog barks at the mailman every day\n" + ROWS + "\n")
        probe(d, "capture", "--conllu", "text.conllu", "--out", "out-text")

        row(5, "a text file with CR-only line endings")
        (d / "cr.txt").write_bytes(b"First line.\rSecond line.\rThird line.\r")
        probe(d, "capture", "--file", "cr.txt", "--out", "out-cr")

        row(6, "DEPREL with a stray space ('nsubj ')")
        (d / "space.conllu").write_text("# text = The dog barks\n" + ROWS.replace("\tnsubj\t", "\tnsubj \t") + "\n")
        probe(d, "syntax", "--conllu", "space.conllu", "--out", "out-space")

        row(7, "--heads ,")
        probe(d, "faithfulness", "--text", "The cat sat.", "--heads", ",", "--out", "out-heads")

        row(8, "a store whose maps have negative entries, rows still summing to 1")
        shutil.copytree(d / "minilm-store", d / "negative")

        def negate(w):
            a = w["ex2"]
            a[..., 0] += 0.5
            a[..., 1] -= 0.5

        rec = json.loads((d / "negative" / "index.jsonl").read_text().splitlines()[2])
        from safetensors.torch import load_file, save_file

        tensors = load_file(str(d / "negative" / rec["shard"]))
        negate(tensors)
        save_file(tensors, str(d / "negative" / rec["shard"]), metadata={"format": "probe-attention"})
        probe(d, "store", "verify", "negative")
        probe(d, "roles", "--store", "negative", "--out", "out-roles")

        row(9, "a store with an index line missing")
        shutil.copytree(d / "minilm-store", d / "gap")
        lines = (d / "gap" / "index.jsonl").read_text().splitlines()
        (d / "gap" / "index.jsonl").write_text("\n".join(lines[:3] + lines[4:]) + "\n")
        probe(d, "store", "verify", "gap")
        probe(d, "store", "verify", "minilm-store")

        row(10, "HEAD written as a superscript digit ('²'), with and without --skip-invalid")
        (d / "super.conllu").write_text(ROWS.replace("\t3\tnsubj", "\t²\tnsubj") + "\n" + ROWS + "\n")
        probe(d, "syntax", "--conllu", "super.conllu", "--out", "out-super")
        probe(d, "syntax", "--conllu", "super.conllu", "--skip-invalid", "--out", "out-super2", keep=2)

        row(11, "capture --layers , (then the corrected rerun)")
        probe(d, "capture", "--text", "The cat sat.", "--layers", ",", "--out", "out-layers")
        print(f"  out-layers exists: {(d / 'out-layers').exists()}")
        probe(d, "capture", "--text", "The cat sat.", "--layers", "0,1", "--out", "out-layers")

        row(12, "contradictory or repeated options")
        probe(d, "heatmap", "--store", "minilm-store", "--layer", "5", "--head", "L0H3", "--out", "out-heat")
        probe(d, "rollout", "--text", "The cat sat.", "-p", "0", "-p", "0", "--out", "out-roll")
        probe(
            d,
            "roles",
            "--store",
            "minilm-store",
            "--threshold",
            "positional=0.9",
            "--threshold",
            "positional=0.1",
            "--out",
            "out-thr",
        )

        row(13, "a subword token that spans two words (text rebuilt without spaces)")
        (d / "span.conllu").write_text(
            "1\tI\tI\tPRON\t_\t_\t3\tnsubj\t_\t_\n"
            "2\tcan\tcan\tAUX\t_\t_\t3\taux\t_\tSpaceAfter=No\n"
            "3\tnot\tnot\tPART\t_\t_\t0\troot\t_\t_\n"
            "4\tgo\tgo\tVERB\t_\t_\t3\txcomp\t_\t_\n\n"
        )
        r = subprocess.run(
            [sys.executable, "-m", "probe", "capture", "--conllu", "span.conllu", "--out", "out-span"],
            cwd=d,
            capture_output=True,
            text=True,
        )
        print("$ probe capture --conllu span.conllu --out out-span\n  (exit %d)" % r.returncode)
        for ln in (r.stdout + r.stderr).splitlines():
            if ln.strip():
                print("  " + ln.replace(f"{d}/", "./"))
    finally:
        shutil.rmtree(d)


if __name__ == "__main__":
    main()
