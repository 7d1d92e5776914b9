"""One Objective: every built-in is one, and its two faces give the values computed by hand.

The sweep face (``batches`` → ``forward`` → ``score``, what ablation and the claims'
removal sweeps read) and the gradient face (``aux`` → ``output`` → ``scalar``, what captum
attributes through :func:`scalar_function`) are checked against an independent
computation with plain ``torch`` on tiny random models with heads; a face that does not
apply raises ``NotApplicable``. ``auto`` is resolved by :func:`resolve_objective` only: the
entry points are run with it replaced by a spy.
"""

from __future__ import annotations

import pytest
import torch

from probe.analyses.common.objective import NAMES, Objective, resolve_objective, scalar_function
from probe.errors import NotApplicable
from probe.inputs.corpus import Corpus

TEXTS = ("the cat sat on the mat", "dogs bark", "a b c d e f g")


def _adapter(kind: str, tokenizer):
    import transformers as T

    from probe.models import ModelAdapter

    common = dict(vocab_size=len(tokenizer), pad_token_id=0)
    torch.manual_seed(0)
    if kind == "gpt2":
        model = T.GPT2LMHeadModel(T.GPT2Config(n_embd=32, n_layer=2, n_head=4, **common))
        family = "gpt2"
    else:
        cfg = T.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, **common)
        model = {"mlm": T.BertForMaskedLM, "seqcls": T.BertForSequenceClassification, "bert": T.BertModel}[kind](cfg)
        family = "bert"
    model.eval()
    return ModelAdapter(name=f"tiny-{kind}", model=model, tokenizer=tokenizer, family=family)


@pytest.fixture(scope="module")
def heads(bert_tokenizer):
    return {k: _adapter(k, bert_tokenizer) for k in ("gpt2", "mlm", "seqcls", "bert")}


def _sweep(obj, a, corpus) -> torch.Tensor:
    """The sweep face: one score per example, in corpus order."""
    out = torch.empty(len(corpus), dtype=torch.float64)
    with torch.no_grad():
        for idx, batch in obj.batches(a, corpus, batch_size=2):
            o = obj.forward(a, batch)
            out[idx] = obj.score(o, batch, obj.reference(o, batch)).double()
    return out


def _gradient(obj, a, corpus) -> torch.Tensor:
    """The gradient face through captum's forward (:func:`scalar_function`), with a gradient."""
    inputs = a.batch([a.encode(t) for t in corpus.texts])
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    aux = obj.aux(a, ids, mask)
    value = scalar_function(a, obj)(ids, mask, aux)
    a.model.zero_grad()
    value.sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in a.model.parameters())
    return value.detach().double()


def _logits(a, text: str) -> torch.Tensor:
    enc = a.encode(text)
    with torch.no_grad():
        return a.model(input_ids=enc.input_ids[None], attention_mask=torch.ones(1, len(enc))).logits[0].double()


def test_every_builtin_is_one_objective(heads):
    for name in NAMES:
        adapter = heads["gpt2"] if name in ("loss", "next-token-loss") else heads["bert"]
        if name == "prediction-kl":  # the class distribution of a sequence classifier's head
            adapter = heads["seqcls"]
        if name == "accuracy":  # a zoo task's ground truth: the object, not checked on a model
            adapter = None
        # four different sentences at least: the similarity structure of fewer is refused (issue 59 row 18)
        texts = tuple(TEXTS) * 2 + ("A fourth sentence, unlike the others.",)
        obj, _ = resolve_objective(name, adapter, Corpus(texts=texts, source="texts"))
        assert isinstance(obj, Objective), name
    for spec in ("logit", "logit:1", "loss:-1", "mlm", "probe:tense", "similarity"):
        assert isinstance(resolve_objective(spec, heads["gpt2"], use="explain")[0], Objective), spec
    for spec in ("logit:0", "loss:-1", "mlm", "embedding-drift"):
        assert isinstance(resolve_objective(spec, heads["gpt2"], use="per-example")[0], Objective), spec


def _nll_by_hand(a, positions) -> torch.Tensor:
    """Per text, the mean of ``−log p(ids[q])`` read at position ``p`` over ``positions(n)``'s
    ``(p, q)`` pairs (``n``: the text's tokens)."""
    out = []
    for t in TEXTS:
        lp, ids = torch.log_softmax(_logits(a, t), -1), a.encode(t).input_ids
        p, q = positions(len(ids))
        out.append(float(-lp[p, ids[q]].mean()))
    return torch.tensor(out, dtype=torch.float64)


def _both_faces(obj, a, want) -> None:
    corpus = Corpus(texts=TEXTS, source="texts")
    assert torch.allclose(_gradient(obj, a, corpus), want, atol=1e-5), obj.name
    assert torch.allclose(_sweep(obj, a, corpus), want, atol=1e-5), obj.name


def test_next_token_loss_both_faces(heads):
    """``loss`` on a causal LM: the mean next-token cross-entropy of each sentence."""
    a = heads["gpt2"]
    obj, _ = resolve_objective("loss", a, use="per-example")
    _both_faces(obj, a, _nll_by_hand(a, lambda n: (torch.arange(n - 1), torch.arange(1, n))))


@pytest.mark.parametrize("pos", [-1, 2])
def test_token_loss_both_faces(heads, pos):
    """``loss:<position>`` on a causal LM: ``−log p(token at p | prefix)``."""
    a = heads["gpt2"]
    obj, _ = resolve_objective(f"loss:{pos}", a, use="explain")
    _both_faces(obj, a, _nll_by_hand(a, lambda n: ([pos % n - 1], [pos % n])))


def test_class_logit_both_faces(heads):
    """``logit``: each example's predicted class's logit; ``logit:1``: class 1's."""
    a = heads["seqcls"]
    logits = torch.stack([_logits(a, t) for t in TEXTS])
    for spec, want in (("logit", logits.max(-1).values), ("logit:1", logits[:, 1])):
        obj, _ = resolve_objective(spec, a, use="explain")
        assert obj.higher_is_better
        _both_faces(obj, a, want)


def test_own_tokens_loss_both_faces(heads):
    """``mlm``: the mean ``−log p(token)`` of the word tokens, read where they stand."""
    a = heads["mlm"]
    obj, _ = resolve_objective("mlm", a, use="explain")
    _both_faces(obj, a, _nll_by_hand(a, lambda n: (torch.arange(1, n - 1), torch.arange(1, n - 1))))


def test_probe_and_pair_similarity_both_faces(heads):
    """A linear probe's logit on the mean-pooled, L2-normalised embedding, and the cosine of
    each sentence's pooled embedding to its nearest neighbour's (held fixed)."""
    from probe.analyses.common.targets import ProbeLogit
    from probe.analyses.explanation.pairs import similarity_target

    a = heads["bert"]
    inputs = a.batch([a.encode(t) for t in TEXTS])
    with torch.no_grad():
        h = a.model(**inputs).last_hidden_state.double()
    m = inputs["attention_mask"].double()[..., None]
    pooled = (h * m).sum(1) / m.sum(1)
    torch.manual_seed(0)
    linear = torch.nn.Linear(32, 1)
    want = (torch.nn.functional.normalize(pooled, dim=-1) @ linear.weight.double().T)[:, 0] + float(
        linear.bias.detach()
    )
    _both_faces(ProbeLogit(linear), a, want)
    target, corpus, _ = similarity_target(a, Corpus(texts=TEXTS, source="texts"))
    e = target.pooling.pool(h, inputs["attention_mask"])
    cos = torch.nn.functional.cosine_similarity(e[:, None], e[None], dim=-1).fill_diagonal_(-2)
    _both_faces(target, a, cos.max(-1).values)


def test_drift_and_callables_both_faces(heads):
    """``embedding-drift`` is 0 on the clean input through both faces; a callable objective
    gives its own function's value through both."""
    from probe.analyses.common.metrics import CallableMetric
    from probe.analyses.common.targets import CallableTarget

    a = heads["bert"]
    corpus = Corpus(texts=TEXTS, source="texts")
    drift, _ = resolve_objective("embedding-drift", a, corpus, use="per-example")
    assert torch.allclose(_sweep(drift, a, corpus), torch.zeros(3, dtype=torch.float64), atol=1e-6)
    inputs = a.batch([a.encode(t) for t in TEXTS])
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    assert torch.allclose(
        scalar_function(a, drift)(ids, mask, drift.aux(a, ids, mask)).double(),
        torch.zeros(3, dtype=torch.float64),
        atol=1e-6,
    )
    with torch.no_grad():
        h = a.model(**inputs).last_hidden_state
    want = h[:, 0].sum(-1).double()
    metric = CallableMetric(lambda out, batch: out.last_hidden_state[:, 0].sum(-1), name="cls-sum")
    target = CallableTarget(lambda out, m: out.last_hidden_state[:, 0].sum(-1), name="cls-sum")
    for obj in (metric, target):
        assert isinstance(obj, Objective)
        _both_faces(obj, a, want)


def test_a_face_that_does_not_apply_says_so(heads):
    """Accuracy has no gradient; the similarity structure no per-input scalar; the masked-LM
    loss corrupts its input (attribute ``mlm`` instead)."""
    a = heads["mlm"]
    inputs = a.batch([a.encode(t) for t in TEXTS])
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    for name in ("accuracy", "loss"):
        obj, _ = resolve_objective(name)
        with pytest.raises(NotApplicable):
            obj.aux(a, ids, mask)
    sim, _ = resolve_objective("similarity-structure")
    with pytest.raises(NotApplicable, match="no per-input scalar"):
        sim.scalar(None, mask, None)


def test_auto_is_resolved_by_resolve_objective_only(heads, monkeypatch):
    """Every entry point that takes ``auto`` (the Python API's metric and target, a run's
    objective for each use: the registry's --objective and the circuit's) hands it to
    :func:`resolve_objective`: with a spy in its place, each call is seen."""
    import probe.analyses.common.objective as O
    from probe.analyses.common.objective import default_metric, get_metric
    from probe.analyses.common.objective import parse_target
    from probe.app.registry import open_run
    from probe.app.registry.analyses import circuit, faithfulness

    seen = []
    real = O.resolve_objective

    def spy(spec="auto", *a, **k):
        seen.append((spec, k.get("use", "corpus")))
        return real(spec, *a, **k)

    monkeypatch.setattr(O, "resolve_objective", spy)
    a = heads["gpt2"]
    corpus = Corpus(texts=TEXTS, source="texts")
    ctx = open_run(a, corpus, params={"partner_file": None})
    assert get_metric("auto", a, corpus).name == "loss"
    assert default_metric(a, corpus)[0] == "loss"
    assert parse_target("auto", a).name == "loss:-1"
    assert ctx.objective("per-example").called == "loss"
    assert faithfulness.default_target(ctx) == "loss:-1"
    assert circuit._objective(ctx, corpus).name == "loss"
    assert faithfulness.default_target(ctx) == "loss:-1"  # asked again: kept, not resolved again
    assert [s for s, _ in seen] == ["auto"] * 6
    assert {u for _, u in seen} == {"per-example", "explain", "gradient"}


def test_every_command_line_choice_is_a_name_resolve_objective_knows():
    """The names the one --objective offers are written out as data
    (:mod:`probe.analyses.common.objective_names`: the top floor's --help imports no torch);
    each is a name the one parser accepts for its use, and each analysis that declares an
    objective names a use."""
    from probe.analyses.common.objective import USES
    from probe.analyses.common.objective_names import FORMS, known_for
    from probe.app.registry import registered

    for use, names in FORMS.items():
        for name in names:
            if "<" in name or name in ("similarity", "probe:<property>"):
                continue  # a form with an argument, or fitted on the data first
            assert known_for(name, use) and isinstance(resolve_objective(name, use=use)[0], Objective), (use, name)
    declared = {a.name: a.objective for a in registered() if a.objective}
    assert set(declared.values()) == set(USES), declared
    assert not known_for("auto", "corpus") and not known_for("banana", "explain")
