"""What a head writes (probe.analyses.writes): a GPT-2 whose weights are set so that one
head, L1H2, writes one token (DLA, the OV circuit and the logit lens name it and nothing
else); the parts of the logit summing to it on random models; bad input refused in one line."""

from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner

from probe.analyses.writes.answers import Target, target_of
from probe.analyses.writes.dla import attribute, logit_attribution
from probe.analyses.writes.logit_lens import logit_lens
from probe.analyses.writes.stream import decompose
from probe.analyses.writes.token_circuits import ov_copied_tokens, ov_top_tokens, qk_top_sources
from probe.errors import InputError, NotApplicable

from test_transformer_lens import _tiny

WRITER = (1, 2)
TEXT = "the dog sat on the mat"


def hand_set_writer(tokenizer, answer: str = "cat"):
    """A 2-layer, 4-head GPT-2 (d_model 32, head size 8): every token's embedding holds 5 on
    dimension 0 (the rest random, std 0.02) and only ``answer``'s holds 3 on dimension 7 (the
    unembedding is tied); the norms have no bias. Every head's output projection and every MLP is zero except L1H2's:
    its value reads dimension 0 and its output writes it to dimension 7, so it raises
    ``answer``'s logit, whatever it attends to, and no other head writes anything."""
    adapter = _tiny("gpt2", tokenizer)
    m = adapter.model.transformer
    t = tokenizer.convert_tokens_to_ids(answer)
    d, dh = 32, 8
    with torch.no_grad():
        for name, p in adapter.model.named_parameters():
            if (("c_proj" in name or "mlp" in name) and "ln" not in name) or ("ln" in name and "bias" in name):
                p.zero_()  # the norms' biases too: ln_f's would give the token's logit a head start
        m.wte.weight.normal_(0, 0.02)
        m.wte.weight[:, 0] = 5.0
        m.wte.weight[:, 7] = 0.0
        m.wte.weight[t, 7] = 3.0
        layer, head = WRITER
        m.h[layer].attn.c_attn.weight[:, 2 * d + head * dh].zero_()
        m.h[layer].attn.c_attn.weight[0, 2 * d + head * dh] = 1.0  # v_0 = the normed dimension 0
        m.h[layer].attn.c_proj.weight[head * dh, 7] = 4.0  # z_0 -> dimension 7
    return adapter, t


@pytest.fixture(scope="module")
def writer(bert_tokenizer):
    return hand_set_writer(bert_tokenizer)


def test_hand_set_head_is_the_only_head_dla_names(writer):
    adapter, t = writer
    att = attribute(adapter, decompose(adapter, TEXT), Target(t))
    heads = att.heads().set_index(["layer", "head"])["dla"]
    assert heads.idxmax() == WRITER and heads[WRITER] > 1.0
    assert heads.drop(WRITER).abs().max() < 1e-9  # their output projections are zero
    assert att.total == pytest.approx(att.logit, abs=1e-5)
    assert int(att.table.loc[att.table["dla"].idxmax(), "head"]) == WRITER[1]  # above every MLP and embedding


def test_hand_set_head_is_the_only_head_whose_ov_circuit_writes_the_token(writer, bert_tokenizer):
    adapter, t = writer
    sources = bert_tokenizer.convert_tokens_to_ids(["dog", "mat", "the", "cat"])
    top = ov_top_tokens(adapter, *WRITER, sources, k=3)
    assert (top[top["rank"] == 0]["token"] == t).all()
    for layer in range(2):
        for head in range(4):
            if (layer, head) != WRITER:
                assert ov_top_tokens(adapter, layer, head, sources, k=3)["logit"].abs().max() < 1e-9
    copied = ov_copied_tokens(adapter, *WRITER, k=1)
    assert copied["token"].tolist() == [t] and copied["self_rank"].tolist() == [0]


def test_logit_lens_names_the_layer_where_the_written_token_becomes_top1(writer):
    adapter, t = writer
    lens = logit_lens(adapter, TEXT, Target(t))
    assert lens.becomes_top1() == (1, "resid_mid")  # L1's attention wrote it
    assert (lens.table.iloc[:4]["rank"] > 0).all()
    final = adapter.model(**adapter.inputs_of([TEXT])).logits[0, -1]
    torch.testing.assert_close(lens.logits[-1], final.detach(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_parts_plus_rest_equal_the_logit_and_rest_is_nothing(kind, bert_tokenizer):
    """On a random model (norm gains random): Σ parts + rest + biases = the logit of each
    target kind, and a head's parts over source positions sum to its DLA."""
    adapter = _tiny(kind, bert_tokenizer)
    for target in (target_of(adapter, "cat"), target_of(adapter, "cat", "dog"), Target()):
        att, src = logit_attribution(adapter, TEXT, target, sources=True)
        assert att.total == pytest.approx(att.logit, abs=1e-5) and abs(att.rest) < 1e-6
        summed = src.groupby(["layer", "head"])["dla"].sum().values
        torch.testing.assert_close(torch.tensor(summed), torch.tensor(att.heads()["dla"].values), atol=1e-7, rtol=1e-6)
    # without the fold (gain and per-position scale) the parts would not sum to the logit
    assert abs(att.table["dla"].sum()) > 1e-4


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_decomposed_texts_in_batches_equal_one_text_a_forward(kind, bert_tokenizer, monkeypatch):
    """:func:`decompose_texts` runs right-padded forwards of several texts (fewer forwards
    than texts) and gives every text, by its index, the stream one forward of it alone gives:
    its ids, every component's part, the rest, the scale and the logits (a padded position
    read, or a row mixed up, would differ by far more than float rounding)."""
    from probe.analyses.writes import stream as stream_module
    from probe.tracing import trace as trace_module

    adapter = _tiny(kind, bert_tokenizer)
    texts = ["the cat sat on the mat", "a dog sat", "the dog saw the cat", "the cat sat on a mat", "cat"]
    alone = [decompose(adapter, t) for t in texts]
    forwards = []
    real = trace_module.trace
    monkeypatch.setattr(
        trace_module, "trace", lambda a, batch, **kw: forwards.append(len(batch["input_ids"])) or real(a, batch, **kw)
    )
    got = dict(stream_module.decompose_texts(adapter, texts))
    assert sorted(got) == list(range(len(texts))) and len(forwards) < len(texts) and max(forwards) > 1
    for i, a in enumerate(alone):
        b = got[i]
        assert torch.equal(b.ids, a.ids) and b.tokens == a.tokens and b.labels.equals(a.labels)
        for name in ("parts", "rest", "scale", "logits"):
            torch.testing.assert_close(
                getattr(b, name), getattr(a, name), atol=1e-5, rtol=1e-5, msg=f"text {i}: {name}"
            )


def test_qk_circuit_ranks_a_hand_set_key_first(bert_tokenizer):
    """L0H0's query reads dimension 0 (every token's 5) and its key dimension 7 (3 in
    'cat' only): every destination attends to 'cat' most."""
    adapter, t = hand_set_writer(bert_tokenizer)
    m, d = adapter.model.transformer, 32
    with torch.no_grad():
        w = m.h[0].attn.c_attn.weight
        w[:, : 2 * d].zero_()
        w[0, 0] = 1.0
        w[7, d] = 1.0
    dest = bert_tokenizer.convert_tokens_to_ids(["dog", "the"])
    top = qk_top_sources(adapter, 0, 0, dest, k=2)
    assert (top[top["rank"] == 0]["token"] == t).all()


# ---- bad input: one line, naming the problem ---------------------------------------------


def test_answers_refused_in_one_line(writer):
    adapter, _ = writer
    with pytest.raises(InputError, match=r"'catdogs' is 3 tokens .* give one, e.g. --answer 'cat'"):
        target_of(adapter, "catdogs")
    with pytest.raises(InputError, match="outside .* vocabulary"):
        target_of(adapter, "☃")
    with pytest.raises(InputError, match="same token as --answer"):
        target_of(adapter, "cat", "cat")
    with pytest.raises(InputError, match="--against needs --answer"):
        target_of(adapter, None, "dog")
    with pytest.raises(InputError, match="64"):
        decompose(adapter, " ".join(["dog"] * 80))


def test_models_without_a_linear_read_out_are_refused(tiny_models, bert_tokenizer):
    import transformers as tr

    from probe.models import ModelAdapter

    with pytest.raises(NotApplicable, match="no unembedding"):
        decompose(tiny_models["bert"], TEXT)  # an encoder without an LM head
    with pytest.raises(NotApplicable, match="no unembedding"):
        decompose(tiny_models["gpt2"], TEXT)  # a GPT-2 base model: no LM head
    cfg = tr.BertConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=len(bert_tokenizer)
    )  # an MLM head is an unembedding, but BERT's blocks are post-norm: its stream is no sum of parts
    mlm = ModelAdapter(
        name="tiny-bert-mlm", model=tr.BertForMaskedLM(cfg).eval(), tokenizer=bert_tokenizer, family="bert"
    )
    with pytest.raises(NotApplicable, match="post-norm"):
        decompose(mlm, TEXT)


def test_the_read_out_check_passes_the_unembedding_and_refuses_a_soft_cap(bert_tokenizer):
    """``check_fold`` in float32 (the weights' precision): the unembedding of the final norm's
    output passes; scaled or soft-capped logits are refused."""
    import transformers as tr

    from probe.analyses.writes.folding import check_fold, final_norm, unembedding
    from probe.models import ModelAdapter

    cfg = tr.LlamaConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64, vocab_size=len(bert_tokenizer)
    )
    torch.manual_seed(0)
    model = tr.LlamaForCausalLM(cfg).eval()
    a = ModelAdapter(name="tiny-llama-lm", model=model, tokenizer=bert_tokenizer, family="llama")
    _, fold = final_norm(a)
    w_u, _ = unembedding(a)
    resid = 3 * torch.randn(5, 32, dtype=torch.float64)
    normed = fold.apply(resid).float()
    logits = 40 * (normed.float() @ w_u.float().T)  # large enough for the cap to bind
    with pytest.raises(NotApplicable, match="not the unembedding"):
        check_fold(a, fold, resid, normed, logits)  # scaled
    w_u.mul_(40)  # the model's own head now gives exactly these logits
    check_fold(a, fold, resid, normed, logits)
    with pytest.raises(NotApplicable, match="not the unembedding"):
        check_fold(a, fold, resid, normed, 30 * torch.tanh(logits / 30))  # Gemma 2's final soft-cap


def _one_line(result, *needles):
    lines = [x for x in result.output.strip().splitlines() if x.strip()]
    assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith("Error:"), result.output
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--answer", " t5 t6"], "is 2 tokens"),
        (["--answer", "zebra"], "outside"),
        (["--answer", " t5", "--against", " t5"], "same token"),
    ],
)
def test_cli_refuses_bad_answers_in_one_line(extra, needle, tmp_path):
    from probe.app.cli import main

    args = ["logit-attribution", "--model", "zoo:induction", "--text", "t3 t4 t5 t3 t4", "--out", str(tmp_path / "o")]
    _one_line(CliRunner().invoke(main, args + extra, catch_exceptions=False), needle)


def test_cli_refuses_an_encoder_and_an_over_long_text_in_one_line(tmp_path):
    from probe.app.cli import main

    args = ["logit-attribution", "--text", "The capital of France is", "--out", str(tmp_path / "a")]
    _one_line(CliRunner().invoke(main, args + ["--model", "minilm"]), "no unembedding (no language-model head)")
    long = " ".join(["t3"] * 40)
    args = ["logit-attribution", "--model", "zoo:induction", "--text", long, "--out", str(tmp_path / "b")]
    _one_line(CliRunner().invoke(main, args), "at most 32")


def test_cli_writes_the_table_the_figures_and_parts_that_sum(tmp_path):
    import json

    import pandas as pd

    from probe.app.cli import main

    out = tmp_path / "o"
    args = [
        "logit-attribution",
        "--model",
        "zoo:induction",
        "--text",
        "t3 t4 t5 t3 t4",
        "--answer",
        " t5",
        "--out",
        str(out),
    ]
    r = CliRunner().invoke(main, args, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    heads = pd.read_csv(out / "heads.csv")
    assert list(heads.columns[:4]) == ["example", "layer", "head", "dla"] and len(heads) == 8
    summary = json.loads((out / "logit_attribution.json").read_text())["examples"][0]
    assert summary["parts_plus_rest"] == pytest.approx(summary["logit"], abs=1e-4)
    # the induction heads (layer 1) write the repeated token; layer 0 (previous-token) does not
    assert heads[heads["layer"] == 1]["dla"].min() > heads[heads["layer"] == 0]["dla"].max()
    assert (out / "logit_attribution.png").stat().st_size > 1000 and (out / "logit_lens_0.png").exists()
    assert summary["top1_from"] == {"layer": 1, "stage": "resid_mid"}


def _repeats(n: int, length: int = 8) -> list:
    import random

    rng = random.Random(0)
    out = []
    for _ in range(n):
        seq = " ".join(f"t{rng.randint(3, 40)}" for _ in range(length))
        out.append(f"{seq} {seq}")
    return out


@pytest.mark.slow
def test_writes_the_answer_holds_for_zoo_induction_heads_and_for_no_head_of_its_null():
    """zoo:induction's layer-1 heads copy the repeated token: on repeated random sequences
    they write the model's own next token far above any head of the re-initialised model
    (all four hold); on that re-initialised model itself (against another seed's null) none
    does. The causal check runs on the held heads."""
    import probe
    from probe.analyses.claims.null_model import null_adapter
    from probe.analyses.writes.claim import writes_answer_claims

    adapter = probe.load_model("zoo:induction")
    texts = _repeats(8)
    claims = writes_answer_claims(adapter, texts, n_boot=200, check=0)
    assert claims.held() == [(1, 0), (1, 1), (1, 2), (1, 3)]
    t = claims.table.set_index(["layer", "head"])
    assert (t.loc[1, "ci_low"] > t.loc[1, "null_quantile"]).all()
    assert t.loc[1, "ablation_drop"].notna().all() and t.loc[0, "ablation_drop"].isna().all()
    null = null_adapter(adapter, 0)
    assert writes_answer_claims(null, texts, null=null_adapter(adapter, 1), n_boot=200, check=0).held() == []


@pytest.mark.slow  # ~6 s of forwards on an idle 2-core machine; minutes under load
def test_smollm2_ioi_top_logit_difference_heads_are_confirmed_by_path_patching(smollm2):
    """SmolLM2 does indirect-object identification (Wang et al. 2022) on 6 prompts with names
    from its vocabulary (the indirect object's logit above the subject's in every one); the
    head with the largest logit-difference DLA, L23H3, carries a large share of the
    corruption's effect through its direct path (exact path patching), and so does L23H0.
    What they attend to from the last position differs: L23H0 reads the indirect object (a
    name mover), L23H3 the subject's second occurrence, not the indirect object.
    bench/writes_ioi_smollm2.py: 24 prompts."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from writes_ioi_smollm2 import IO, S, S2, logit_difference, prompts, single_token_names

    from probe.analyses.circuits.edges import Edge
    from probe.analyses.circuits.path_patching import path_patch
    from probe.analyses.common.metrics import CallableMetric
    from probe.analyses.writes.claim import head_effects
    from probe.tracing.trace import trace

    tok = smollm2.tokenizer
    clean, corrupt, answers = prompts(single_token_names(smollm2), 6)
    targets = [
        Target(tok.encode(a, add_special_tokens=False)[0], tok.encode(b, add_special_tokens=False)[0])
        for a, b in answers
    ]
    effects, index = head_effects(smollm2, clean, targets)
    assert (effects.sum(0) > 0).all()  # the heads' direct parts favour the indirect object in every prompt
    table = index.assign(dla=effects.mean(1)).set_index(["layer", "head"])["dla"]
    assert table.idxmax() == (23, 3) and table[(23, 0)] > 0.5
    edges = [Edge(23, 3, -1, -1, "out"), Edge(23, 0, -1, -1, "out")]
    res = path_patch(smollm2, clean, corrupt, objective=CallableMetric(logit_difference), edges=edges)
    assert (res.clean > 0).all() and res.clean.mean() > 3 * res.corrupted.mean()  # it answers the IO in all 6
    effect = dict(zip(zip(res.table["sender_layer"], res.table["sender_head"]), res.table["effect"]))
    assert effect[(23, 3)] > 0.3 and effect[(23, 0)] > 0.1
    pattern = trace(smollm2, smollm2.inputs_of(clean), read="pattern")["blocks.23.attn.hook_pattern"][:, :, -1]
    assert (pattern[:, 0, IO] > pattern[:, 0, S] + pattern[:, 0, S2]).all()  # L23H0: the indirect object
    assert (pattern[:, 3, S2] > 3 * pattern[:, 3, IO]).all()  # L23H3: the subject's second occurrence


# ---- a templated task: one answer per example (--task) ------------------------------------

TASK = [
    {"text": "t3 t4 t5 t3 t4", "answer": " t5", "against": " t3"},
    {"text": "t7 t1 t9 t7 t1", "answer": " t9", "against": " t7"},
    {"text": "t2 t8 t6 t2 t8", "answer": " t6"},
    {"text": "t5 t0 t4 t5 t0", "answer": " t4", "against": " t0"},
]


def _task(tmp_path, lines) -> str:
    import json

    path = tmp_path / "task.jsonl"
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    return str(path)


def test_cli_task_reads_each_examples_answer_and_gives_each_heads_mean_and_interval(tmp_path):
    """Each example's heads are its own answer's (− against's) DLA, equal to attributing
    that example alone; head_means.csv is their mean per head with a bootstrap interval
    around it; the induction heads write each example's answer."""
    import pandas as pd

    import probe
    from probe.app.cli import main

    out = tmp_path / "o"
    args = ["logit-attribution", "--model", "zoo:induction", "--task", _task(tmp_path, TASK), "--out", str(out)]
    r = CliRunner().invoke(main, args, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "4 examples: mean logit" in r.output and "95% bootstrap interval" in r.output
    heads, means = pd.read_csv(out / "heads.csv"), pd.read_csv(out / "head_means.csv")
    adapter = probe.load_model("zoo:induction")
    for i, ex in enumerate(TASK):
        att = attribute(adapter, decompose(adapter, ex["text"]), target_of(adapter, ex["answer"], ex.get("against")))
        mine = heads[heads["example"] == i]["dla"].to_numpy()
        torch.testing.assert_close(torch.tensor(mine), torch.tensor(att.heads()["dla"].to_numpy()), atol=1e-6, rtol=0)
    expected = heads.groupby(["layer", "head"])["dla"].mean().to_numpy()
    torch.testing.assert_close(torch.tensor(means["dla"].to_numpy()), torch.tensor(expected), atol=1e-9, rtol=0)
    assert (means["count"] == 4).all() and (means["ci_low"] <= means["dla"]).all()
    assert (means["dla"] <= means["ci_high"]).all() and (means["ci_high"] > means["ci_low"]).all()
    assert means[means["layer"] == 1]["ci_low"].min() > means[means["layer"] == 0]["dla"].max()


@pytest.mark.parametrize(
    "line, needle",
    [
        ("{not json", "line 2: not JSON"),
        ('["t3 t4", " t5"]', "line 2: a JSON list, not an object"),
        ('{"text": "t3 t4 t5 t3 t4"}', "line 2: 'answer' is missing"),
        ('{"text": "t3 t4", "answer": " t5", "anwser": " t3"}', "line 2: unknown key(s) 'anwser'"),
        ('{"text": "t3 t4", "answer": " t5", "against": 3}', "line 2: 'against' is a int"),
        ('{"text": "t3 t4", "answer": " t5 t6"}', "line 2: the answer ' t5 t6' is 2 tokens"),
        ('{"text": "t3 t4", "answer": " t5", "against": " t5"}', "line 2: --against ' t5' is the same token"),
        ('{"text": "' + " ".join(["t3"] * 40) + '", "answer": " t5"}', "line 2: text has 41 tokens"),
    ],
)
def test_cli_task_refuses_a_bad_line_in_one_line_naming_it(line, needle, tmp_path):
    from probe.app.cli import main

    path = _task(tmp_path, [TASK[0], line])
    args = ["logit-attribution", "--model", "zoo:induction", "--task", path, "--out", str(tmp_path / "o")]
    _one_line(CliRunner().invoke(main, args, catch_exceptions=False), needle, path)
    assert not (tmp_path / "o").exists()


def test_cli_task_refuses_text_or_answer_beside_it(tmp_path):
    from probe.app.cli import main

    path = _task(tmp_path, TASK)
    base = ["logit-attribution", "--model", "zoo:induction", "--task", path, "--out", str(tmp_path / "o")]
    _one_line(CliRunner().invoke(main, base + ["--text", "t3 t4"]), "leave out --text")
    _one_line(CliRunner().invoke(main, base + ["--answer", " t5"]), "leave out --answer")
    _one_line(CliRunner().invoke(main, base[:4] + [_task(tmp_path, [""]), "--out", str(tmp_path / "o")]), "no example")


def test_the_claims_batched_causal_check_equals_one_text_at_a_time(bert_tokenizer):
    """The mean-ablation check reads right-padded batches: each text's read logits, the
    heads' mean z over real positions and a head's drop equal those of one text a forward."""
    from probe.analyses.writes import claim

    adapter = _tiny("llama", bert_tokenizer)
    texts = ["the cat sat on the mat", "a dog", "the dog saw the cat and the bird sang"]
    batched = claim._reads(adapter, texts, None)
    alone = [claim._reads(adapter, [t], None)[0] for t in texts]
    for b, a in zip(batched, alone):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5)
    assert [len(b) for b in batched] == [int(adapter.inputs_of([t])["attention_mask"].sum()) - 1 for t in texts]
    mean_z = claim._mean_z(adapter, texts)
    per_text = [claim._mean_z(adapter, [t]) for t in texts]
    counts = [len(b) + 1 for b in batched]
    expected = sum(m[1] * c for m, c in zip(per_text, counts)) / sum(counts)
    torch.testing.assert_close(mean_z[1], expected, atol=1e-6, rtol=1e-6)
    drop = claim._ablation_drop(adapter, texts, None, 1, 2, mean_z, batched)
    one_by_one = [claim._ablation_drop(adapter, [t], None, 1, 2, mean_z, [a]) for t, a in zip(texts, alone)]
    assert drop == pytest.approx(sum(one_by_one) / 3, abs=1e-5) and abs(drop) > 1e-4
