"""Models whose padding leaks into other positions run one length per batch (issue 39, part 4).

ConvBERT (span-based dynamic convolution, Jiang et al. 2020) and Nyströmformer (a depthwise
convolution on the values, Xiong et al. 2021) mix positions outside the attention mask, so
in a right-padded batch a text's maps depend on its batch-mates. The adapter finds them at
load (``adapter.batching``, the card, a warning), and capture then batches texts of one token
length: each text gets exactly the maps of its own forward. Tiny random models from their
configs; ``initializer_range=0.3`` makes the leak large enough to see in the maps (the
default 0.02 leaves it at ~1e-5 in a 2-layer model).
"""

from __future__ import annotations

import logging

import pytest
import torch

from probe.errors import InputError
from probe.inputs.padding import padded_inputs, padding_leak
from probe.models import ModelAdapter
from probe.models.batching import ANY_LENGTHS, LEAK_TOLERANCE, ONE_LENGTH, one_length_batches
from probe.runs.capture import AttentionCapture, capture

# three token lengths (5, 11, 14 with MiniLM's tokenizer), not in length order
TEXTS = ["Birds sing in the tall green trees at dawn.", "A dog barked.", "The cat sat on the mat today."]
LEAKY = ("convbert", "nystromformer")


def _leaky(kind: str, tokenizer) -> ModelAdapter:
    import transformers as T

    size = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
    config = {"convbert": T.ConvBertConfig, "nystromformer": T.NystromformerConfig}[kind](
        vocab_size=len(tokenizer), initializer_range=0.3, **size
    )
    torch.manual_seed(0)
    model = {"convbert": T.ConvBertModel, "nystromformer": T.NystromformerModel}[kind](config)
    return ModelAdapter(name=f"tiny-{kind}", model=model, tokenizer=tokenizer, family=kind)


class _Said(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture(scope="module")
def leaky(bert_tokenizer):
    """kind -> adapter, and under "said" the warnings their loading logged."""
    said, logger = _Said(), logging.getLogger("probe.models.adapter")
    logger.addHandler(said)
    try:
        out: dict = {kind: _leaky(kind, bert_tokenizer) for kind in LEAKY}
    finally:
        logger.removeHandler(said)
    out["said"] = said.lines
    return out


def test_leaking_models_are_found_at_load_and_say_so(leaky):
    for kind, conv in (("convbert", "Conv1d"), ("nystromformer", "Conv2d")):
        adapter = leaky[kind]
        assert adapter.batching == ONE_LENGTH
        card = adapter.describe()["card"]["batching"]
        assert card.startswith(ONE_LENGTH) and conv in card and "outputs move by" in card, card
        assert padding_leak(adapter) > 100 * LEAK_TOLERANCE  # the detection agrees with the measurement
    assert sum(ONE_LENGTH in m and "padded batch would change" in m for m in leaky["said"]) == 2, leaky["said"]


def test_masked_models_batch_any_lengths(tiny_models, minilm):
    for adapter in (tiny_models["bert"], tiny_models["gpt2"], tiny_models["llama"], minilm):
        assert adapter.batching == ANY_LENGTHS, adapter.name
        assert "batching" not in adapter.card
        assert adapter.batch(adapter.encode_batch(TEXTS))["input_ids"].shape[0] == 3  # padded batches allowed


@pytest.mark.parametrize("kind", LEAKY)
def test_capture_gives_each_text_the_maps_of_its_own_forward(leaky, kind):
    adapter = leaky[kind]
    encs = adapter.encode_batch(TEXTS)
    lengths = [len(e) for e in encs]
    assert len(set(lengths)) == 3
    alone = [capture(adapter, [t])[0].attentions for t in TEXTS]
    # before: one right-padded forward of the three (what capture did) moves the maps
    batch = padded_inputs(adapter, TEXTS, side="right")
    with AttentionCapture(adapter) as cap, torch.no_grad():
        adapter.model(**batch)
    padded = cap.stacked()
    worst = max(float((padded[:, i, :, :n, :n] - alone[i]).abs().max()) for i, n in enumerate(lengths))
    assert worst > 0.05, worst
    # now: one length per batch, each text exactly its own maps, in input order
    maps = capture(adapter, TEXTS, batch_size=16)
    assert [m.text for m in maps] == TEXTS
    for m, own, enc in zip(maps, alone, encs):
        assert m.tokens == enc.tokens
        torch.testing.assert_close(m.attentions, own, atol=1e-5, rtol=0)


def test_a_padded_batch_is_refused_in_one_line_for_a_leaking_model(leaky):
    import probe

    adapter = leaky["nystromformer"]
    with pytest.raises(InputError, match="one length per batch.*3 token lengths.*batch_size=1") as err:
        probe.trace(adapter, TEXTS, read="pattern")
    assert "\n" not in str(err.value)
    same = probe.trace(adapter, [TEXTS[1], TEXTS[1]], read="blocks.1.attn.hook_pattern")  # one length: one batch
    torch.testing.assert_close(same["blocks.1.attn.hook_pattern"][0], same["blocks.1.attn.hook_pattern"][1])


def test_streaming_and_mean_ablation_batch_one_length(leaky):
    from probe.interventions.heads import head_output_means
    from probe.runs.streaming import stream_layers

    adapter = leaky["nystromformer"]
    seen: list = []
    n = stream_layers(adapter, TEXTS * 2, lambda b: seen.append((b.meta.indices, b.rows)), layers=[1])
    assert n == 6 and sorted(i for idx, _ in seen for i in idx) == list(range(6))
    lengths = [len(e) for e in adapter.encode_batch(TEXTS * 2)]
    own = [capture(adapter, [t], layers=[1])[0].attentions[0] for t in TEXTS]
    for idx, rows in seen:
        assert len({lengths[i] for i in idx}) == 1  # one length per forward: no padding
        for i, a in zip(idx, rows):
            torch.testing.assert_close(a, own[i % 3], atol=1e-5, rtol=0)
    means = head_output_means(adapter, TEXTS)
    one_by_one = [head_output_means(adapter, [t]) for t in TEXTS]
    weights = torch.tensor(lengths[:3], dtype=torch.float64)
    want = sum(w * m for w, m in zip(weights, one_by_one)) / weights.sum()
    torch.testing.assert_close(means, want, atol=1e-6, rtol=1e-6)


def test_one_length_batches_split_and_keep_every_index():
    lengths = [5, 7, 5, 9, 7]
    got = list(one_length_batches([[0, 1, 2], [3, 4]], lengths))
    assert got == [[0, 2], [1], [3], [4]]


def test_the_analyses_batchers_form_batches_of_one_length(leaky, tiny_models):
    """Every batcher the analyses use groups a leaking model's texts by token length and
    covers each example once; a masked model keeps its mixed batches. End to end, the
    similarity analyses' embeddings equal each text's own forward."""
    from probe.analyses.claims.removal import sweep_batches
    from probe.analyses.common.metrics import as_corpus
    from probe.analyses.common.pooling import Pooling
    from probe.analyses.explanation.counterfactual import _permutation_groups
    from probe.analyses.explanation.pairs import embed
    from probe.inputs.budget import length_groups

    texts = TEXTS * 2
    for adapter, one in ((leaky["nystromformer"], True), (tiny_models["bert"], False)):
        lengths = [len(e) for e in adapter.encode_batch(texts)]
        ascending = sorted(lengths)
        forms = {
            "length_groups": [list(g) for g in length_groups(lengths, adapter, cap=16)],
            "sweep_batches": [list(idx) for _, idx in sweep_batches(adapter, as_corpus(texts), 16)],
            "permutations": [list(range(a, b)) for a, b, _ in _permutation_groups(adapter, ascending, 2, 64)],
        }
        for name, groups in forms.items():
            assert sorted(i for g in groups for i in g) == list(range(6)), name
            of = ascending if name == "permutations" else lengths
            mixed = max(len({of[i] for i in g}) for g in groups)
            assert (mixed == 1) == one, (adapter.name, name, groups)
    adapter = leaky["nystromformer"]
    pooling = Pooling(mode="mean")
    together = embed(adapter, TEXTS, pooling)
    for i, text in enumerate(TEXTS):
        torch.testing.assert_close(together[i], embed(adapter, [text], pooling)[0], atol=1e-5, rtol=0)


def test_an_unmeasurable_model_is_judged_by_the_convolutions_inside_its_layers():
    """Where no forward on ids can run (here: no vocabulary in a config), a convolution in a
    layer that holds attention flags the model; one outside (a vision tower's patch
    convolution) does not; without layer names every convolution counts."""
    from probe.models.batching import layer_prefixes, padding_check

    model = torch.nn.Module()
    model.layers = torch.nn.ModuleList([torch.nn.Module()])
    model.layers[0].attention = torch.nn.Linear(4, 4)
    model.layers[0].mix = torch.nn.Conv1d(4, 4, kernel_size=3, padding=1, groups=4)
    model.tower = torch.nn.Conv2d(3, 4, kernel_size=(2, 2))
    model.pointwise = torch.nn.Conv1d(4, 4, kernel_size=1)
    layers = layer_prefixes(["layers.0.attention", "embeddings"])
    assert layers == ("layers.0.",)
    why = padding_check(model, 0, layers)
    assert why is not None and "Conv1d layers.0.mix (kernel (3,), and 1 more)" in why and "not measured" in why
    del model.layers[0].mix
    assert padding_check(model, 0, layers) is None  # only the tower's convolution is left
    assert padding_check(model, 0) is not None  # no layer names: it counts
    del model.tower
    assert padding_check(model, 0) is None  # a kernel of 1 mixes no positions
