"""Issue 59, reliability round five: damaged weights, absurd configs, foreign stores and edits
out of range end in one clear line, before the work.

One section per row of the issue's table (``row N``); each test failed on the code before
the fix (a raw exception, exit 3, a silent wrong result or, for row 3, a process that grew
until killed: that test runs the check, not the load, on today's code it built modules).
"""

import json
import re
import shutil

import pytest
import torch
from click.testing import CliRunner

from probe.app.cli import main as cli
from probe.errors import InputError


def _run(*args):
    r = CliRunner().invoke(cli, [str(a) for a in args])
    return r, (r.output.strip().splitlines() or [""])[-1]


@pytest.fixture(scope="module")
def tiny_dir(bert_tokenizer, tmp_path_factory):
    """A saved 2-layer BERT with the MiniLM tokenizer (an hf: folder)."""
    import transformers as T

    d = tmp_path_factory.mktemp("tinybert5")
    cfg = T.BertConfig(
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=16,
        vocab_size=len(bert_tokenizer),
        architectures=["BertModel"],
    )
    torch.manual_seed(0)
    T.BertModel(cfg).save_pretrained(d)
    bert_tokenizer.save_pretrained(d)
    return d


def _copy(src, tmp_path, name="model", **config):
    d = tmp_path / name
    shutil.copytree(src, d)
    if config:
        c = json.loads((d / "config.json").read_text())
        c.update(config)
        (d / "config.json").write_text(json.dumps(c))
    return d


# ---- rows 1-2: damaged safetensors files ------------------------------------------------------
def test_row01_a_truncated_weights_file_is_one_line_naming_it(tiny_dir, tmp_path):
    d = _copy(tiny_dir, tmp_path)
    w = d / "model.safetensors"
    w.write_bytes(w.read_bytes()[: w.stat().st_size // 2])
    r, last = _run("capture", "--model", f"hf:{d}", "--text", "The dog barks.", "--out", tmp_path / "o")
    assert r.exit_code == 1, r.output
    assert last.startswith("Error: weights file ") and str(w) in last and "truncated" in last, last
    assert not (tmp_path / "o").exists()


def test_row02_an_absurd_header_length_is_one_line_naming_it(tiny_dir, tmp_path):
    d = _copy(tiny_dir, tmp_path)
    w = d / "model.safetensors"
    data = w.read_bytes()
    w.write_bytes((2**60).to_bytes(8, "little") + data[8:])
    r, last = _run("capture", "--model", f"hf:{d}", "--text", "The dog barks.", "--out", tmp_path / "o")
    assert r.exit_code == 1, r.output
    assert str(w) in last and "header length is 1,152,921,504,606,846,976 bytes (absurd" in last, last


def test_row01_02_the_sound_folder_still_loads(tiny_dir):
    from probe.models import load_model

    assert load_model(f"hf:{tiny_dir}").n_layers == 2


@pytest.mark.parametrize(
    "edit, said",
    [
        (lambda b: b[:-1], "truncated"),
        (lambda b: b + b"\0", "has bytes after its last tensor"),
        (lambda b: b[:4], "fewer than the 8-byte header length"),
        (lambda b: (5).to_bytes(8, "little") + b"[1,2]", "not a JSON object"),
        (lambda b: (3).to_bytes(8, "little") + b"\xff\xfe{", "not JSON"),
    ],
)
def test_row01_02_each_damage_is_named(tiny_dir, tmp_path, edit, said):
    from probe.models.weights_check import read_safetensors_header

    w = tmp_path / "w.safetensors"
    w.write_bytes(edit((tiny_dir / "model.safetensors").read_bytes()))
    with pytest.raises(InputError, match=rf"weights file {w} is corrupted or truncated: .*{said}"):
        read_safetensors_header(w)


def test_row01_an_offset_that_lies_about_its_tensor_is_refused(tmp_path):
    from safetensors.torch import save_file

    from probe.models.weights_check import read_safetensors_header

    w = tmp_path / "w.safetensors"
    save_file({"a": torch.zeros(2, 3), "b": torch.ones(4)}, str(w))
    assert {k: v["shape"] for k, v in read_safetensors_header(w).items()} == {"a": [2, 3], "b": [4]}
    raw = w.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    header["a"]["shape"] = [2, 4]  # 32 bytes claimed over a 24-byte range
    text = json.dumps(header, separators=(",", ":")).encode().ljust(n)
    w.write_bytes(raw[:8] + text + raw[8 + n :])
    with pytest.raises(InputError, match=r"tensor 'a' spans 24 bytes but \[2, 4\] of F32 is 32"):
        read_safetensors_header(w)


# ---- rows 3-4: absurd configs, refused before any module is built ------------------------------
def test_row03_a_billion_layers_is_refused_before_anything_is_built(tiny_dir, tmp_path, monkeypatch):
    import transformers as T

    d = _copy(tiny_dir, tmp_path, num_hidden_layers=1_000_000_000)

    def never(*a, **k):  # on the old code the load went on to build the modules (killed at the memory limit)
        raise AssertionError("a module was built")

    monkeypatch.setattr(T.BertModel, "from_pretrained", never)
    r, last = _run("capture", "--model", f"hf:{d}", "--text", "The dog barks.", "--out", tmp_path / "o")
    assert r.exit_code == 1, r.output
    assert "num_hidden_layers=1,000,000,000" in last and "more than this machine's" in last, last


def test_row04_a_size_given_as_a_float_is_one_line(tiny_dir, tmp_path):
    d = _copy(tiny_dir, tmp_path, num_hidden_layers=1e9)
    r, last = _run("capture", "--model", f"hf:{d}", "--text", "The dog barks.", "--out", tmp_path / "o")
    assert r.exit_code == 1, r.output
    assert "config.json gives num_hidden_layers (the layers) as 1000000000.0, not a whole number" in last, last


@pytest.mark.parametrize(
    "field, value, said",
    [
        ("num_attention_heads", 2.5, "as 2.5, not a whole number: write it as an integer such as 2"),
        ("hidden_size", "16", "as '16', not a whole number"),
        ("vocab_size", 0, "vocab_size (the vocabulary) as 0: it must be at least 1"),
        ("max_position_embeddings", -5, "(the positions) as -5: it must be at least 1"),
        ("num_hidden_layers", True, "as True, not a whole number"),
        ("vocab_size", 10**15, "more than this machine's"),
    ],
)
def test_row03_04_every_size_field_is_checked(field, value, said):
    from probe.models.weights_check import check_config

    config = {"hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2, "vocab_size": 100}
    check_config(config, "m")  # the sound config passes
    with pytest.raises(InputError, match=said.replace("(", r"\(").replace(")", r"\)")):
        check_config({**config, field: value}, "m")


def test_row03_the_estimate_is_against_the_memory_given():
    from probe.models.weights_check import check_config, parameter_bytes

    config = {"hidden_size": 576, "num_hidden_layers": 30, "vocab_size": 49152, "intermediate_size": 1536}
    need = parameter_bytes(config)
    # SmolLM2-135M: 135 M parameters; the estimate is a lower bound within 20 %
    assert 0.8 * 135e6 * 4 < need <= 135e6 * 4 * 1.05
    check_config(config, "m", memory=need)
    with pytest.raises(InputError, match=r"asks for at least 0.5 GiB of parameters, more than this machine's 0.5 GiB"):
        check_config(config, "m", memory=need - 1)


# ---- row 23: a zoo checkpoint folder gets the config-vs-weights check --------------------------
@pytest.mark.parametrize("layers, said", [(3, "layers 2..2 would be random"), (1, "layers 1..1 would be dropped")])
def test_row23_a_zoo_folder_whose_config_contradicts_its_weights_is_refused(tmp_path, layers, said):
    from probe.models.checkpoints import load_checkpoint, resolve_checkpoints
    from probe.models.zoo import WEIGHTS_DIR

    d = _copy(WEIGHTS_DIR / "induction", tmp_path, name="step-000003", num_hidden_layers=layers)
    (checkpoint,) = resolve_checkpoints([str(d)])
    with pytest.raises(
        InputError, match=rf"config.json says num_hidden_layers={layers} but its weights hold 2 layers \({said}"
    ):
        load_checkpoint(checkpoint)
    sound = _copy(WEIGHTS_DIR / "induction", tmp_path, name="sound")
    assert load_checkpoint(resolve_checkpoints([str(sound)])[0]).n_layers == 2


# ---- rows 6, 7b, 21: edits checked against the site, integers are integers --------------------
@pytest.fixture(scope="module")
def tiny_lm(bert_tokenizer):
    """A 2-layer Llama causal LM, 4 query heads over 2 key/value heads (seeded)."""
    import transformers as T

    from probe.models import ModelAdapter

    cfg = T.LlamaConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        vocab_size=len(bert_tokenizer),
        max_position_embeddings=64,
        pad_token_id=0,
        bos_token_id=101,
        eos_token_id=102,
    )
    torch.manual_seed(0)
    model = T.LlamaForCausalLM(cfg).eval()
    return ModelAdapter(name="tiny-llama-lm", model=model, tokenizer=bert_tokenizer, family="llama")


def _no_forward(adapter, monkeypatch):
    def never(*a, **k):
        raise AssertionError("the forward ran")

    monkeypatch.setattr(adapter.model, "forward", never)


def test_row06_a_head_past_the_site_is_refused_before_the_forward(tiny_models, monkeypatch):
    from probe.tracing.edits import Zero
    from probe.tracing.trace import trace

    adapter = tiny_models["bert"]
    with monkeypatch.context() as m:
        _no_forward(adapter, m)
        with pytest.raises(
            InputError,
            match=r"site blocks.1.attn.hook_z has 4 heads \(0..3\); the edit names head 9: give a head below 4",
        ):
            trace(adapter, ["The cat sat."], edit={"blocks.1.attn.hook_z": Zero(head=9)})
    # in range, the edit runs and changes the output
    clean = trace(adapter, ["The cat sat."], read=["blocks.1.hook_resid_post"])["blocks.1.hook_resid_post"]
    cut = trace(
        adapter, ["The cat sat."], edit={"blocks.1.attn.hook_z": Zero(head=3)}, read=["blocks.1.hook_resid_post"]
    )
    assert not torch.allclose(clean, cut["blocks.1.hook_resid_post"])


def test_row06_the_key_site_counts_key_value_heads_and_gates_their_width(tiny_lm, monkeypatch):
    from probe.tracing.edits import Gate, Zero
    from probe.tracing.trace import trace

    with monkeypatch.context() as m:
        _no_forward(tiny_lm, m)
        with pytest.raises(InputError, match=r"site blocks.0.attn.hook_k has 2 heads \(0..1\); the edit names head 2"):
            trace(tiny_lm, ["The cat sat."], edit={"blocks.0.attn.hook_k": Zero(head=2)})
        with pytest.raises(InputError, match=r"has 4 heads; the gates have 3 in their last axis"):
            trace(tiny_lm, ["The cat sat."], edit={"blocks.0.attn.hook_z": Gate(torch.ones(3))})
        with pytest.raises(InputError, match=r"site blocks.0.hook_resid_post has no head axis; .*head=1"):
            trace(tiny_lm, ["The cat sat."], edit={"blocks.0.hook_resid_post": Zero(head=1)})
    trace(tiny_lm, ["The cat sat."], edit={"blocks.0.attn.hook_k": Zero(head=1)})  # in range: runs


def test_row07b_a_pattern_edit_of_the_wrong_shape_or_dtype_is_one_line(tiny_lm):
    from probe.tracing.trace import trace

    with pytest.raises(
        InputError, match=r"the edit of blocks.0.attn.hook_pattern returned \(1, 4, 3, 3\), but the site is"
    ):
        trace(tiny_lm, ["The cat sat."], edit={"blocks.0.attn.hook_pattern": lambda x, ctx: x[..., :3, :3]})
    with pytest.raises(InputError, match=r"returned a torch.float64 tensor, but the site is torch.float32"):
        trace(tiny_lm, ["The cat sat."], edit={"blocks.0.attn.hook_pattern": lambda x, ctx: x.double()})
    with pytest.raises(InputError, match=r"the edit of blocks.1.attn.hook_z returned \(2,\)"):
        trace(tiny_lm, ["The cat sat."], edit={"blocks.1.attn.hook_z": lambda x, ctx: torch.zeros(2)})
    out = trace(tiny_lm, ["The cat sat."], edit={"blocks.0.attn.hook_pattern": lambda x, ctx: x * 1.0})
    assert out.output is not None


@pytest.mark.parametrize(
    "make, said",
    [
        (lambda E: E.Zero(head=-1), r"Zero's head must be at least 0, got -1 \(negative indices are not counted"),
        (lambda E: E.Zero(head=1.9), r"Zero's head must be a whole number, got 1.9"),
        (lambda E: E.Zero(head=True), r"Zero's head must be a whole number, got True"),
        (lambda E: E.Scale(0.5, head="2"), r"Scale's head must be a whole number, got '2'"),
        (lambda E: E.Zero(rows=[-1]), r"Zero's rows must be at least 0, got -1"),
        (lambda E: E.Zero(rows=[0.5]), r"Zero's rows must be a whole number, got 0.5"),
        (lambda E: E.ReplaceWeights(head=-2), r"ReplaceWeights's head must be at least 0, got -2"),
        (lambda E: E.Gate(torch.ones(4), layer=1.0), r"Gate's layer must be a whole number, got 1.0"),
    ],
)
def test_row21_heads_and_rows_are_whole_numbers_in_range(make, said):
    import numpy as np

    from probe.tracing import edits as E

    with pytest.raises(InputError, match=said):
        make(E)
    assert E.Zero(head=np.int64(3), rows=torch.tensor([0, 2])) == E.Zero(head=3, rows=(0, 2))  # integers of any kind


def test_row21_a_row_past_the_batch_is_refused(tiny_models):
    from probe.tracing.edits import Zero
    from probe.tracing.trace import trace

    with pytest.raises(InputError, match=r"names row 2 but the batch has 1 rows"):
        trace(tiny_models["bert"], ["The cat sat."], edit={"blocks.0.attn.hook_z": Zero(head=0, rows=[2])})
    with pytest.raises(InputError, match=r"the trace's rows must be at least 0, got -1"):
        trace(tiny_models["bert"], ["The cat sat."], edit={"blocks.0.attn.hook_z": Zero(head=0)}, rows=[-1])


def test_row21_generate_counts_tokens_in_whole_numbers(tiny_lm):
    from probe.tracing.generate import trace_generate

    for bad, said in ((2.7, "must be a whole number, got 2.7"), (0, "must be at least 1, got 0")):
        with pytest.raises(InputError, match=f"max_new_tokens {said}"):
            trace_generate(tiny_lm, ["The cat"], bad)
    out = trace_generate(tiny_lm, ["The cat"], 3, min_new_tokens=3).output
    assert out.shape[1] == len(tiny_lm.tokenizer("The cat")["input_ids"]) + 3


# ---- rows 5, 11, 22: a store is read only by its model; manifests validated; skipped counted ---
@pytest.fixture(scope="module")
def induction_store(tmp_path_factory):
    d = tmp_path_factory.mktemp("r5store") / "ind"
    r, last = _run("capture", "--model", "zoo:induction", "--text", "a b c a b c", "--text", "d e f d e", "--out", d)
    assert r.exit_code == 0, r.output
    return d


@pytest.mark.parametrize("cmd", ["roles", "rollout", "flow"])
def test_row05_a_store_read_with_another_model_is_refused(induction_store, tmp_path, cmd):
    out = tmp_path / ("o.csv" if cmd == "roles" else "o")
    r, last = _run(cmd, "--model", "minilm", "--store", induction_store, "--out", out)
    assert r.exit_code == 1, r.output
    assert f"{induction_store} holds the maps of 'zoo:induction', not of 'minilm'" in last, last
    assert "read it with --model zoo:induction, or leave --model out" in last
    assert not out.exists()


@pytest.mark.parametrize("cmd", ["roles", "rollout"])
def test_row05_without_model_a_store_is_read_with_its_own(induction_store, tmp_path, cmd):
    out = tmp_path / ("o.csv" if cmd == "roles" else "o")
    r, _ = _run(cmd, "--store", induction_store, "--out", out)
    assert r.exit_code == 0, r.output
    r, _ = _run(cmd, "--model", "zoo:induction", "--store", induction_store, "--out", tmp_path / "again")
    assert r.exit_code in (0, 1) and "holds the maps of" not in r.output  # the same model: not refused


def test_row05_the_python_api_compares_too(induction_store, tmp_path):
    from probe.app.registry import Inputs, open_run

    ctx = open_run("minilm", Inputs(), params={"store": str(induction_store)}, quiet=True)
    with pytest.raises(InputError, match=r"holds the maps of 'zoo:induction', not of 'minilm'"):
        ctx.read_store(induction_store)
    assert len(open_run("zoo:induction", Inputs(), quiet=True).read_store(induction_store)) == 2


def test_row05_the_same_weights_under_another_name_are_accepted(induction_store):
    from probe.store.provenance import refuse_other_model
    from probe.store.schema import read_manifest

    manifest = read_manifest(induction_store)
    refuse_other_model(induction_store, manifest, "hf:/copy/of/induction", lambda: manifest["weights"])
    with pytest.raises(InputError, match="not of 'hf:/other'"):
        refuse_other_model(induction_store, manifest, "hf:/other", lambda: "0" * 32)


@pytest.mark.parametrize(
    "field, value, said",
    [
        ("n_input", 10**30, "n_input must be a count of examples 0..1,000,000,000, found 10000"),
        ("n_input", -3, "n_input must be a count of examples 0..1,000,000,000, found -3"),
        ("n_input", "2", "n_input must be a count of examples 0..1,000,000,000, found '2'"),
        ("n_heads", 0, "n_heads must be a count of heads 1..10,000, found 0"),
        ("skipped", {"x": -1}, "skipped must be an object of reasons and counts"),
        ("model", 7, "model must be a model name, found 7"),
        ("rows", "sum to 2", "rows must be 'sum to 1' or 'at most 1'"),
    ],
)
def test_row11_a_hand_edited_manifest_is_refused_by_every_reader(induction_store, tmp_path, field, value, said):
    from probe.store.repair import verify_store

    d = tmp_path / "s"
    shutil.copytree(induction_store, d)
    m = json.loads((d / "manifest.json").read_text())
    m[field] = value
    (d / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(InputError, match=said):
        verify_store(d)
    r, last = _run("roles", "--model", "zoo:induction", "--store", d, "--out", tmp_path / "o.csv")
    assert r.exit_code == 1 and said.split(",")[0] in last, r.output


def _skip_invalid_store(tmp_path):
    good = "# text = The dog barks\n1\tThe\tthe\tDET\t_\t_\t2\tdet\t_\t_\n2\tdog\tdog\tNOUN\t_\t_\t3\tnsubj\t_\t_\n3\tbarks\tbark\tVERB\t_\t_\t0\troot\t_\t_\n\n"
    bad = good.replace("\t0\troot", "\t9\troot")
    p = tmp_path / "t.conllu"
    p.write_text(good + bad + good + bad + bad)
    out = tmp_path / "s"
    r, _ = _run("capture", "--conllu", p, "--skip-invalid", "--out", out)
    assert r.exit_code == 0, r.output
    return out


def test_row22_a_skip_invalid_store_counts_right_both_ways(tmp_path, caplog):
    import logging

    from probe.store.directory import Store
    from probe.store.repair import verify_store

    out = _skip_invalid_store(tmp_path)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["n_input"] == 5 and manifest["skipped"] == {"invalid CoNLL-U": 3}
    with caplog.at_level(logging.WARNING):
        store = Store(out)
    assert len(store) == 2 and store.complete and "interrupted" not in caplog.text  # complete: no warning
    assert not verify_store(out).incomplete
    lines = (out / "index.jsonl").read_text().splitlines()
    (out / "index.jsonl").write_text(lines[0] + "\n")  # one index line missing
    assert "the index lists 1 of the 2 examples" in verify_store(out).incomplete


# ---- rows 7, 9: every range checked before the work ---------------------------------------------
@pytest.mark.parametrize("cmd", ["patch", "ablate"])
def test_row07_a_group_past_the_model_is_refused_before_any_forward(tmp_path, monkeypatch, cmd):
    import probe.analyses.necessity.head_groups as groups

    def never(*a, **k):
        raise AssertionError("the intervention ran")

    monkeypatch.setattr(groups, "patch_group", never)
    monkeypatch.setattr(groups, "ablate_group", never)
    r, last = _run(cmd, "--model", "zoo:induction", "--text", "a b c a b c", "--group", "L5H0", "--out", tmp_path / "o")
    assert r.exit_code == 1, r.output
    assert last == "Error: --group L5H0: layer 5 out of range: zoo:induction has layers 0..1", last


def test_row07_the_python_api_checks_heads_too():
    import probe

    with pytest.raises(InputError, match=r"--group L0H9: head 9 out of range: zoo:induction has heads 0..3"):
        probe.run("ablate", model="zoo:induction", text=["a b c a b c"], group=["L0H9"])


@pytest.mark.parametrize("value", [",", " , ", ""])
def test_row09_an_empty_section_list_is_refused(tmp_path, value):
    r, last = _run("report", "--text", "The cat sat.", "--sections", value, "--out", tmp_path / "o")
    assert r.exit_code == 2, r.output
    assert "names no section" in r.output and not (tmp_path / "o").exists()


def test_row09_build_report_refuses_an_empty_list_too():
    from probe.app.report.sections import choose

    with pytest.raises(InputError, match="no section named"):
        choose([])
    assert [s.name for s in choose(["roles"])] == ["roles"]
    assert len(choose(None)) > 1


# ---- rows 12, 13: one vocabulary ---------------------------------------------------------------
def test_row12_an_unknown_objective_is_called_an_objective_with_a_suggestion(tmp_path):
    r, last = _run("ablate", "--objective", "acuracy", "--text", "The cat sat.", "--out", tmp_path / "o")
    assert r.exit_code == 1, r.output
    assert last.startswith("Error: unknown objective 'acuracy'; did you mean 'accuracy'? known: loss, accuracy"), last
    r, last = _run("ablate", "--objective", "zzzz", "--text", "The cat sat.", "--out", tmp_path / "o")
    assert "unknown objective 'zzzz'; known:" in last and "did you mean" not in last


def test_row12_no_message_says_metric_or_names_an_option_the_commands_lack():
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[1]
    said = {
        str(p.relative_to(root)): m.group(0)
        for folder in ("analyses", "app", "probe", "models")
        for p in (root / folder).rglob("*.py")
        for m in [re.search(r"f?\"(unknown )?metric [{']|--metric\b", p.read_text())]
        if m
    }
    assert not said, said


def _commands(group, prefix=""):
    import click

    for name, cmd in group.commands.items():
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, f"{prefix}{name} ")
        else:
            yield f"{prefix}{name}", cmd


def test_row13_every_command_that_takes_engine_takes_the_same_names():
    taking = {name: list(p.type.choices) for name, cmd in _commands(cli) for p in cmd.params if p.name == "engine"}
    assert {"roles", "report", "capture", "ablate", "syntax"} <= set(taking)
    assert all(choices == ["auto", "local", "stream", "ray"] for choices in taking.values()), taking


def test_row13_roles_runs_with_engine_local_in_this_process(tmp_path, monkeypatch):
    import probe.app.registry.runs as runs

    seen = []
    real = runs.engine_of
    monkeypatch.setattr(runs, "engine_of", lambda name, *a, **k: seen.append(real(name, *a, **k)) or seen[-1])
    r, _ = _run(
        "roles", "--engine", "local", "--text", "The cat sat.", "--text", "A dog ran.", "--out", tmp_path / "o.csv"
    )
    assert r.exit_code == 0, r.output
    assert seen[-1].name == "stream" and seen[-1].in_process


# ---- row 8: a section that cannot run on the input is skipped; warnings are one line -----------
def test_row08_a_section_refusing_its_input_is_skipped_with_the_reason(monkeypatch):
    from types import SimpleNamespace

    import probe.app.report.sections as sections

    def refuses(ctx, sec, sections=None):
        raise InputError("one sentence gives no bootstrap interval; give at least 2 sentences")

    monkeypatch.setattr(sections, "run_section", refuses)
    monkeypatch.setattr(sections, "_unmet", lambda *a: None)
    ctx = SimpleNamespace(report=SimpleNamespace(skipped={}, results={}))
    sec = SimpleNamespace(name="faithfulness", title="Faithfulness", produces=None)
    outcomes: list = []
    sections._run_one(ctx, sec, 0, [sec], outcomes, strict=False, progress=None)
    (out,) = outcomes
    assert out.status == "skipped" and "one sentence gives no bootstrap interval" in out.reason, out


def test_row08_python_warnings_are_one_toolkit_line_without_options_the_command_lacks(caplog):
    import logging
    import warnings

    import click

    from probe.app.cli.common import toolkit_warning

    @click.command()
    @click.option("--out")
    def report(out):
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = toolkit_warning
            warnings.warn("the mean is noisy — give at least 5 examples or use --mode zero", UserWarning, stacklevel=1)
            warnings.warn("choose fewer positions or raise --out", UserWarning, stacklevel=1)

    with caplog.at_level(logging.WARNING):
        r = CliRunner().invoke(report, ["--out", "x"])
    assert r.exit_code == 0, r.output
    said = [rec.getMessage() for rec in caplog.records if rec.name == "probe"]
    assert said == ["the mean is noisy — give at least 5 examples", "choose fewer positions or raise --out"]
    assert not any(".py" in m for m in said)


def _report(tmp_path, lines, *args):
    """``(exit code, stdout, stderr, summary.json)`` of ``probe report --file`` over ``lines``,
    run as a user runs it (a process of its own: Python's warnings reach stderr as they would)."""
    import subprocess
    import sys

    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    out = tmp_path / "rep"
    cmd = [sys.executable, "-m", "probe", "report", "--file", str(tmp_path / "in.txt"), "--out", str(out), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
    return proc.returncode, proc.stdout, proc.stderr, summary


def _options_named_elsewhere(text: str, command: str) -> list:
    """Each ``--option`` ``text`` names that ``probe <command>`` lacks, unless the words just
    before it run another command that has it (``run probe faithfulness with --pairs``)."""
    import re

    commands = dict(_commands(cli))
    has = {c: {o for p in cmd.params for o in getattr(p, "opts", ())} for c, cmd in commands.items()}
    wrong = []
    for m in re.finditer(r"(?<![\w-])--[a-z][\w-]*", text):
        other = re.search(r"probe ([a-z-]+)(?: [\w-]+)?\W*$", text[max(0, m.start() - 40) : m.start()])
        if m.group(0) not in has[command] and not (other and m.group(0) in has.get(other.group(1), ())):
            wrong.append(text[max(0, m.start() - 60) : m.end() + 10])
    return wrong


@pytest.fixture(scope="module")
def one_sentence_report(tmp_path_factory):
    """``probe report --file one.txt`` (every section, minilm), run once for the row 8 and 17 tests."""
    return _report(tmp_path_factory.mktemp("one"), ["The cat sat on the mat."])


@pytest.mark.slow  # one whole report on one sentence: ~60 s on the loaded 2-core machine
def test_row08_a_report_on_one_sentence_skips_what_cannot_run_and_speaks_in_its_own_lines(one_sentence_report):
    code, stdout, stderr, summary = one_sentence_report
    assert code == 0, stderr[-3000:]
    status = {s["name"]: (s["status"], s["reason"]) for s in summary["sections"]}
    assert not [n for n, (st, _) in status.items() if st == "failed"], status
    assert status["faithfulness"][0] == "skipped" and "give at least 2 sentences" in status["faithfulness"][1]
    assert "faithfulness skipped: " in stdout and "failed" not in stdout
    assert "Warning:" not in stderr and "UserWarning" not in stderr and "Traceback" not in stderr, stderr
    assert not re.search(r"\.py:\d+", stderr), stderr  # no source path of a raw Python warning
    assert "mean-ablation averages head outputs over only 1 example(s)" in stderr  # said, as the toolkit's line
    said = stdout + stderr + json.dumps([[s["reason"], *s["notes"]] for s in summary["sections"]])
    assert not _options_named_elsewhere(said, "report")  # was --mode zero (twice) and --pairs FILE
    # row 17 on the default path: no claim kind is decided on one sentence
    undecided = {"not enough evidence", "not tested"}
    assert all(
        set(h["claims"][k]["status"] for h in summary["heads"]) <= undecided for k in summary["claims"]["counts"]
    )


# ---- row 19: train --stop-after says what it saved ----------------------------------------------
def test_row19_stop_after_says_the_step_it_saved(tmp_path):
    r, last = _run("train", "zoo:prev-token", "--steps", 10, "--stop-after", 3, "--out", tmp_path / "m")
    assert r.exit_code == 0, r.output
    assert "after 3 of 10 steps (--stop-after 3: the saved model is step 3's)" in last, last
    card = json.loads((tmp_path / "m" / "card.json").read_text())
    assert card["step"] == 3 and card["train_steps"] == 10
    r, last = _run("train", "zoo:prev-token", "--steps", 4, "--out", tmp_path / "m4")
    assert "after 4 steps (" in last, last


# ---- rows 17, 18: claims with too little data say so on every path ---------------------------------
@pytest.mark.parametrize("n", [1, 2])
def test_row17_the_sequential_path_on_few_sentences_is_not_enough_evidence(n):
    from types import SimpleNamespace

    import numpy as np

    from analyses.claims import thresholds as T
    from analyses.claims.decided import _claim

    res = SimpleNamespace(
        n=n, decision=np.array(["not necessary"]), n_used=np.array([n]), e_value=np.array([0.1]),
        e_against=np.array([50.0]), method="e-values",
    )  # fmt: skip
    obj = SimpleNamespace(units="sentences")
    c = _claim(
        "necessity", "mean", res, None, 0, bar=0.01, floor=0.0, objective=obj, m=72, null=None, block_level=False
    )
    assert c.status == "not enough evidence" and c.reason == f"{n} examples < the minimum {T.MIN_EXAMPLES}"
    assert c.count == n


@pytest.mark.parametrize("n", [1, 2, 7])
def test_row17_the_attribution_claim_on_few_examples_is_not_enough_evidence(n):
    import pandas as pd

    from analyses.claims import thresholds as T
    from analyses.claims.attribution import attribution_claims

    # every example significant, τ far above the null's: it "held" on 2 sentences (12 heads on minilm)
    verdict = pd.DataFrame({"layer": [0], "head": [0], "tau_ig": [0.8], "tau_ig_significant": [1.0]})
    null = {"tau_max": 0.1, "tau_quantile": 0.05, "source": "re-initialised", "significant_max": 0.0}
    c = attribution_claims([(0, 0)], verdict, {"target": "logit", "n_examples": n, "null_agreement": null})[(0, 0)]
    assert c.status == "not enough evidence" and c.count == n, c
    assert c.reason.startswith(f"{n} examples < the minimum {T.MIN_EXAMPLES}; τ +0.80, significant in 100%")
    enough = attribution_claims([(0, 0)], verdict, {"target": "logit", "n_examples": 8, "null_agreement": null})
    assert enough[(0, 0)].status == "holds"


@pytest.mark.parametrize("n", [1, 2])
def test_row17_a_pattern_on_one_or_two_long_sentences_is_not_enough_evidence(n):
    from conftest import make_maps, previous_token

    from analyses.claims import thresholds as T
    from analyses.claims.pattern import pattern_claims

    # a perfect previous-token head over 60 query rows per sentence: past the 50-row bar, but its
    # interval is a bootstrap over 1 or 2 examples ([1.0, 1.0]: it "held" with a zero-width interval)
    c = pattern_claims([make_maps(previous_token(60)) for _ in range(n)])[0][(0, 0)]
    assert c.status == "not enough evidence" and c.threshold == "pattern_min_examples", c
    assert c.reason.startswith(f"{n} examples < {T.PATTERN_MIN_EXAMPLES}") and c.count == 60 * n
    held = pattern_claims([make_maps(previous_token(6)) for _ in range(T.PATTERN_MIN_EXAMPLES)])[0][(0, 0)]
    assert held.status == "holds" and held.statement == "previous-token"


@pytest.mark.slow  # a report (faithfulness and sequential claims) of minilm on 2 sentences: minutes on 2 cores
@pytest.mark.parametrize("n", [2])  # one sentence: test_row17_the_sequential_path_… and the row 8 report
def test_row17_no_claim_kind_is_decided_on_one_or_two_sentences_on_the_sequential_path(minilm, tmp_path, n):
    from probe.app.report.build import build_report
    from probe.app.report.bundled import SAMPLE_CONLLU

    # the bundled treebank's first sentences (27 and 24 words: 50 query rows and more between them)
    data = build_report(
        tmp_path / "r", adapter=minilm, conllu=str(SAMPLE_CONLLU), limit=n, causal="sequential",
        sections=["syntax", "faithfulness", "claims"],
    )  # fmt: skip
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert {s["name"]: s["status"] for s in summary["sections"]}["claims"] == "ran"
    assert summary["sections"][-1]["summary"]["causal"]["path"] == "sequential"
    counts = summary["claims"]["counts"]
    decided = {
        k: {s: c for s, c in v.items() if c and s not in ("not enough evidence", "not tested")}
        for k, v in counts.items()
    }
    assert decided == {k: {} for k in counts}, (
        decided
    )  # was: necessity, weights 'does not hold' ×72, attribution 'holds' ×12
    claims = [h["claims"] for h in summary["heads"]]
    for kind in ("pattern", "structure", "necessity", "weights"):
        assert {c[kind]["status"] for c in claims} == {"not enough evidence"}, kind
    # redundancy groups heads whose necessity does not hold: none is decided, so none is grouped
    assert {c["redundancy"]["reason"] for c in claims} == {"necessity not enough evidence"}
    attribution = {c["attribution"]["status"] for c in claims}
    assert attribution == ({"not tested"} if n == 1 else {"not enough evidence"})  # one sentence: no pair to explain
    assert not data.statuses.get("faithfulness") == "failed"


def test_row18_the_similarity_structure_of_copies_of_one_sentence_is_refused(minilm):
    from probe.analyses.common.objective import resolve_objective
    from probe.errors import NotApplicable
    from probe.inputs.corpus import Corpus

    copies = Corpus(texts=("The cat sat on the mat.",) * 1000)
    with pytest.raises(NotApplicable, match=r"give at least 4 different sentences \(got 1 different of 1000"):
        resolve_objective("similarity-structure", minilm, copies)
    obj, why = resolve_objective("auto", minilm, copies)
    assert obj.name != "similarity-structure", why
    four = Corpus(texts=("A cat sat.", "A dog ran.", "Birds fly.", "It rained.") * 3)
    assert resolve_objective("similarity-structure", minilm, four)[0].name == "similarity-structure"


# ---- rows 10, 20: compare fingerprints the tokenizer; checkpoint cards validated -----------------
def test_row10_compare_says_when_only_the_tokenizer_changed():
    import copy

    from probe.analyses.compare.run import compare_checkpoints
    from probe.inputs.corpus import Corpus
    from probe.models import load_model
    from probe.models.checkpoints import Checkpoint

    a = load_model("zoo:induction")
    b = type(a)(name=a.name, model=a.model, tokenizer=copy.deepcopy(a.tokenizer), family=a.family, card=a.card)
    b.tokenizer.add_tokens(["zzzextra"])  # same weights, another tokenizer
    models = {"A": a, "B": b, "A again": a}
    cks = [Checkpoint(label, spec=label) for label in models]
    res = compare_checkpoints(
        cks, Corpus(texts=("a b c a b c",) * 4), loader=lambda ck, d: models[ck.label], n_boot=50, necessity=False
    )
    assert any("A and B hold identical weights" in w and "but different tokenizers" in w for w in res.warnings)
    # byte-identical copies two checkpoints apart are found too (was: only neighbours compared)
    assert any("A and A again hold identical weights" in w and "and tokenizers" in w for w in res.warnings)


def _run_dir(tmp_path, cards: dict):
    from probe.models.zoo import WEIGHTS_DIR

    run = tmp_path / "run" / "checkpoints"
    for name, card in cards.items():
        d = run / name
        shutil.copytree(WEIGHTS_DIR / "induction", d)
        if card is None:
            (d / "card.json").unlink()
        else:
            c = json.loads((d / "card.json").read_text())
            c.update(card)
            (d / "card.json").write_text(json.dumps(c))
    return run.parent


@pytest.mark.parametrize(
    "cards, said",
    [
        ({"step-a": {"step": -7}, "step-b": {"step": 3}}, r"step must be a whole number ≥ 0 .*found -7"),
        ({"step-a": {"step": 1.5}, "step-b": {"step": 3}}, r"found 1.5"),
        ({"step-a": {"step": 1}, "step-b": None}, r"step-b has no card.json naming its task"),
    ],
)
def test_row20_checkpoint_cards_are_validated(tmp_path, cards, said):
    from probe.models.checkpoints import resolve_checkpoints

    with pytest.raises(InputError, match=said):
        resolve_checkpoints([str(_run_dir(tmp_path, cards))])


def test_row20_two_checkpoints_with_one_label_are_told_apart(tmp_path, caplog):
    import logging

    from probe.models.checkpoints import resolve_checkpoints

    run = _run_dir(tmp_path, {"step-1": {"step": 1}, "step-2": {"step": 2}})
    other = _run_dir(tmp_path / "b", {"step-1": {"step": 1}})  # a second run: its checkpoints under the same names
    (tmp_path / "loose").mkdir()
    shutil.copytree(run / "checkpoints" / "step-1", tmp_path / "loose" / "step-1")
    assert [c.step for c in resolve_checkpoints([str(run)])] == [1, 2]
    with caplog.at_level(logging.WARNING):
        cks = resolve_checkpoints([str(run), str(other), str(tmp_path / "loose" / "step-1"), "zoo:induction"])
    # another checkpoint under a label given before is named by its run (or folder): its rows stay its own
    assert [c.label for c in cks] == ["step-1", "step-2", "b/run/step-1", "loose/step-1", "zoo:induction"]
    said = caplog.text
    first, second = run / "checkpoints" / "step-1", other / "checkpoints" / "step-1"
    assert f"two checkpoints are labelled 'step-1' ({first.resolve()}, and {second.resolve()})" in said
    assert "the later one is shown as 'b/run/step-1'" in said
    # the same checkpoint given twice is label#2, said as such (compare then finds their weights identical)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        twice = resolve_checkpoints(["zoo:induction", "zoo:induction", str(run), str(run)])
    assert [c.label for c in twice] == ["zoo:induction", "zoo:induction#2", "step-1", "step-2", "step-1#2", "step-2#2"]
    assert "labelled 'zoo:induction' (zoo:induction, and the same again): the later one is shown as" in caplog.text


# ---- rows 14-16: resume only what the same inputs made; --out re-checked; one report per --out ----
def test_row14_a_resume_after_the_weights_changed_recomputes_every_section(tmp_path, caplog):
    import logging

    from probe.app.report.resume import PartialReport, fingerprint

    out = tmp_path / "r"
    first = PartialReport(out, fingerprint(model="hf:d", weights="aaa", tokenizer="t1", sections=["x"]))
    (first.dir / "sections" / "x.json").write_text("{}")
    first.release()
    same = PartialReport(out, fingerprint(model="hf:d", weights="aaa", tokenizer="t1", sections=["x"]))
    assert same.resumed == ["x"]  # the same inputs: resumed
    same.release()
    with caplog.at_level(logging.WARNING):
        changed = PartialReport(out, fingerprint(model="hf:d", weights="bbb", tokenizer="t1", sections=["x"]))
    assert changed.resumed == [] and not (changed.dir / "sections" / "x.json").exists()
    assert "the model's weights changed since" in caplog.text and "recomputed" in caplog.text
    changed.release()
    # another input still refuses (nothing overwritten), as before
    (changed.dir / "sections" / "x.json").write_text("{}")
    with pytest.raises(InputError, match="cannot resume: .*input None there, 'b.txt' now"):
        PartialReport(out, fingerprint(model="hf:d", weights="bbb", tokenizer="t1", sections=["x"], input="b.txt"))
    assert (changed.dir / "sections" / "x.json").exists()


def _saved(partial, name, options):
    from probe.app.registry import Result
    from probe.app.report.sections import SectionOutcome

    outcome = SectionOutcome(name, name.title(), "ran", "", 1.0, Result(summary={"made under": options}))
    assert partial.save(outcome, options=options)


def test_row14_other_section_options_recompute_only_the_sections_they_reach(tmp_path, caplog):
    import logging

    from probe.app.report.resume import PartialReport, fingerprint

    out, base = tmp_path / "r", dict(model="hf:d", weights="w", tokenizer="t", input="a.txt")
    first = PartialReport(out, fingerprint(**base, sections=["ablation", "faithfulness"], overrides={}))
    _saved(first, "ablation", {"params": {}, "reads": {}})
    _saved(first, "faithfulness", {"params": {}, "objective": "auto", "reads": {}})
    first.release()
    now = fingerprint(**base, sections=["ablation", "faithfulness", "claims"], overrides={"explain_limit": 2})
    with caplog.at_level(logging.WARNING):
        again = PartialReport(out, now)  # was: "cannot resume … overrides {} there, {...} now"
        assert again.load("ablation", options={"params": {}, "reads": {}}).status == "ran"  # unchanged: resumed
        faith = {"params": {"explain_limit": 2}, "objective": "auto", "reads": {}}
        assert again.load("faithfulness", options=faith) is None  # its options changed: run again
    assert "section faithfulness: its options changed" in caplog.text and "ablation" not in caplog.text
    assert not (again.dir / "sections" / "faithfulness.json").exists()
    assert json.loads((again.dir / "state.json").read_text())["fingerprint"] == now
    again.release()


def test_row14_a_section_options_follow_the_options_and_the_results_it_reads():
    from types import SimpleNamespace

    from probe.app.report.sections import choose, section_options

    secs = {s.name: s for s in choose("ablation,faithfulness,roles,claims")}

    def opts(name, overrides, objective="auto", names=tuple(secs)):
        ctx = SimpleNamespace(report=SimpleNamespace(overrides=overrides), objective_spec=objective)
        return section_options(ctx, secs[name], [secs[n] for n in names])

    explain = {"explain_limit": 2, "sized_by_power": False}
    assert opts("ablation", explain) == opts("ablation", {})  # faithfulness' option: ablation resumed
    assert opts("faithfulness", explain) != opts("faithfulness", {})
    assert opts("claims", explain) != opts("claims", {})  # claims read faithfulness' result
    assert opts("roles", {"causal": "sequential"}, "loss") == opts("roles", {})  # roles reads the maps alone
    assert opts("ablation", {"causal": "sequential"}) != opts("ablation", {})
    assert opts("ablation", {}, "loss") != opts("ablation", {})
    assert opts("claims", {}, names=("claims",)) != opts("claims", {})  # without faithfulness: attribution untested


class _Killed(Exception):
    """Stands for a report killed as a section starts."""


def _log_sections(ran: list, killed_at: str = ""):
    """A report's ``progress`` callback: each section's name (a resumed one says so) into
    ``ran``; the run is killed when section ``killed_at`` starts."""

    def progress(i, n, name):
        if name == killed_at:
            raise _Killed(name)
        ran.append(name.split(" (resumed")[0] + (" resumed" if "(resumed" in name else ""))

    return progress


def _same_report(a, b) -> list:
    """What differs between two reports' summary.json: each section's status and summary
    (floats to 1e-6, timings left out) and every per-head fact (bench/compare_summaries.py's test)."""
    from probe.app.report.compare import close, fact_differences

    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (a, b))
    sections = [
        (x["name"], x["status"], y["status"])
        for x, y in zip(sa["sections"], sb["sections"], strict=True)
        if x["status"] != y["status"] or not close(x["summary"], y["summary"])
    ]
    return sections + fact_differences(sa, sb)


@pytest.mark.slow  # six reports of a 2-layer model on four sentences
def test_row14_a_resumed_report_equals_a_clean_one_after_the_weights_or_the_options_changed(tiny_dir, tmp_path):
    import transformers as T

    from probe.app.report.build import build_report

    d = _copy(tiny_dir, tmp_path)
    texts = ["The cat sat on the mat.", "A dog ran in the park.", "Birds fly south.", "It rained all day."]
    kw = dict(model=f"hf:{d}", text=texts, sections="ablation,importance,faithfulness,claims")
    with pytest.raises(_Killed):
        build_report(tmp_path / "r", progress=_log_sections([], killed_at="faithfulness"), **kw)
    torch.manual_seed(1)  # the folder's weights changed in place: another model under the same command
    T.BertModel(T.BertConfig.from_pretrained(d)).save_pretrained(d)
    ran: list = []
    build_report(tmp_path / "r", progress=_log_sections(ran), **kw)
    assert ran == ["ablation", "importance", "faithfulness", "claims"]  # nothing of the old weights resumed
    build_report(tmp_path / "clean", **kw)
    assert _same_report(tmp_path / "r", tmp_path / "clean") == []  # was: 602 per-head facts differed

    # only an option of faithfulness changed: ablation and importance resumed, the rest recomputed
    with pytest.raises(_Killed):
        build_report(tmp_path / "o", progress=_log_sections([], killed_at="faithfulness"), **kw)
    ran = []
    build_report(tmp_path / "o", progress=_log_sections(ran), explained_examples=2, **kw)
    assert ran == ["ablation resumed", "importance resumed", "faithfulness", "claims"]  # was: refused
    build_report(tmp_path / "o-clean", explained_examples=2, **kw)
    assert _same_report(tmp_path / "o", tmp_path / "o-clean") == []
    assert _same_report(tmp_path / "o", tmp_path / "clean") != []  # the option did change the result


def test_row14_the_report_fingerprints_the_weights_and_tokenizer(tiny_models, tmp_path):
    from types import SimpleNamespace

    from probe.app.report.build import _partial_report
    from probe.inputs.corpus import Corpus
    from probe.models.fingerprint import tokenizer_fingerprint, weights_fingerprint

    adapter = tiny_models["bert"]
    corpus = Corpus(texts=("The cat sat.",))
    ctx = SimpleNamespace(corpus=SimpleNamespace(kept=corpus, whole=corpus))
    p = _partial_report(tmp_path / "r", ctx, adapter, {}, streamed=False, fresh=True)
    try:
        assert p.fingerprint["weights"] == weights_fingerprint(adapter.model)
        assert p.fingerprint["tokenizer"] == tokenizer_fingerprint(adapter.tokenizer)
    finally:
        p.discard()


def test_row15_out_is_rechecked_before_it_is_replaced(tmp_path):
    from probe.app.registry.outdir import OutDir

    out = tmp_path / "o"
    with pytest.raises(InputError, match=r"--out .*o changed while this command ran \('theirs.txt' appeared\)"):
        with OutDir(out) as tmp:
            (tmp / "result.csv").write_text("mine")
            out.mkdir()
            (out / "theirs.txt").write_text("another program's")
    assert (out / "theirs.txt").read_text() == "another program's"  # nothing the run did not write removed
    kept = [p for p in tmp_path.iterdir() if p.name.startswith(".o.tmp-")]
    assert len(kept) == 1 and (kept[0] / "result.csv").read_text() == "mine"  # nor the result lost
    with OutDir(tmp_path / "fresh") as tmp:  # untouched: replaced as before
        (tmp / "a").write_text("x")
    assert (tmp_path / "fresh" / "a").read_text() == "x"


def test_row16_a_second_report_on_one_out_is_refused_by_a_lock(tmp_path):
    from probe.app.report.resume import PartialReport, fingerprint

    out = tmp_path / "r"
    first = PartialReport(out, fingerprint(model="a"))
    with pytest.raises(InputError, match=r"is being written by process \d+ on this host"):
        PartialReport(out, fingerprint(model="a"), fresh=True)  # --no-resume: was rmtree under the first
    assert first.dir.is_dir()
    first.discard()
    assert not (tmp_path / ".r.lock").exists()
    PartialReport(out, fingerprint(model="a"), fresh=True).discard()  # free again
