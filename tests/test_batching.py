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
from probe.inputs.padding import padding_leak
from probe.models import ModelAdapter
from probe.models.batching import ANY_LENGTHS, LEAK_TOLERANCE, ONE_LENGTH, one_length_batches

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


def test_a_padded_batch_is_refused_in_one_line_for_a_leaking_model(leaky):
    import probe

    adapter = leaky["nystromformer"]
    with pytest.raises(InputError, match="one length per batch.*3 token lengths.*batch_size=1") as err:
        probe.trace(adapter, TEXTS, read="pattern")
    assert "\n" not in str(err.value)
    same = probe.trace(adapter, [TEXTS[1], TEXTS[1]], read="blocks.1.attn.hook_pattern")  # one length: one batch
    torch.testing.assert_close(same["blocks.1.attn.hook_pattern"][0], same["blocks.1.attn.hook_pattern"][1])


def test_one_length_batches_split_and_keep_every_index():
    lengths = [5, 7, 5, 9, 7]
    got = list(one_length_batches([[0, 1, 2], [3, 4]], lengths))
    assert got == [[0, 2], [1], [3], [4]]
