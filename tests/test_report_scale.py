"""The report at scale (issue 31): memory sized from the input length, task-head
checkpoints, the report's own options."""

from __future__ import annotations

import json

import pytest
import torch

from probe.errors import NotApplicable
from click.testing import CliRunner


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, bert_tokenizer):
    """Tiny random task-head checkpoints saved to folders: kind -> path."""
    import transformers as T

    V = len(bert_tokenizer)
    bert = T.BertConfig(
        vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, pad_token_id=0
    )
    gpt2 = T.GPT2Config(
        vocab_size=V, n_embd=32, n_layer=2, n_head=4, bos_token_id=101, eos_token_id=102, pad_token_id=0
    )
    out = {}
    for kind, build in [
        ("mlm", lambda: T.BertForMaskedLM(bert)),
        ("gpt2", lambda: T.GPT2LMHeadModel(gpt2)),
        ("seqcls", lambda: T.BertForSequenceClassification(bert)),
        ("tokcls", lambda: T.BertForTokenClassification(bert)),
    ]:
        torch.manual_seed(0)
        d = tmp_path_factory.mktemp(kind)
        build().save_pretrained(d, safe_serialization=True)
        bert_tokenizer.save_pretrained(d)
        out[kind] = d
    return out


def test_length_groups_cover_corpus_and_shrink_for_long_inputs(tiny_models):
    from probe.inputs.budget import length_groups, memory_budget, row_bytes, workspace

    a = tiny_models["bert"]
    lengths = [10, 500, 12, 300, 11, 9, 480]
    with memory_budget(int(8 * row_bytes(a, 500) * 3)):  # workspace: 3 rows of 500 tokens
        groups = length_groups(lengths, a, cap=16)
        assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
        for g in groups:
            assert len(g) * row_bytes(a, max(lengths[i] for i in g)) <= workspace()
        assert groups[0] == [1, 6, 3]  # the longest first, three per forward
        assert len(groups) == 2 and sorted(groups[1]) == [0, 2, 4, 5]


def test_length_groups_bound_the_padding_when_asked(tiny_models):
    """``waste=0.15``: a group closes before an example that would make its padded tokens
    (size × its longest) exceed 1.15 × its tokens; without it the group fills to ``cap``.
    Lengths 20, 19, 18, 16, 15, 10, 9: 20+19+18 = 57 tokens padded to 60 (1.05); with 16,
    73 padded to 80 (1.096); with 15, 88 padded to 100 (1.136); with 10, 98 padded to 120
    (1.22 > 1.15): the group stops at 15, and 10 and 9 start the next."""
    from probe.inputs.budget import length_groups

    a = tiny_models["bert"]
    lengths = [16, 10, 20, 9, 18, 15, 19]
    assert length_groups(lengths, a, cap=16) == [[2, 6, 4, 0, 5, 1, 3]]
    assert length_groups(lengths, a, cap=16, waste=0.15) == [[2, 6, 4, 0, 5], [1, 3]]
    assert length_groups(lengths, a, cap=16, waste=0.0) == [[2], [6], [4], [0], [5], [1], [3]]
    assert length_groups([7, 7, 7], a, cap=2, waste=0.0) == [[0, 1], [2]]  # equal lengths: no padding


def test_batches_by_length_cover_the_corpus_once_with_less_padding(tiny_models):
    """Length-sorted batches: every example once, batches of similar length (longest
    first), fewer padded tokens than corpus order on a corpus of mixed lengths."""
    from probe.analyses.common.objective import get_metric
    from probe.inputs.corpus import Corpus

    a = tiny_models["bert"]
    texts = tuple(" ".join(["word"] * n) + " ." for n in (3, 40, 5, 38, 4, 36, 6, 41, 2))
    corpus = Corpus(texts=texts, source="texts")
    m = get_metric("embedding-drift", a, corpus)

    def padded(by_length):
        idx, total = [], 0
        for i, b in m.batches(a, corpus, 3, by_length=by_length):
            idx += list(i)
            total += b.inputs["input_ids"].numel()
        return idx, total

    order, sorted_tokens = padded(True)
    plain, plain_tokens = padded(False)
    assert sorted(order) == plain == list(range(len(texts)))
    assert [len(texts[i]) for i in order] == sorted((len(t) for t in texts), reverse=True)
    assert sorted_tokens < 0.75 * plain_tokens  # 270 vs 384 here


def test_permutations_split_over_forwards_under_a_small_budget(checkpoints):
    """Permutation forwards are sized by the budget (no gradients): under a budget that
    holds 3 rows of the longest input, its 8 permutations run in 3 forwards, shorter
    inputs share forwards, and identity permutations still change nothing."""
    from probe.analyses.common.objective import parse_target
    from probe.analyses.explanation.counterfactual import _permutation_groups, permutation_effects
    from probe.inputs.budget import memory_budget, row_bytes
    from probe.models import load_model

    a = load_model(f"hf:{checkpoints['gpt2']}")
    with memory_budget(int(8 * row_bytes(a, 60, grad=False) * 3.5)):
        groups = _permutation_groups(a, [5, 6, 7, 60], 8, 64)
        assert groups[-1] == (3, 4, 3)  # the long one alone, 3 of its 8 permutations per forward
        assert sum(stop - start for start, stop, _ in groups) == 4
        encs = [a.encode(" ".join(["word"] * n)) for n in (3, 4, 58)]
        eff = permutation_effects(a, parse_target("loss:-1", a), encs, heads=[(0, 1)], n_permutations=8, identity=True)
    assert len(eff.per_example) == 3 and eff.per_example["tvd"].abs().max() < 1e-6


def test_budget_refused_with_smallest_that_works(tiny_models):
    from probe.inputs.budget import check_budget, smallest_budget

    a = tiny_models["bert"]
    need = smallest_budget(a, 400)
    check_budget(a, 400, need)  # exactly enough: accepted
    with pytest.raises(ValueError, match="smallest budget that works is"):
        check_budget(a, 400, need - 1)


def test_parse_size():
    from probe.inputs.budget import parse_size

    assert (
        parse_size("4G") == 4 << 30
        and parse_size("1500M") == 1500 << 20
        and parse_size("2.5GiB") == int(2.5 * (1 << 30))
    )
    for bad in ("0", "-1G", "4X", ""):
        with pytest.raises(ValueError):
            parse_size(bad)


def test_importance_in_budget_sized_chunks_equals_one_batch(checkpoints):
    """Chunks sized from the input length (one row per forward under a tiny budget) give
    the same importance as one padded batch: the grouping changes memory, not values."""
    from probe.analyses.common.metrics import prepare
    from probe.analyses.common.objective import get_metric
    from probe.analyses.necessity.importance import gradient_importance, ig_importance
    from probe.models import load_model

    from probe.inputs.budget import memory_budget, row_bytes
    from probe.inputs.corpus import Corpus

    a = load_model(f"hf:{checkpoints['mlm']}")
    corpus = Corpus(
        texts=(
            "a short one .",
            "The cat sat on the mat because it was warm and the sun was out .",
            "Dogs bark .",
            "Colourless green ideas sleep furiously tonight in the garden .",
        ),
        source="texts",
    )
    m = get_metric("loss", a, corpus)
    whole = gradient_importance(a, corpus, m, chunks=prepare(a, corpus, m, batch_size=16))
    with memory_budget(8 * row_bytes(a, 20)):  # one row per forward
        sized = gradient_importance(a, corpus, m, batch_size=16)
        ig_sized = ig_importance(a, corpus, m, n_steps=4, batch_size=16)
    ig_whole = ig_importance(a, corpus, m, n_steps=4, chunks=prepare(a, corpus, m, batch_size=16))
    assert whole.raw.max() > 0
    assert abs(whole.raw - sized.raw).max() < 1e-5 * max(1.0, abs(whole.raw).max())
    assert abs(ig_whole.raw - ig_sized.raw).max() < 1e-5 * max(1.0, abs(ig_whole.raw).max())


def test_importance_chunks_run_the_clean_forward_only_for_an_objective_with_a_reference(checkpoints):
    """A loss reads no clean-run reference: its chunks are built without a forward (its
    importance as before, from the forwards with gradients alone); the embedding drift's
    chunks run one clean forward each and carry the clean embeddings."""
    from probe.analyses.common.objective import get_metric
    from probe.analyses.necessity.importance import gradient_importance, sized_chunks
    from probe.inputs.corpus import Corpus
    from probe.models import load_model

    a = load_model(f"hf:{checkpoints['mlm']}")
    corpus = Corpus(texts=("a short one .", "The cat sat on the mat .", "Dogs bark ."), source="texts")
    loss, drift = get_metric("loss", a, corpus), get_metric("embedding-drift", a, corpus)
    with_forward = gradient_importance(a, corpus, loss, chunks=[*_chunks_with_forward(a, corpus, loss)])
    forwards = []
    embeddings = next(m for n, m in a.model.named_modules() if n.endswith("embeddings"))  # every run passes it
    hook = embeddings.register_forward_pre_hook(lambda module, args: forwards.append(1))
    try:
        chunks = sized_chunks(a, corpus, loss)
        assert forwards == [] and all(c.reference is None and c.clean is None for c in chunks)
        drift_chunks = sized_chunks(a, corpus, drift)
        assert len(forwards) == len(drift_chunks) and all(c.reference is not None for c in drift_chunks)
    finally:
        hook.remove()
    assert abs(gradient_importance(a, corpus, loss, chunks=chunks).raw - with_forward.raw).max() == 0


def _chunks_with_forward(adapter, corpus, objective):
    """Chunks as :func:`sized_chunks` built them before: each with its clean forward's scores."""
    from probe.analyses.common.metrics import Chunk
    from probe.analyses.necessity.importance import sized_chunks

    for c in sized_chunks(adapter, corpus, objective):
        out = objective.forward(adapter, c.batch)
        yield Chunk(c.indices, c.batch, objective.reference(out, c.batch), objective.score(out, c.batch).detach())


def test_report_refuses_too_small_budget_before_capture(checkpoints, tmp_path):
    from probe.app.cli import main

    res = CliRunner().invoke(
        main,
        [
            "report",
            "--model",
            f"hf:{checkpoints['mlm']}",
            "--text",
            "a b c d e",
            "--memory-budget",
            "1K",
            "--out",
            str(tmp_path / "r"),
        ],
    )
    assert res.exit_code != 0
    assert "smallest budget that works is" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "r").exists()


def _report(model_dir, out, *extra):
    from probe.app.cli import main

    return CliRunner().invoke(main, ["report", "--model", f"hf:{model_dir}", "--limit", "8", "--out", str(out), *extra])


@pytest.mark.slow  # two whole reports: ~20 s each on 2 cores
@pytest.mark.parametrize(
    "kind, metric_words, target",
    [
        ("mlm", "masked-LM loss of the sentence's own tokens", "mlm"),
        ("gpt2", "next-token loss", "loss:-1"),
    ],
)
def test_lm_checkpoint_report_runs_every_section_with_its_head(checkpoints, tmp_path, kind, metric_words, target):
    """A BertForMaskedLM / GPT2LMHeadModel folder: every section runs (faithfulness used to
    fail on the MLM with "'MaskedLMOutput' object has no attribute 'dim'"), the objective
    chosen is printed and recorded, and the LM head gives the loss."""
    res = _report(checkpoints[kind], tmp_path / "r")
    assert res.exit_code == 0, res.output
    assert "Traceback" not in res.output
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    status = {s["name"]: s["status"] for s in summary["sections"]}
    assert set(status) >= {"syntax", "ablation", "importance", "faithfulness", "roles", "rollout", "claims"}
    # the decoder taxonomy runs on the causal LM and is skipped, with its reason, on the masked LM
    assert status.pop("decoder-heads") == ("ran" if kind == "gpt2" else "skipped"), status
    assert status.pop("writes") == ("ran" if kind == "gpt2" else "skipped"), status  # BERT: post-norm
    assert all(v == "ran" for v in status.values()), status
    choices = summary["settings"]["choices"]
    assert any(c.startswith("objective: loss") and metric_words in c for c in choices), choices
    assert any(c.startswith(f"objective: {target} ") for c in choices), choices
    # one objective line: the run's objective named once, how the other sections measure it
    # (the whys in the choices above)
    (line,) = [x.strip() for x in res.output.splitlines() if x.strip().startswith("objective: ")]
    assert line.startswith("objective: loss (claims, ablation, importance), measured"), line
    assert f"per input as {target} (faithfulness)" in line, line
    assert "metric: " not in res.output and "target: " not in res.output
    faith = next(s for s in summary["sections"] if s["name"] == "faithfulness")
    assert faith["summary"]["target"] == target
    abl = next(s for s in summary["sections"] if s["name"] == "ablation")
    assert abl["summary"]["metric"] == "loss" and abl["summary"]["clean"] > 1.0  # a random head: high loss


def test_report_one_objective_option(checkpoints, tmp_path):
    """One --objective for every use: the ablation measures embedding-drift; faithfulness'
    explain use does not know that name, so it takes auto (the MLM's own-token loss) and
    says so in one line."""
    res = _report(
        checkpoints["mlm"], tmp_path / "r", "--objective", "embedding-drift", "--sections", "ablation,faithfulness"
    )
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    by = {s["name"]: s for s in summary["sections"]}
    assert by["ablation"]["summary"]["metric"] == "embedding-drift"
    assert by["faithfulness"]["summary"]["target"] == "mlm"
    said = [c for c in summary["settings"]["choices"] if c.startswith("objective: mlm")]
    assert said and "--objective embedding-drift is not one explain knows, so auto" in said[0], said


def test_report_faithfulness_notes_say_which_examples_were_explained_and_why(checkpoints, tmp_path):
    """The report's faithfulness notes state the sizing rule (the attribution claim's power:
    71, more than 8, so all 8), and with --explained-examples 3 the length-stratified draw;
    IG's steps per example are summarised and recorded."""

    def section(out, *extra):
        res = _report(checkpoints["seqcls"], out, "--sections", "faithfulness", *extra)
        assert res.exit_code == 0, res.output
        summary = json.loads((out / "summary.json").read_text())
        return next(s for s in summary["sections"] if s["name"] == "faithfulness")

    faith = section(tmp_path / "a")
    assert faith["status"] == "ran", faith
    first = faith["notes"][0]  # the heads per verdict, each verdict quoted (some hold a comma)
    assert first.startswith("8 examples, target ") and first.count("“") == first.count("”") >= 1
    counted = [int(part.split(" head")[0]) for part in first.split(": ", 1)[1].split("”, ")]
    assert sum(counted) == 2 * 4  # every head of the 2-layer, 4-head checkpoint, once
    said = [n for n in faith["notes"] if "explained" in n]
    assert said == [
        "all 8 examples explained; 71 = the fewest at which the attribution claim calls a head significant in 55% "
        "of examples agreeing and one in 45% not, each with 80% power (⌈(z_0.8 · 0.5 / 0.05)²⌉), capped at 256"
    ]
    gate = faith["summary"]["ig_gate"]
    steps = [n for n in faith["notes"] if n.startswith("IG steps per example, doubled from 8")]
    assert steps and f"median {gate['median_steps']:g}, max {gate['max_steps']}" in steps[0]
    assert sum(gate["steps_counts"].values()) == 8 and faith["summary"]["explained"]["n"] == 8
    faith = section(tmp_path / "b", "--explained-examples", "3")
    said = [n for n in faith["notes"] if "explained" in n]
    assert len(said) == 1 and said[0].startswith(
        "3 of 8 explained, drawn across the corpus in 3 length strata (seed 0) among its"
    )
    assert said[0].endswith("the number fixed by --explained-examples (--explain-limit)")
    assert faith["summary"]["n_examples"] == 3 and faith["summary"]["explained"]["strata"] == 3


@pytest.mark.parametrize("kind, target", [("seqcls", "logit"), ("tokcls", "similarity")])
def test_classifier_checkpoints_use_head_or_encoder_underneath(checkpoints, kind, target):
    """A sequence classifier explains its logit and is judged on its head (the KL of its
    predicted class distribution, issue 43); a token classifier (no sentence-level head)
    explains the encoder underneath (sentence similarity), and its metric runs on the
    encoder."""
    from probe.analyses.common.objective import default_metric
    from probe.app.registry import SkipAnalysis, open_run
    from probe.app.registry.analyses.faithfulness import default_target
    from probe.models import load_model

    from probe.inputs.corpus import Corpus

    a = load_model(f"hf:{checkpoints[kind]}")
    assert type(a.model).__name__.endswith("SequenceClassification" if kind == "seqcls" else "TokenClassification")
    corpus = Corpus(texts=("a b c",), source="texts")
    ctx = open_run(a, corpus)
    assert default_metric(a, corpus)[0] == ("prediction-kl" if kind == "seqcls" else "embedding-drift")
    if target is None:
        with pytest.raises(SkipAnalysis):
            default_target(ctx)
    else:
        assert default_target(ctx) == target


def test_probe_target_reads_the_encoder_under_an_mlm_head(checkpoints):
    """ProbeLogit on a BertForMaskedLM pools the encoder's hidden states (the fault was
    MaskedLMOutput handed to ``.dim()``); an output without hidden states is a clear error."""
    from probe.analyses.common.targets import ProbeLogit, hidden_states
    from probe.models import load_model

    a = load_model(f"hf:{checkpoints['mlm']}")
    t = ProbeLogit(torch.nn.Linear(32, 1))
    inputs = a.batch([a.encode("the cat sat"), a.encode("dogs bark loudly today")])
    out = t.output(a, inputs["input_ids"], inputs["attention_mask"])
    assert t.scalar(out, inputs["attention_mask"], None).shape == (2,)
    with torch.no_grad():
        mlm_out = a.model(**inputs)
    with pytest.raises(NotApplicable, match="MaskedLMOutput"):  # the target does not apply to a head's output
        hidden_states(mlm_out)


def test_own_tokens_mlm_target_is_mean_token_nll(checkpoints):
    from probe.analyses.common.targets import OwnTokensLoss
    from probe.models import load_model

    a = load_model(f"hf:{checkpoints['mlm']}")
    t = OwnTokensLoss()
    inputs = a.batch([a.encode("the cat sat"), a.encode("dogs bark loudly today")])
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    aux = t.aux(a, ids, mask)
    with torch.no_grad():
        out = t.output(a, ids, mask)
        got = t.scalar(out, mask, aux)
        logp = torch.log_softmax(out.logits, -1)
    for r in range(2):
        n = int(mask[r].sum())
        pos = range(1, n - 1)  # [CLS] … [SEP]
        want = -sum(float(logp[r, p, ids[r, p]]) for p in pos) / len(pos)
        assert abs(float(got[r]) - want) < 1e-5


def test_sentence_transformers_folder_loads_its_transformer_module(tmp_path, bert_tokenizer):
    """An older sentence-transformers save (the transformer in 0_Transformer/, pooling in
    1_Pooling/) loads the transformer and records the pooling."""
    import transformers as T
    from probe.models import load_model

    cfg = T.BertConfig(
        vocab_size=len(bert_tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        pad_token_id=0,
    )
    (tmp_path / "0_Transformer").mkdir()
    (tmp_path / "1_Pooling").mkdir()
    T.BertModel(cfg).save_pretrained(tmp_path / "0_Transformer", safe_serialization=True)
    bert_tokenizer.save_pretrained(tmp_path / "0_Transformer")
    (tmp_path / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": 32, "pooling_mode_mean_tokens": True, "pooling_mode_cls_token": False})
    )
    (tmp_path / "modules.json").write_text(
        json.dumps(
            [
                {"idx": 0, "name": "0", "path": "0_Transformer", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            ]
        )
    )
    a = load_model(f"hf:{tmp_path}")
    assert a.n_layers == 2 and a.card["pooling"] == "mean"
    (tmp_path / "modules.json").write_text(json.dumps([{"path": "gone", "type": "x.Transformer"}]))
    with pytest.raises(ValueError, match="missing"):
        load_model(f"hf:{tmp_path}")


def _comparable(summary: dict):
    """summary.json without its timings (they differ between any two runs)."""
    if isinstance(summary, dict):
        return {
            k: _comparable(v)
            for k, v in summary.items()
            if k not in ("seconds", "capture seconds") and not k.endswith("_seconds")
        }
    if isinstance(summary, list):
        return [_comparable(v) for v in summary]
    return summary


@pytest.mark.slow  # three reports of a tiny model: ~40 s on 2 cores
def test_killed_report_resumes_to_the_same_summary(checkpoints, tmp_path):
    """SIGKILL a report once a later section has started; the same command then resumes
    from the finished sections (not run again) to the summary.json of an uninterrupted run."""
    import os
    import signal
    import subprocess
    import sys

    args = [
        sys.executable,
        "-m",
        "probe",
        "report",
        "--model",
        f"hf:{checkpoints['mlm']}",
        "--limit",
        "4",
        "--sections",
        "ablation,importance,faithfulness,claims",
    ]
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    killed = tmp_path / "killed"
    proc = subprocess.Popen(
        args + ["--out", str(killed)], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env, text=True
    )
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if "faithfulness …" in line:  # ablation and importance finished, faithfulness running
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "".join(seen)
    partial = tmp_path / ".killed.partial"
    assert not killed.exists()
    assert {p.name for p in (partial / "sections").glob("*.json")} >= {"ablation.json", "importance.json"}

    again = subprocess.run(args + ["--out", str(killed)], capture_output=True, text=True, env=env, timeout=600)
    assert again.returncode == 0, again.stderr
    assert "ablation (resumed" in again.stderr and "importance (resumed" in again.stderr
    assert not partial.exists()  # removed once the report is written

    whole = subprocess.run(
        args + ["--out", str(tmp_path / "whole")], capture_output=True, text=True, env=env, timeout=600
    )
    assert whole.returncode == 0, whole.stderr
    a = json.loads((killed / "summary.json").read_text())
    b = json.loads((tmp_path / "whole" / "summary.json").read_text())
    assert _comparable(a) == _comparable(b)


def test_resume_over_other_settings_is_refused_and_keeps_the_partial(tmp_path):
    from probe.app.report.resume import PartialReport, fingerprint

    out = tmp_path / "r"
    first = PartialReport(out, fingerprint(model="a", sections=["x"]))
    (first.dir / "sections" / "x.json").write_text("{}")
    first.release()  # the first run ended (a live one holds the --out's lock: issue 59, row 16)
    with pytest.raises(ValueError, match=r"model 'a' there, 'b' now.*nothing was overwritten"):
        PartialReport(out, fingerprint(model="b", sections=["x"]))
    assert (first.dir / "sections" / "x.json").read_text() == "{}"
    assert PartialReport(out, fingerprint(model="a", sections=["x"])).resumed == ["x"]


def test_saved_section_round_trips_exactly(tmp_path):
    """Tables (float32/float64/int/bool/str/NaN columns), summary and the sweep's arrays
    come back equal, dtypes included."""
    import numpy as np
    import pandas as pd
    from probe.analyses.necessity.ablation import SweepResult
    from probe.app.registry import Result
    from probe.app.report.resume import PartialReport, fingerprint
    from probe.app.report.sections import SectionOutcome

    t = pd.DataFrame(
        {
            "layer": [0, 1],
            "head": [2, 3],
            "x": np.array([0.1, 1 / 3], dtype=np.float32),
            "y": [np.nan, 2.5],
            "ok": [True, False],
            "name": ["a", None],
        }
    )
    sweep = SweepResult(
        table=t,
        clean=np.array([1.0, 2.0]),
        ablated=np.arange(6.0).reshape(3, 2),
        heads=((0, 1), (1, 0), (1, 1)),
        path="site-restart",
    )
    res = Result(
        tables={"t": t},
        per_head=t,
        notes=["n"],
        summary={"m": 0.1, "k": [1, 2]},
        summary_name="s",
        data={"sweep": sweep, "target": "mlm"},
    )
    p = PartialReport(tmp_path / "r", fingerprint())
    assert p.save(SectionOutcome("abl", "Ablation", "ran", "", 1.5, res))
    back = p.load("abl")
    pd.testing.assert_frame_equal(back.result.tables["t"], t)
    pd.testing.assert_frame_equal(back.result.per_head, t)
    assert back.result.summary == res.summary and back.result.data["target"] == "mlm"
    s = back.result.data["sweep"]
    assert s.heads == sweep.heads and s.path == sweep.path
    assert np.array_equal(s.clean, sweep.clean) and np.array_equal(s.ablated, sweep.ablated)


LONG = " ".join(f"word{i % 50} is here ." for i in range(200))  # ~ 1,000 tokens


def test_windows_overlap_and_cover_the_text(checkpoints):
    from probe.models import load_model

    from probe.inputs.corpus import Corpus
    from probe.inputs.long_inputs import window_corpus

    a = load_model(f"hf:{checkpoints['mlm']}")
    corpus = Corpus(texts=(LONG, "short ."), source="t")
    out, split = window_corpus(corpus, a, 128, 64)
    n_content = len(a.tokenizer(LONG, add_special_tokens=False)["input_ids"])
    assert split == {0: len(out) - 1} and out.texts[-1] == "short ."
    lengths = [len(a.tokenizer(t)["input_ids"]) for t in out.texts[:-1]]
    assert max(lengths) <= 128 and lengths[0] == 128
    assert len(out) - 1 == -(-(n_content - 126) // 64) + 1  # starts 0, 64, … and one ending at the end
    assert LONG.startswith(out.texts[0]) and LONG.endswith(out.texts[-2])
    second = out.texts[1]
    assert second in LONG and LONG.index(second) < len(out.texts[0])  # the windows overlap


@pytest.mark.parametrize(
    "args, message",
    [
        (["--window", "0"], "--window must be a positive"),
        (["--window", "100", "--stride", "100"], "must be smaller than --window 100"),
        (["--window", "100", "--stride", "0"], "--stride must be a positive"),
        (["--window", "4096"], "larger than the model's limit of 512 tokens"),
        (["--stride", "3"], "--stride needs --window"),
    ],
)
def test_bad_window_values_are_one_error_line_before_the_model_loads(checkpoints, tmp_path, monkeypatch, args, message):
    from probe.app.cli import main
    from probe.models import registry

    monkeypatch.setattr(registry, "load_hf", lambda *a, **k: pytest.fail("the model was loaded"))
    res = CliRunner().invoke(
        main, ["report", "--model", f"hf:{checkpoints['mlm']}", "--text", "a b", *args, "--out", str(tmp_path / "r")]
    )
    assert res.exit_code == 1 and message in res.output and "Traceback" not in res.output
    assert res.output.count("Error:") == 1


@pytest.mark.slow  # three reports with 512-token inputs
def test_over_length_document_refusal_names_window_and_report_runs_in_windows(checkpoints, tmp_path):
    from probe.app.cli import main

    base = ["report", "--model", f"hf:{checkpoints['mlm']}", "--text", LONG, "--sections", "roles"]
    res = CliRunner().invoke(main, base + ["--out", str(tmp_path / "a")])
    assert res.exit_code == 1 and "--window" in res.output and "--truncate" in res.output
    res = CliRunner().invoke(main, base + ["--window", "128", "--stride", "96", "--out", str(tmp_path / "b")])
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert summary["corpus"]["examples"] > 1 and "overlapping windows" in summary["settings"]["long inputs"]
    res = CliRunner().invoke(main, base + ["--truncate", "--out", str(tmp_path / "c")])
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "c" / "summary.json").read_text())
    assert summary["corpus"]["examples"] == 1 and summary["corpus"]["tokens"] == 512


def test_report_options_reach_the_sections_that_declare_them():
    """--max-model-examples overrides a section's parameter (and its report cap) only where
    it declares it; the cap is stated for the page and summary. The objective is not a
    parameter: it is the run's (``ctx.objective(use)``)."""
    from probe.app.registry import Analysis, Param, Result, open_run
    from probe.app.registry.context import ReportState
    from probe.app.report.build import _model_examples_setting, _overrides
    from probe.app.report.sections import run_section

    seen = {}
    sec = Analysis(
        "x",
        "x",
        lambda ctx: seen.update(ctx.params) or Result(),
        params=(Param("seed", int, 0),),
        section=True,
        report_params={"max_model_examples": 128},
    )
    ctx = open_run(None, report=ReportState(overrides=_overrides(0, 16)))
    run_section(ctx, sec)
    assert seen == {"seed": 0, "max_model_examples": None}  # no "explain_limit": x does not declare it
    capped = _model_examples_setting(2001, None, causal="exhaustive")["model-run examples"]
    assert "--max-model-examples 0" in capped and "first 128 of 2001" in capped
    assert _model_examples_setting(2001, 0)["model-run examples"].startswith("all 2001")
    # the default (auto) on a corpus the cap cuts: ablation, importance and claims read all of it in blocks
    default = _model_examples_setting(2001, None)["model-run examples"]
    assert default.startswith("all 2001 for ablation, importance and claims, in random blocks")
    assert "first 128 of 2001" not in default or any(s in default for s in ("patching", "circuit", "writes"))


def test_the_screened_path_states_that_its_necessity_takes_every_example():
    """Above 144 heads (SmolLM2's 270) the necessity screen of ablation and claims reads every
    example and removes exactly in random blocks of all of them; the settings line said "the
    first 128 of 256 for ablation, importance, writes and claims", which only the rest keeps."""
    from probe.app.report.build import _model_examples_setting

    said = _model_examples_setting(256, None, heads=270)["model-run examples"]
    whole, first = said.split("; ")
    assert whole.startswith("all 256 for the necessity of ablation and claims: every head screened on each example")
    assert first.startswith("the first 128 of 256 for importance, writes and claims (the necessity aside)")
    assert "ablation" not in first and "--max-model-examples 0" in first
    assert _model_examples_setting(100, None, heads=270)["model-run examples"].startswith("all 100")


def test_every_example_cap_is_stated_with_the_flag_that_lifts_it():
    from probe.app.report.build import _model_examples_setting, _overrides

    stated = _model_examples_setting(2001, None)["faithfulness examples"]
    assert stated.startswith("71 of 2001 explained, as many as the attribution claim's power needs")
    assert "drawn across the corpus in 8 length strata" in stated and "--explained-examples N" in stated
    assert _model_examples_setting(2001, None, 40)["faithfulness examples"].startswith("40 of 2001 explained, fixed")
    assert _model_examples_setting(2001, None, 0)["faithfulness examples"] == "all 2001"
    assert _model_examples_setting(10, None)["faithfulness examples"] == "all 10"
    assert _overrides(None, 0) == {"explain_limit": None, "sized_by_power": False}
    assert _overrides(None, 40) == {"explain_limit": 40, "sized_by_power": False}
