"""Bad-input battery: run every `probe` command on bad or odd inputs and count outcomes.

    python bench/bad_inputs.py                # the whole battery, 2 cases at a time
    python bench/bad_inputs.py --jobs 4 --timeout 120 --csv results.csv
    python bench/bad_inputs.py --only capture,heatmap --show

Inputs: empty, whitespace-only, over-length, non-UTF-8, binary text; empty, binary and
malformed CoNLL-U (wrong columns, HEAD out of range, a cycle, a word heading itself,
duplicate ids, two roots); unknown and missing models, a model directory asking for custom
code; out-of-range layers, heads, examples and counts; exotic Unicode (combining marks,
zero-width joiner, control characters, line separators); corrupted stores (truncated,
empty, random or missing shard, manifest that is a list or not JSON, garbage index line,
index line without id, shard outside the store, index naming a tensor the shard lacks);
unwritable ``--out`` (``/proc/x``, ``a_file/sub``); round three: byte-order marks, an index
line naming another example's tensor, NaN/inf option values, repeated heads and layers, an
``hf:`` path to a file, a config contradicting its weights, ``--out`` through a symbolic
link, a 1,000,000-character word; round five (issue 59): a truncated weights file, an absurd
safetensors header length, a billion layers (as an integer and as a float), a store read
with another model, ``--group`` past the model, ``--sections ,``, hand-edited manifest
counts, a misspelt objective, ``--engine local`` on roles, copies of one sentence for the
similarity structure, a checkpoint card with a negative step, a zoo folder whose config
contradicts its weights.

Each case runs in its own process with a timeout and is classified as:

* ``traceback`` — a Python traceback reached the user;
* ``hang`` — still running at the timeout (killed);
* ``exit0_on_refused`` — a bad input that should be refused exited 0 (a silent wrong result);
* ``bug`` — exit status 3, the command line's "unexpected error" (probe.errors): an input the
  toolkit should have refused as bad input (exit 1) reached code that failed on it;
* ``unclear_error`` — a non-zero exit without an ``Error:`` line;
* ``clean_error`` — a non-zero exit whose message is one ``Error: …`` line;
* ``ok`` — exit 0 on an odd but valid input (exotic Unicode), which may also be refused.

Prints the counts (and the failing cases); exits 1 when any case is a traceback, hang,
exit-0-on-refused, bug or unclear error. No assertions on timing: it is a user's check.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

REFUSE, ANY = "refuse", "any"
LONG = " ".join(["word"] * 700)
EXOTIC = {
    "combining": "Cafe\u0301 au lait n\u0303o",
    "zwj": "The \u200d family \U0001f469\u200d\U0001f4bb codes",
    "control": "A bell \x07 and an escape \x1b[31m here",
    "separators": "one\u2028two\u2029three \x85 four",
    "only_marks": "\u0301\u0302\u0303",
    "rtl": "\u202eevil\u202c text",
}
GOOD_ROWS = [
    "1\tThe\tthe\tDET\t_\t_\t2\tdet\t_\t_",
    "2\tdog\tdog\tNOUN\t_\t_\t3\tnsubj\t_\t_",
    "3\tbarks\tbark\tVERB\t_\t_\t0\troot\t_\t_",
]


def _rows(col: int, row: int, value: str) -> list:
    rows = [r.split("\t") for r in GOOD_ROWS]
    rows[row][col] = value
    return ["\t".join(r) for r in rows]


_MISMATCH = """
import json, sys, torch, transformers as T
from pathlib import Path
from probe.models.registry import minilm_path
d = Path(sys.argv[1])
tok = T.AutoTokenizer.from_pretrained(str(minilm_path()))
cfg = T.LlamaConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                    intermediate_size=64, vocab_size=len(tok), pad_token_id=0)
torch.manual_seed(0)
T.LlamaForCausalLM(cfg).save_pretrained(d)
tok.save_pretrained(d)
c = json.loads((d / "config.json").read_text())
c.update(num_attention_heads=8, num_key_value_heads=4)
(d / "config.json").write_text(json.dumps(c))
"""


def make_fixtures(d: Path, probe: list) -> dict:
    """Bad files, corrupted stores and a good store under ``d``; returns name -> path."""
    f = {}

    def write(name, data):
        p = d / name
        p.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
        f[name] = str(p)

    write("empty.txt", "")
    write("blank.txt", "  \n\t\n \n")
    write("latin1.txt", "caf\xe9 cr\xe8me\n".encode("latin-1"))
    write("binary.txt", bytes(range(256)) * 4)
    write("long.txt", LONG + "\n")
    write("exotic.txt", "\n".join(EXOTIC.values()) + "\n")
    write("empty.conllu", "")
    write("binary.conllu", os.urandom(2048))
    write(
        "ninecols.conllu",
        "# text = The dog\n1\tThe\tthe\tDET\t_\t_\t2\tdet\t_\n2\tdog\tdog\tNOUN\t_\t_\t0\troot\t_\t_\n\n",
    )
    for name, rows in {
        "head99": _rows(6, 0, "99"),
        "cycle": _rows(6, 2, "1"),
        "selfhead": _rows(6, 1, "2"),
        "dupid": _rows(0, 1, "1"),
        "tworoots": _rows(6, 1, "0"),
    }.items():
        write(f"{name}.conllu", "# text = The dog barks\n" + "\n".join(rows) + "\n\n")
    write(
        "good.conllu",
        "".join(f"# sent_id = g{k}\n# text = The dog barks\n" + "\n".join(GOOD_ROWS) + "\n\n" for k in range(12)),
    )
    write("a_file", "not a directory\n")
    write("bom.txt", "\ufeffThe cat sat.\nA dog barked.\n")  # round three (issue 28): read, BOM removed
    write("bom.conllu", "\ufeff# text = The dog barks\n" + "\n".join(GOOD_ROWS) + "\n\n")
    write("huge_word.txt", "x" * 1_000_000 + "\n")
    # a tiny Llama whose config says 8 heads over 4-head weights
    mismatch = d / "mismatch_model"
    subprocess.run([sys.executable, "-c", _MISMATCH, str(mismatch)], check=True, capture_output=True, timeout=600)
    f["mismatch_model"] = str(mismatch)
    (d / "real_out").mkdir()
    (d / "link_out").symlink_to(d / "real_out")
    f["link_out"] = str(d / "link_out")
    # a model directory that asks for custom code (it must never run)
    evil = d / "evil_model"
    evil.mkdir()
    (evil / "config.json").write_text(json.dumps({"model_type": "bert", "auto_map": {"AutoModel": "evil.Evil"}}))
    (evil / "evil.py").write_text(f"open({str(d / 'EVIL_RAN')!r}, 'w').write('ran')\n")
    f["evil_model"] = str(evil)
    # a good store, then corrupted copies
    good = d / "store"
    subprocess.run(
        probe + ["capture", "--text", "The cat sat.", "--text", "A dog barked.", "--text", "Go!", "--out", str(good)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    f["store"] = str(good)
    shard = "shard-00000.safetensors"

    def corrupt(name, fn):
        c = d / f"store_{name}"
        shutil.copytree(good, c)
        fn(c)
        f[f"store_{name}"] = str(c)

    def index_edit(c, edit):
        lines = (c / "index.jsonl").read_text().splitlines()
        lines = edit(lines)
        (c / "index.jsonl").write_text("\n".join(lines) + "\n")

    def rec_edit(key, value):
        def edit(lines):
            rec = json.loads(lines[0])
            if value is None:
                rec.pop(key)
            else:
                rec[key] = value
            if key == "key":  # consistent record (checksum redone) naming a tensor the shard lacks
                from probe.store.schema import record_crc

                rec["crc"] = record_crc(rec)
            return [json.dumps(rec)] + lines[1:]

        return edit

    corrupt("truncated_shard", lambda c: (c / shard).write_bytes((c / shard).read_bytes()[:200]))
    corrupt("empty_shard", lambda c: (c / shard).write_bytes(b""))
    corrupt("random_shard", lambda c: (c / shard).write_bytes(os.urandom((c / shard).stat().st_size)))
    corrupt("missing_shard", lambda c: (c / shard).unlink())
    corrupt("manifest_list", lambda c: (c / "manifest.json").write_text("[1, 2]"))
    corrupt("manifest_garbage", lambda c: (c / "manifest.json").write_text("{garbage"))
    corrupt("index_garbage", lambda c: index_edit(c, lambda lines: lines[:1] + ["garbage"] + lines[1:]))
    corrupt("index_no_id", lambda c: index_edit(c, rec_edit("id", None)))
    corrupt("index_escape", lambda c: index_edit(c, rec_edit("shard", "../store/" + shard)))
    corrupt("index_no_tensor", lambda c: index_edit(c, rec_edit("key", "ex99")))

    def steal(lines):  # an extra line (fresh id, valid checksum) naming example 0's tensor
        from probe.store.schema import record_crc

        rec = json.loads(lines[0])
        rec["id"] = 6
        rec["crc"] = record_crc(rec)
        return lines + [json.dumps(rec)]

    corrupt("index_steals_tensor", lambda c: index_edit(c, steal))
    _round_five_fixtures(d, probe, f, corrupt)
    _gguf_fixtures(d, f)
    return f


def _minilm_copy(d: Path, name: str) -> Path:
    from probe.models.registry import minilm_path

    out = d / name
    shutil.copytree(
        minilm_path(), out, ignore=shutil.ignore_patterns("onnx", "openvino", "*.onnx", "*.bin", "*.h5", "*.ot")
    )
    return out


def _edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def _gguf_fixtures(d: Path, f: dict) -> None:
    """Issue 54's GGUF inputs: a text file, an empty file, a GGUF cut after its first MiB (the
    wheel's SmolLM2 file where it is installed, else no truncated case)."""
    (d / "not_a_model.gguf").write_text("this is not a GGUF file\n")
    (d / "empty.gguf").write_bytes(b"")
    f.update(gguf_text=str(d / "not_a_model.gguf"), gguf_empty=str(d / "empty.gguf"), gguf_dir=str(d))
    from probe.errors import InputError
    from probe.models.gguf_load import smollm2_gguf

    try:
        whole = smollm2_gguf()
    except InputError:  # the wheel is not installed: no truncated case (the battery lists the cases it ran)
        return
    with open(whole, "rb") as src:
        (d / "truncated.gguf").write_bytes(src.read(1 << 20))
    f["gguf_truncated"] = str(d / "truncated.gguf")


def _round_five_fixtures(d: Path, probe: list, f: dict, corrupt) -> None:
    """Issue 59's inputs: damaged weights, absurd configs, a foreign store, lying cards."""
    from probe.models.zoo import WEIGHTS_DIR

    half = _minilm_copy(d, "r5_half")
    w = half / "model.safetensors"
    w.write_bytes(w.read_bytes()[: w.stat().st_size // 2])
    absurd = _minilm_copy(d, "r5_absurd")
    w = absurd / "model.safetensors"
    w.write_bytes((2**60).to_bytes(8, "little") + w.read_bytes()[8:])
    billion = _minilm_copy(d, "r5_billion")
    _edit_json(billion / "config.json", num_hidden_layers=1_000_000_000)
    floated = _minilm_copy(d, "r5_float")
    _edit_json(floated / "config.json", num_hidden_layers=1e9)
    three = d / "r5_three"
    shutil.copytree(WEIGHTS_DIR / "induction", three)
    _edit_json(three / "config.json", num_hidden_layers=3)
    f.update(
        r5_half=str(half), r5_absurd=str(absurd), r5_billion=str(billion), r5_float=str(floated), r5_three=str(three)
    )
    ind = d / "r5_ind_store"
    subprocess.run(
        probe + ["capture", "--model", "zoo:induction", "--text", "a b c a b c", "--text", "d e f", "--out", str(ind)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    f["r5_ind_store"] = str(ind)
    for name, value in {"huge": 10**30, "negative": -3, "string": "2"}.items():
        corrupt(f"r5_n_input_{name}", lambda c, v=value: _edit_json(c / "manifest.json", n_input=v))
    (d / "copies.txt").write_text("The cat sat on the mat.\n" * 50)
    f["copies.txt"] = str(d / "copies.txt")
    run = d / "r5_run"
    subprocess.run(
        probe + ["train", "zoo:prev-token", "--steps", "4", "--checkpoint-every", "2", "--out", str(run)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    _edit_json(run / "checkpoints" / "step-000002" / "card.json", step=-7)
    f["r5_run"] = str(run)


def cases(f: dict, out: str) -> list:
    """(name, argv after `probe`, expectation)."""
    o = lambda tag: f"{out}/{tag}"  # noqa: E731 - a fresh --out per case
    c = []

    def add(name, args, expect=REFUSE):
        c.append((name, [str(a) for a in args], expect))

    bad_text = {
        "empty_text": ["--text", ""],
        "blank_text": ["--text", "   "],
        "long_text": ["--text", LONG],
        "empty_file": ["--file", f["empty.txt"]],
        "blank_file": ["--file", f["blank.txt"]],
        "latin1_file": ["--file", f["latin1.txt"]],
        "binary_file": ["--file", f["binary.txt"]],
        "long_file": ["--file", f["long.txt"]],
        "missing_file": ["--file", "/no/such/file.txt"],
    }
    bad_conllu = {
        k: ["--conllu", f[f"{k}.conllu"]]
        for k in ("empty", "binary", "ninecols", "head99", "cycle", "selfhead", "dupid", "tworoots")
    }
    bad_model = {
        "unknown_model": ["--model", "nope"],
        "missing_hf": ["--model", "hf:/no/such/dir"],
        "uncached_hf": ["--model", "hf:someone/not-cached"],
        "custom_code": ["--model", f"hf:{f['evil_model']}"],
        "unknown_zoo": ["--model", "zoo:nope"],
    }
    bad_out = {"out_proc": "/proc/x/y", "out_under_file": f["a_file"] + "/sub"}
    exotic = {f"exotic_{k}": ["--text", v] for k, v in EXOTIC.items()}
    exotic["exotic_file"] = ["--file", f["exotic.txt"]]

    # commands that read text / CoNLL-U input and write --out
    text_cmds = {
        "capture": [],
        "ablate": [],
        "prune": [],
        "roles": [],
        "faithfulness": ["--objective", "logit"],
        "report": [],
    }
    for cmd, extra in text_cmds.items():
        out_of = (lambda tag: o(tag) + ".csv") if cmd == "roles" else o
        for k, args in {**bad_text, **bad_conllu}.items():
            add(f"{cmd}:{k}", [cmd, *args, *extra, "--out", out_of(f"{cmd}_{k}")])
        for k, args in bad_model.items():
            add(f"{cmd}:{k}", [cmd, *args, "--text", "The cat sat.", *extra, "--out", out_of(f"{cmd}_{k}")])
        for k, path in bad_out.items():
            add(
                f"{cmd}:{k}",
                [cmd, "--text", "The cat sat.", *extra, "--out", path + (".csv" if cmd == "roles" else "")],
            )
        add(
            f"{cmd}:device", [cmd, "--text", "The cat sat.", "--device", "bogus", *extra, "--out", out_of(f"{cmd}_dev")]
        )
        if cmd in ("capture", "roles"):
            for k, args in exotic.items():
                add(f"{cmd}:{k}", [cmd, *args, *extra, "--out", out_of(f"{cmd}_{k}")], ANY)
    add("capture:layer_out_of_range", ["capture", "--text", "hi", "--layers", "99", "--out", o("cap_layers")])
    add("capture:layer_garbage", ["capture", "--text", "hi", "--layers", "a-b", "--out", o("cap_layers2")])
    # patch: pairs
    # no --corrupted: valid since the registry (the documented default corruption shuffles each
    # example's words, said in a note; one pair gives no interval, said in a note too)
    add("patch:no_corrupted", ["patch", "--text", "The cat sat.", "--out", o("patch1")], ANY)
    add("patch:unpaired", ["patch", "--text", "a b", "--text", "c d", "--corrupted", "e f", "--out", o("patch2")])
    add("patch:long_pair", ["patch", "--text", LONG, "--corrupted", "short", "--out", o("patch3")])
    add("patch:empty", ["patch", "--text", "", "--corrupted", "", "--out", o("patch4")])
    # store readers
    stores = {k: v for k, v in f.items() if k.startswith("store_")}
    for k, path in stores.items():
        add(f"heatmap:{k}", ["heatmap", "--store", path, "--layer", 0, "--head", 0, "--out", o(f"hm_{k}") + ".png"])
        add(f"roles:{k}", ["roles", "--store", path, "--out", o(f"roles_{k}") + ".csv"])
        add(f"rollout:{k}", ["rollout", "--store", path, "--out", o(f"ro_{k}")])
        add(f"flow:{k}", ["flow", "--store", path, "--out", o(f"flow_{k}")])
        add(f"store-verify:{k}", ["store", "verify", path])
    add("heatmap:not_a_store", ["heatmap", "--store", f["a_file"], "--layer", 0, "--head", 0, "--out", o("hm1.png")])
    add("heatmap:empty_dir", ["heatmap", "--store", out, "--layer", 0, "--head", 0, "--out", o("hm2.png")])
    for k, args in {
        "layer": ["--layer", 99, "--head", 0],
        "head": ["--layer", 0, "--head", 99],
        "example": ["--layer", 0, "--head", 0, "--example", 99],
        "negative": ["--layer", -1, "--head", 0],
    }.items():
        add(f"heatmap:{k}_out_of_range", ["heatmap", "--store", f["store"], *args, "--out", o(f"hm_{k}.png")])
    add("heatmap:out_proc", ["heatmap", "--store", f["store"], "--layer", 0, "--head", 0, "--out", "/proc/x/y.png"])
    for cmd in ("rollout", "flow"):
        for k, args in {**bad_text, **exotic}.items():
            if k.endswith("_file") and k != "exotic_file":
                continue
            add(f"{cmd}:{k}", [cmd, *args, "--out", o(f"{cmd}_{k}")], ANY if k.startswith("exotic") else REFUSE)
        add(f"{cmd}:example_out_of_range", [cmd, "--store", f["store"], "--example", 99, "--out", o(f"{cmd}_ex")])
        add(f"{cmd}:heads_out_of_range", [cmd, "--text", "The cat sat.", "--heads", "99", "--out", o(f"{cmd}_h")])
        add(f"{cmd}:position_out_of_range", [cmd, "--text", "The cat sat.", "-p", 99, "--out", o(f"{cmd}_p")])
        for k, args in bad_model.items():
            add(f"{cmd}:{k}", [cmd, *args, "--text", "The cat sat.", "--out", o(f"{cmd}_{k}")])
        add(f"{cmd}:out_proc", [cmd, "--text", "The cat sat.", "--out", "/proc/x/y"])
    # treebank commands
    for cmd in ("syntax", "coref"):
        for k, args in bad_conllu.items():
            add(f"{cmd}:{k}", [cmd, *args, "--out", o(f"{cmd}_{k}")])
        add(f"{cmd}:missing", [cmd, "--conllu", "/no/such.conllu", "--out", o(f"{cmd}_missing")])
        add(f"{cmd}:no_input", [cmd, "--out", o(f"{cmd}_none")])
        add(f"{cmd}:out_under_file", [cmd, "--conllu", f["good.conllu"], "--out", f["a_file"] + "/sub"])
    # zoo and paper commands
    add("evaluate:huge_n", ["evaluate", "--model", "zoo:induction", "--n", 100000000])
    add("evaluate:unknown", ["evaluate", "--model", "zoo:nope"])
    add("evaluate:not_zoo", ["evaluate", "--model", "minilm"])
    add("alignment:huge_limit", ["alignment", "--limit", 100000000, "--out", o("al1")])
    add("alignment:example_beyond", ["alignment", "--limit", 5, "--example", 9, "--out", o("al2")])
    add("alignment:out_under_file", ["alignment", "--limit", 5, "--out", f["a_file"] + "/sub"])
    add(
        "flow-correlation:huge",
        ["flow-correlation", "--model", "zoo:agreement", "--examples", 100000000, "--out", o("fc1")],
    )
    add("flow-correlation:not_zoo", ["flow-correlation", "--model", "minilm", "--out", o("fc2")])
    add("flow-correlation:zoo_nope", ["flow-correlation", "--model", "zoo:nope", "--out", o("fc3")])
    add("paper-figures:unk_vocab", ["paper-figures", "--model", "zoo:agreement", "--out", o("pf1")])
    add("paper-figures:unknown_model", ["paper-figures", "--model", "nope", "--out", o("pf2")])
    add("paper-figures:out_proc", ["paper-figures", "--out", "/proc/x/y"])
    add("complexity:one_size", ["complexity", "--n", 16, "--d", 16, "--out", o("cx1")])
    add("complexity:negative", ["complexity", "--n", "16,-4", "--out", o("cx2")])
    add("complexity:huge", ["complexity", "--n", "16,200000", "--d", 8, "--max-memory", 1, "--out", o("cx3")])
    add("complexity:unknown_layer", ["complexity", "--layers", "mlp", "--n", "8,16", "--d", "8,16", "--out", o("cx4")])
    add("train:unknown", ["train", "zoo:nope", "--out", o("tr1")])
    add("train:not_zoo", ["train", "minilm", "--out", o("tr2")])
    add("train:out_under_file", ["train", "zoo:prev_token", "--steps", 1, "--out", f["a_file"] + "/sub"])
    add("models:bad_option", ["models", "--nope"])
    add("store-repair:not_a_store", ["store", "repair", f["a_file"]])
    # round three (issue 28)
    add("capture:bom_file", ["capture", "--file", f["bom.txt"], "--out", o("r3_bom1")], ANY)
    add("capture:bom_conllu", ["capture", "--conllu", f["bom.conllu"], "--out", o("r3_bom2")], ANY)
    add("capture:huge_word", ["capture", "--file", f["huge_word.txt"], "--out", o("r3_huge")], ANY)
    add("capture:repeated_layers", ["capture", "--text", "hi", "--layers", "0,0,1", "--out", o("r3_lay")])
    add(
        "capture:hf_config_file",
        ["capture", "--model", f"hf:{f['mismatch_model']}/config.json", "--text", "hi", "--out", o("r3_cfg")],
    )
    add(
        "capture:config_weight_mismatch",
        ["capture", "--model", f"hf:{f['mismatch_model']}", "--text", "hi", "--out", o("r3_mm")],
    )
    add("rollout:out_symlink", ["rollout", "--text", "The cat sat.", "--out", f["link_out"]], ANY)
    for v in ("nan", "inf", "-inf"):
        add(f"prune:threshold_{v}", ["prune", "--text", "The cat sat.", "--threshold", v, "--out", o(f"r3_pr{v}")])
    add("prune:step_zero", ["prune", "--text", "The cat sat.", "--step", 0, "--out", o("r3_step")])
    add("rollout:residual_nan", ["rollout", "--text", "The cat sat.", "--residual", "nan", "--out", o("r3_res")])
    add(
        "faithfulness:repeated_heads",
        ["faithfulness", "--text", "The cat sat.", "--heads", "L0H0,L0H0", "--out", o("r3_fh")],
    )
    add("ablate:repeated_group", ["ablate", "--text", "The cat sat.", "--group", "L0H1,L0H1", "--out", o("r3_ag")])
    add("ablate:repeated_layers", ["ablate", "--text", "The cat sat.", "--layers", "0,0", "--out", o("r3_al")])
    _round_five_cases(f, o, add)
    for k in ("gguf_text", "gguf_empty", "gguf_truncated"):  # issue 54: each refused in one line, nothing cached
        if k in f:
            add(f"capture:{k}", ["capture", "--model", f"gguf:{f[k]}", "--text", "The dog barks.", "--out", o(k)])
    add("capture:gguf_directory", ["capture", "--model", f"gguf:{f['gguf_dir']}", "--text", "hi", "--out", o("gg_dir")])
    return c


def _round_five_cases(f: dict, o, add) -> None:
    """Issue 59's rows (round five) shown on the command line."""
    for k in ("r5_half", "r5_absurd", "r5_billion", "r5_float"):  # rows 1-4
        add(f"capture:{k}", ["capture", "--model", f"hf:{f[k]}", "--text", "The dog barks.", "--out", o(k)])
    for cmd in ("roles", "rollout", "flow"):  # row 5
        out = o(f"r5_{cmd}") + (".csv" if cmd == "roles" else "")
        add(f"{cmd}:r5_foreign_store", [cmd, "--model", "minilm", "--store", f["r5_ind_store"], "--out", out])
    add("rollout:r5_own_store", ["rollout", "--store", f["r5_ind_store"], "--out", o("r5_own")], ANY)
    for cmd in ("patch", "ablate"):  # row 7
        add(
            f"{cmd}:r5_group_past_model",
            [cmd, "--model", "zoo:induction", "--text", "a b c a b c", "--group", "L5H0", "--out", o(f"r5_g{cmd}")],
        )
    add("report:r5_empty_sections", ["report", "--text", "The cat sat.", "--sections", ",", "--out", o("r5_sec")])
    for k in ("huge", "negative", "string"):  # row 11
        store = f[f"store_r5_n_input_{k}"]
        add(f"store-verify:r5_n_input_{k}", ["store", "verify", store])
        add(f"roles:r5_n_input_{k}", ["roles", "--store", store, "--out", o(f"r5_ni_{k}") + ".csv"])
    add("ablate:r5_objective_typo", ["ablate", "--objective", "acuracy", "--text", "The cat sat.", "--out", o("r5_ot")])
    add(  # row 13: accepted now (one vocabulary)
        "roles:r5_engine_local",
        ["roles", "--engine", "local", "--text", "The cat sat.", "--text", "A dog ran.", "--out", o("r5_el") + ".csv"],
        ANY,
    )
    add(  # row 18
        "claims:r5_copies_similarity",
        ["claims", "--file", f["copies.txt"], "--objective", "similarity-structure", "--out", o("r5_cp")],
    )
    add("compare:r5_negative_step", ["compare", f["r5_run"], "--out", o("r5_neg")])  # row 20
    add("compare:r5_zoo_three_layers", ["compare", f["r5_three"], "zoo:induction", "--out", o("r5_three")])  # row 23


def classify(expect: str, rc, stdout: str, stderr: str) -> str:
    text = stdout + stderr
    if rc is None:
        return "hang"
    if "Traceback (most recent call last)" in text:
        return "traceback"
    if rc == 0:
        return "exit0_on_refused" if expect == REFUSE else "ok"
    if rc == 3:  # the CLI's exit status for a bug (UNEXPECTED_EXIT), never for bad input
        return "bug"
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    return "clean_error" if lines and lines[-1].startswith("Error:") else "unclear_error"


def run_case(case, probe, timeout) -> dict:
    name, args, expect = case
    start = time.perf_counter()
    try:
        p = subprocess.run(
            probe + args, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, errors="replace"
        )
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out, err = None, str(exc.stdout or ""), str(exc.stderr or "")
    outcome = classify(expect, rc, out, err)
    last = next((line for line in reversed(err.strip().splitlines()) if line.strip()), "")
    return {
        "case": name,
        "expect": expect,
        "outcome": outcome,
        "rc": rc,
        "seconds": round(time.perf_counter() - start, 1),
        "message": last[:300],
        "argv": " ".join(args)[:300],
    }


def _sample(todo: list, k: int) -> list:
    """At most ``k`` cases per command, evenly spread over its list (deterministic)."""
    by_cmd: dict = {}
    for c in todo:
        by_cmd.setdefault(c[0].split(":")[0], []).append(c)
    out = []
    for group in by_cmd.values():
        step = max(1, len(group) / k)
        out.extend(group[int(i * step)] for i in range(min(k, len(group))))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=2, help="cases run at once")
    ap.add_argument("--timeout", type=float, default=180, help="seconds per case before it counts as a hang")
    ap.add_argument("--only", default=None, help="comma-separated command names (e.g. capture,heatmap)")
    ap.add_argument(
        "--per-command",
        type=int,
        default=None,
        help="run only this many cases per command, spread over its list (a quicker sample)",
    )
    ap.add_argument("--match", default=None, help="only cases whose name contains this (e.g. r5_: round five)")
    ap.add_argument(
        "--first",
        default=None,
        help="comma-separated parts of case names run before the others (e.g. r5_,report:,compare:)",
    )
    ap.add_argument("--csv", default=None, help="write one row per case here")
    ap.add_argument("--show", action="store_true", help="print every case, not only the failing ones")
    a = ap.parse_args()
    probe = [sys.executable, "-m", "probe"]
    env_note = f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, {a.jobs} at once, timeout {a.timeout:g}s"
    with tempfile.TemporaryDirectory(prefix="bad_inputs_") as tmp:
        d = Path(tmp)
        out = d / "outs"
        out.mkdir()
        fixtures = make_fixtures(d, probe)
        todo = cases(fixtures, str(out))
        if a.only:
            keep = {c.strip() for c in a.only.split(",")}
            todo = [c for c in todo if c[0].split(":")[0] in keep]
        if a.match:
            todo = [c for c in todo if a.match in c[0]]
        if a.per_command:
            todo = _sample(todo, a.per_command)
        if a.first:
            parts = [x for x in a.first.split(",") if x]
            todo.sort(key=lambda c: next((i for i, x in enumerate(parts) if x in c[0]), len(parts)))  # stable
        print(f"{len(todo)} cases over {len({c[0].split(':')[0] for c in todo})} commands ({env_note})", flush=True)
        start = time.perf_counter()
        results = []
        with ThreadPoolExecutor(max_workers=a.jobs) as pool:  # each case said as it ends: a cut run still counts
            for r in as_completed([pool.submit(run_case, c, probe, a.timeout) for c in todo]):
                results.append(r.result())
                row = results[-1]
                print(
                    f"[{len(results)}/{len(todo)}] {row['outcome']:<17} {row['case']} rc={row['rc']} {row['seconds']}s",
                    flush=True,
                )
        wall = time.perf_counter() - start
        evil_ran = (d / "EVIL_RAN").exists()
    counts: dict = {}
    for r in results:
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    bad = [r for r in results if r["outcome"] in ("traceback", "hang", "exit0_on_refused", "bug", "unclear_error")]
    for r in results if a.show else bad:
        print(f"{r['outcome']:<17} {r['case']:<40} rc={r['rc']} {r['seconds']:>6}s  {r['message']}")
    if a.csv:
        with open(a.csv, "w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, fieldnames=list(results[0]))
            w.writeheader()
            w.writerows(results)
    order = ["traceback", "hang", "exit0_on_refused", "bug", "unclear_error", "clean_error", "ok"]
    print(f"\n{len(results)} cases in {wall:.0f} s: " + ", ".join(f"{k} {counts.get(k, 0)}" for k in order))
    print(f"custom code ran: {'YES' if evil_ran else 'no'}")
    return 1 if bad or evil_ran else 0


if __name__ == "__main__":
    sys.exit(main())
