"""Capture equals Hugging Face's own eager attention; hooks never leak."""

import pytest
import torch

from conftest import LAW, tiny_llama_lm
from probe.runs.capture import AttentionCapture, capture
from probe.tracing.attention_interface import active_sessions, attention_path
from probe.tracing.hooks import count_hooks

TEXTS = ["The cat sat on the mat.", "A much longer sentence, with commas, that makes the batch ragged and padded."]


def hf_attentions(adapter, texts, key="attentions", targets=None):
    """Reference: transformers' output_attentions with eager attention, per example."""
    encs = [adapter.encode(t) for t in texts]
    inputs = adapter.batch(encs)
    if adapter.arch == "encoder-decoder":
        tenc = [adapter.encode(t, target=True) for t in (targets or texts)]
        inputs.update(adapter.decoder_inputs(tenc))
    model = adapter.model
    prev = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            out = model(**inputs, output_attentions=True)
    finally:
        model.set_attn_implementation(prev)
    return encs, torch.stack(getattr(out, key))  # [layer, batch, head, q, k]


def test_minilm_matches_output_attentions(minilm):
    maps = capture(minilm, TEXTS)
    encs, ref = hf_attentions(minilm, TEXTS)
    for i, (m, e) in enumerate(zip(maps, encs)):
        n = len(e)
        assert m.attentions.shape == (6, 12, n, n)
        assert torch.allclose(m.attentions, ref[:, i, :, :n, :n], atol=1e-5)
        assert torch.allclose(m.attentions.sum(-1), torch.ones(6, 12, n), atol=1e-5)
    # the maps say which path computed them (the choice follows the installed transformers)
    chosen = "interface" if attention_path(minilm) == "interface" else "eager"
    assert maps[0].meta["attention_source"] == f"{chosen} (switched from sdpa)"
    assert minilm.model.config._attn_implementation == "sdpa"  # restored
    hooked = capture(minilm, TEXTS, path="hooks")  # the reference path gives the same maps
    assert hooked[0].meta["attention_source"] == "eager (switched from sdpa)"
    assert all(torch.equal(h.attentions, m.attentions) for h, m in zip(hooked, maps))


@pytest.mark.parametrize("family", ["bert", "roberta", "distilbert", "gpt2", "llama"])
def test_tiny_models_match_output_attentions(tiny_models, family):
    adapter = tiny_models[family]
    maps = capture(adapter, TEXTS, batch_size=2)
    encs, ref = hf_attentions(adapter, TEXTS)
    for i, (m, e) in enumerate(zip(maps, encs)):
        n = len(e)
        assert torch.allclose(m.attentions, ref[:, i, :, :n, :n], atol=1e-5)
        assert torch.allclose(m.attentions.sum(-1), torch.ones_like(m.attentions.sum(-1)), atol=1e-5)
    if family in ("gpt2", "llama"):
        a = maps[1].attentions
        assert maps[1].kind == "causal"
        upper = torch.triu(torch.ones(a.shape[-1], a.shape[-1], dtype=torch.bool), diagonal=1)
        assert a[..., upper].abs().max() == 0  # nothing above the diagonal


@pytest.mark.parametrize("family", ["bart", "t5"])
def test_encoder_decoder_all_stacks(tiny_models, family):
    adapter = tiny_models[family]
    targets = ["le chat", "une phrase beaucoup plus longue avec des virgules"]
    enc_maps = capture(adapter, TEXTS, stack="encoder")
    cross = capture(adapter, TEXTS, stack="cross", targets=targets)
    dec = capture(adapter, TEXTS, stack="decoder", targets=targets)
    encs, ref_enc = hf_attentions(adapter, TEXTS, "encoder_attentions", targets)
    _, ref_cross = hf_attentions(adapter, TEXTS, "cross_attentions", targets)
    _, ref_dec = hf_attentions(adapter, TEXTS, "decoder_attentions", targets)
    for i, e in enumerate(encs):
        n = len(e)
        t = len(adapter.encode(targets[i], target=True))
        assert torch.allclose(enc_maps[i].attentions, ref_enc[:, i, :, :n, :n], atol=1e-5)
        assert cross[i].kind == "cross" and cross[i].attentions.shape == (2, 4, t, n)  # target × source
        assert torch.allclose(cross[i].attentions, ref_cross[:, i, :, :t, :n], atol=1e-5)
        assert torch.allclose(dec[i].attentions, ref_dec[:, i, :, :t, :t], atol=1e-5)
        assert torch.triu(dec[i].attentions[0, 0], diagonal=1).abs().max() == 0
    with pytest.raises(ValueError, match="target texts"):
        capture(adapter, TEXTS, stack="cross")


def test_partial_layers_keep_true_indices(minilm):
    m = capture(minilm, TEXTS[:1], layers=[1, 4])[0]
    full = capture(minilm, TEXTS[:1])[0]
    assert m.layers == (1, 4)
    # layers not recorded run SDPA (as the model does outside a capture): equal to rounding
    assert torch.allclose(m.layer(4), full.layer(4), atol=1e-6)
    with pytest.raises(ValueError, match="not captured"):
        m.layer(2)
    with pytest.raises(ValueError, match="out of range"):
        capture(minilm, TEXTS[:1], layers=[6])


def test_its_attends_to_law_in_some_head(minilm):
    """Vaswani et al. (2017), appendix: some head resolves "its" to "Law"."""
    m = capture(minilm, LAW)[0]
    w = m.word_level(keep_special=False)
    words = list(w.units)
    its, law = words.index("its"), words.index("Law")
    row = w.attentions[:, :, its, :]  # [layer, head, words]
    found = [(l, h) for l in range(6) for h in range(12) if row[l, h].argmax().item() == law]
    assert found, "no head attends from 'its' most to 'Law'"
    # and it is a real peak: the best such head gives 'Law' more than any other word
    l, h = max(found, key=lambda lh: row[lh[0], lh[1], law].item())
    assert row[l, h, law] > 0.3


def _attached(model) -> int:
    """Hooks plus attention-interface sessions on the model's modules."""
    return count_hooks(model) + active_sessions(model)


@pytest.mark.parametrize("path", ["hooks", "interface"])
def test_no_hook_left_after_forward_raises(minilm, path):
    # transformers attaches hooks of its own at the first forward that asks for attentions and
    # keeps them: count after one, so the test does not depend on which test ran first
    with AttentionCapture(minilm, path="hooks"), torch.no_grad():
        minilm.model(input_ids=torch.tensor([[101, 102]]))
    before = _attached(minilm.model)
    with pytest.raises(RuntimeError, match="boom"):
        with AttentionCapture(minilm, path=path):
            # one per layer; the hook path also asks the model for output_attentions
            assert _attached(minilm.model) == before + 6 + (path == "hooks")
            raise RuntimeError("boom")
    assert _attached(minilm.model) == before
    assert minilm.model.config._attn_implementation == "sdpa"
    # a forward that itself fails inside the capture
    with pytest.raises(Exception):  # noqa: B017 (whatever the model raises; the test is the cleanup)
        with AttentionCapture(minilm, path=path):
            minilm.model(input_ids=torch.tensor([[101, 99999999]]))
    assert _attached(minilm.model) == before
    assert minilm.model.config._attn_implementation == "sdpa"


@pytest.mark.parametrize("path,inside", [("hooks", "eager"), ("interface", "probe_eager")])
def test_nested_captures_record_independently(minilm, path, inside):
    batch = minilm.batch([minilm.encode(TEXTS[0])])
    before = _attached(minilm.model)
    with AttentionCapture(minilm, layers=[0], path=path) as outer:
        with AttentionCapture(minilm, layers=[0, 3], path=path) as inner:
            with torch.no_grad():
                minilm.model(**batch)
        assert minilm.model.config._attn_implementation == inside  # outer still active
        assert torch.equal(outer.layer_tensors()[0], inner.layer_tensors()[0])
        assert set(inner.layer_tensors()) == {0, 3}
    assert minilm.model.config._attn_implementation == "sdpa"
    assert _attached(minilm.model) == before


def test_capture_does_not_touch_grad_mode(minilm):
    assert torch.is_grad_enabled()
    capture(minilm, TEXTS[:1])
    assert torch.is_grad_enabled()


def test_word_alignment_from_treebank_spans(minilm):
    text = "I don't know."
    spans = [(0, 1), (2, 4), (4, 7), (8, 12), (12, 13)]  # UD: I do n't know .
    e = minilm.encode(text, spans)
    assert e.words == ("I", "do", "n't", "know", ".")
    assert not e.unaligned_words
    by_word = {}
    for tok, w in zip(e.tokens, e.word_ids):
        if w is not None:
            by_word.setdefault(w, []).append(tok)
    assert by_word[3] == ["know"] and by_word[4] == ["."]
    assert e.special_mask[0] and e.special_mask[-1]


def test_too_long_text_is_refused_or_truncated(minilm):
    long = " ".join(["word"] * 600)
    with pytest.raises(ValueError, match="at most 512"):
        capture(minilm, long)
    m = capture(minilm, long, truncate=True)[0]
    assert m.n_tokens == 512 and m.meta["truncated"]


def test_length_sorted_batches_keep_input_order(minilm):
    texts = [
        "A rather long sentence with quite a few words in it, to pad the others.",
        "Short.",
        "Medium length sentence here.",
        "Tiny.",
        "Another fairly long sentence that has many words.",
    ]
    sorted_maps = capture(minilm, texts, batch_size=2)  # batched by length within the window
    plain = capture(minilm, texts, batch_size=2, sort_window=1)  # batched in input order
    assert [m.text for m in sorted_maps] == texts
    for a, b in zip(sorted_maps, plain):
        assert torch.allclose(a.attentions, b.attentions, atol=1e-5)


# ---- batched tokenization and vectorised word alignment ------------------------------


def test_batch_alignment_equals_the_per_token_definition_on_ewt(minilm, ewt_dev):
    from probe.inputs.readers import read_conllu
    from probe.models.alignment import align_batch, align_loop

    sents = read_conllu(ewt_dev, limit=400)
    enc = minilm.tokenizer([s.text for s in sents], return_offsets_mapping=True, return_special_tokens_mask=True)
    spans = [list(s.spans) for s in sents]
    fast = align_batch(enc["offset_mapping"], enc["special_tokens_mask"], spans)
    slow = [align_loop(o, sp, w) for o, sp, w in zip(enc["offset_mapping"], enc["special_tokens_mask"], spans)]
    assert fast == slow
    assert sum(len(covered) for _, covered in fast) > 5000  # real alignments were compared


def test_batch_alignment_handles_out_of_order_spans_and_empty_texts():
    from probe.models.alignment import align_batch, align_loop

    offsets = [[(0, 0), (0, 3), (4, 7), (0, 0)], [(0, 0), (0, 2), (0, 0)], [(0, 0), (0, 5), (0, 0)]]
    special = [[1, 0, 0, 1], [1, 0, 1], [1, 0, 1]]
    spans = [[(4, 7), (0, 3)], [], [(0, 2), (2, 5)]]  # reversed words; no words; a token over two words
    got = align_batch(offsets, special, spans)
    assert got == [align_loop(o, s, w) for o, s, w in zip(offsets, special, spans)]
    assert got[1][0] == (None, None, None)
    assert got[2][0] == (None, 1, None)  # the token overlaps word 1 by 3 characters, word 0 by 2


def test_batch_alignment_equals_the_loop_on_random_batches_with_some_spans_out_of_order():
    """Batches mixing examples in reading order with shuffled ones (the per-example order
    check is vectorised over the batch: a step down across an example boundary is no
    fault, one inside an example is)."""
    import random

    from probe.models.alignment import align_batch, align_loop

    rng = random.Random(7)
    for _ in range(300):
        offsets, special, spans = [], [], []
        for _ in range(rng.randint(1, 6)):
            cuts = sorted(rng.sample(range(1, 60), rng.randint(0, 12)))
            toks = [(0, 0)] + [(a, b) for a, b in zip([0] + cuts, cuts + [60]) if rng.random() < 0.9] + [(0, 0)]
            words = sorted(rng.sample(range(0, 60), 2 * rng.randint(0, 8)))
            ws = [(words[i], words[i + 1]) for i in range(0, len(words), 2)]
            if ws and rng.random() < 0.3:
                rng.shuffle(ws)
            offsets.append(toks)
            special.append([1] + [0] * (len(toks) - 2) + [1])
            spans.append(ws)
        assert align_batch(offsets, special, spans) == [align_loop(o, s, w) for o, s, w in zip(offsets, special, spans)]


def test_encode_batch_equals_encoding_each_text(minilm):
    texts = ["I don't know.", "The cat sat on the mat, didn't it?", "Ünïcödé wörds ñ"]
    batch = minilm.encode_batch(texts)
    for text, b in zip(texts, batch):
        one = minilm.encode(text)
        assert b.tokens == one.tokens and b.word_ids == one.word_ids and b.words == one.words
        ids = minilm.tokenizer(text)["input_ids"]
        assert b.input_ids.tolist() == ids
        assert list(b.tokens) == minilm.tokenizer.convert_ids_to_tokens(ids)


def _byte_level_bpe():
    """A small byte-level BPE tokenizer (GPT-2's scheme) trained here, wrapped as HF does."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(TOKENIZER_TEXTS * 5, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")


TOKENIZER_TEXTS = [
    "The cat sat on the mat.",
    "Naïve café — “quoted” text, 3.5 km²!",
    "e\u0301 combining, 漢字 and 🙂",
    "tabs\tand  double  spaces",
    "[CLS] [SEP] <s> look like special tokens",
    "don't won't it's",
    "Zero\u200bwidth joiner\u200d here",
]


@pytest.mark.parametrize("which", ["minilm", "word-level", "byte-level"])
def test_direct_rust_tokenizer_call_equals_the_wrapper(minilm, which):
    """The batch encoder calls a fast tokenizer's Rust backend directly; ids, offsets and
    special masks must equal transformers' own call (WordPiece, a zoo word-level tokenizer,
    byte-level BPE), also after a truncating call left the backend configured to cut."""
    from unittest import mock

    from probe.models import load_model

    adapter = {
        "minilm": lambda: minilm,
        "word-level": lambda: load_model("zoo:agreement"),
        "byte-level": lambda: minilm,
    }[which]()
    if which == "byte-level":
        from dataclasses import replace

        adapter = replace(adapter, tokenizer=_byte_level_bpe())
    tok = adapter.tokenizer
    tok(TOKENIZER_TEXTS[:2], truncation=True, max_length=4)  # leaves truncation set on the backend
    with mock.patch.object(type(tok), "__call__", side_effect=AssertionError("the wrapper was called")):
        ids, offsets, special, encs = adapter._tokenize_batch(TOKENIZER_TEXTS, target=False)
    ref = tok(TOKENIZER_TEXTS, return_offsets_mapping=True, return_special_tokens_mask=True, add_special_tokens=True)
    assert ids == ref["input_ids"] and special == ref["special_tokens_mask"]
    assert [list(map(tuple, o)) for o in offsets] == [list(map(tuple, o)) for o in ref["offset_mapping"]]
    assert [e.tokens for e in encs] == [tok.convert_ids_to_tokens(i) for i in ref["input_ids"]]
    assert max(len(i) for i in ids) > 4  # not cut by the earlier truncating call


def test_words_without_a_token_are_absorbed_and_counted(minilm):
    from probe.analyses.structure.word_graph import word_attention

    # a zero-width joiner and a lone combining accent are treebank words the tokenizer drops
    text = "x \u200d y \u0301 z"
    spans = [(0, 1), (2, 3), (4, 5), (6, 7), (8, 9)]
    (m,) = capture(minilm, [text], word_spans=[spans])
    assert m.meta["absorbed_words"] == [[1, 1], [3, 2]]  # word -> the token before it
    assert "unaligned_words" not in m.meta
    assert [t for t in m.tokens] == ["[CLS]", "x", "y", "z", "[SEP]"]
    att, _, _ = word_attention(m, 5)
    a = m.attentions.float()
    # the ZWJ word's row is the row of token "x" (index 1), restricted to word columns
    assert torch.allclose(att[:, :, 1, 2], a[:, :, 1, 2], atol=1e-6)
    assert torch.allclose(att[:, :, 1], att[:, :, 0], atol=1e-6)


def test_eager_attention_in_place_steps_give_the_out_of_place_values_exactly():
    """eager_attention scales, masks and softmaxes in place on CPU (no extra
    [batch, head, q, k] tensors on long inputs): the values must equal, bit for bit, the
    out-of-place formula transformers' eager functions use."""
    from probe.tracing.attention_interface import eager_attention

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 7, 4, generator=g) for _ in range(3))
    mask = torch.zeros(2, 1, 7, 7)
    mask[1, :, :, 5:] = torch.finfo(torch.float32).min  # padded keys of the second example
    module = torch.nn.Module()
    out, weights = eager_attention(module, q, k, v, mask, scaling=0.5)
    ref = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) * 0.5 + mask, dim=-1)
    assert torch.equal(weights, ref)
    assert torch.equal(out, torch.matmul(ref, v).transpose(1, 2).contiguous())
    assert float(weights[1, :, :, 5:].abs().max()) == 0.0


def test_layer_by_layer_trimming_gives_the_stacked_maps(minilm, monkeypatch):
    """Where the maps must be converted (here float64 storage of a float32 model) they are
    trimmed copies: large batches layer by layer (each record released once copied), small
    ones with one stack per example. Forcing the large-batch path on a mixed-length batch
    must give the same maps, padding left out, each its own contiguous tensor, equal to
    the float32 capture's values."""
    import importlib

    capture_module = importlib.import_module("probe.runs.capture")
    stacked = capture(minilm, TEXTS, layers=[0, 3, 5], dtype=torch.float64)
    monkeypatch.setattr(capture_module, "STACK_BYTES", 0)
    by_layer = capture(minilm, TEXTS, layers=[0, 3, 5], dtype=torch.float64)
    buffered = capture(minilm, TEXTS, layers=[0, 3, 5])
    assert len({m.attentions.shape[-1] for m in by_layer}) > 1  # the batch really was padded
    for s, b, f in zip(stacked, by_layer, buffered):
        assert b.attentions.is_contiguous() and b.attentions.dtype == torch.float64
        assert torch.equal(s.attentions, b.attentions)
        assert torch.equal(b.attentions, f.attentions.double())


@pytest.mark.parametrize("path", ["interface", "hooks"])
def test_maps_are_views_of_one_batch_buffer_the_interface_computes_in(minilm, path):
    """The weights of a float32 CPU capture are recorded into one [layer, batch, head, q, k]
    buffer and each example is a view of its part: no copy after the forward. On the
    interface path the attention is computed there (the record is the buffer itself); on
    the hooks path each layer is copied in. Values equal HF's eager maps; examples share
    the buffer but not a single element."""
    from probe.runs.capture import _buffer_fits

    assert _buffer_fits(minilm, torch.float32) and not _buffer_fits(minilm, torch.float16)
    encs, ref = hf_attentions(minilm, TEXTS)
    inputs = minilm.batch(encs)
    with AttentionCapture(minilm, path=path, into_buffer=True) as cap, torch.no_grad():
        minilm.model(**inputs)
    into, recs = cap.buffer(), cap.layer_tensors()
    assert into.shape == (6,) + tuple(ref.shape[1:])
    assert all(recs[layer].data_ptr() == into[layer].data_ptr() for layer in range(6))
    assert torch.allclose(into, ref, atol=1e-5)

    maps = capture(minilm, TEXTS, path=path)
    a, b = maps[0].attentions, maps[1].attentions
    assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    assert not a.is_contiguous() and a.shape == (6, 12, len(encs[0]), len(encs[0]))
    assert not a.is_inference()  # the buffer is made outside inference mode: an ordinary tensor
    before = b.clone()
    a.fill_(-1.0)  # writing one example's map leaves the other untouched
    assert torch.equal(b, before)
    assert torch.allclose(b, ref[:, 1, :, : len(encs[1]), : len(encs[1])], atol=1e-5)

    alone = capture(minilm, TEXTS, path=path, standalone=True)  # one tensor per example
    for m in alone:
        t = m.attentions
        assert t.is_contiguous() and t.untyped_storage().nbytes() == t.numel() * t.element_size()
    assert torch.equal(alone[1].attentions, b)


def test_buffer_takes_the_heads_the_stack_has():
    """The buffer is sized from the weights themselves: a stack whose head count differs
    from the config's first one (the zoo translation model's decoder cross-attention) gets
    its own heads, never a broadcast copy; values equal HF's own cross-attention maps."""
    from probe.models import load_model, zoo

    adapter = load_model("zoo:translate")
    ex = zoo.eval_examples("translate", n=3)
    texts, targets = [e["text"] for e in ex], [e["target_text"] for e in ex]
    maps = capture(adapter, texts, stack="cross", targets=targets)
    encs, ref = hf_attentions(adapter, texts, key="cross_attentions", targets=targets)
    assert adapter.config.decoder_attention_heads != adapter.n_heads
    assert maps[0].attentions.shape[1] == ref.shape[2] == adapter.config.decoder_attention_heads
    for i, m in enumerate(maps):
        q, k = m.attentions.shape[-2:]
        assert torch.allclose(m.attentions, ref[:, i, :, :q, :k], atol=1e-5)


def test_interface_computes_in_the_buffer_without_a_copy():
    """eager_attention(out=...) computes the weights in ``out`` (same values as without it)
    and ignores an ``out`` of the wrong shape or one autograd would need to see through."""
    from probe.tracing.attention_interface import eager_attention

    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, 5, 4, generator=g) for _ in range(3))
    mask = torch.zeros(2, 1, 5, 5)
    mask[0, :, :, 3:] = torch.finfo(torch.float32).min
    module = torch.nn.Module()
    ref_out, ref_w = eager_attention(module, q, k, v, mask)
    buf = torch.empty(2, 3, 5, 5)
    out, w = eager_attention(module, q, k, v, mask, out=buf)
    assert w.data_ptr() == buf.data_ptr() and torch.equal(w, ref_w) and torch.equal(out, ref_out)
    wrong = torch.empty(2, 3, 5, 6)
    _, w = eager_attention(module, q, k, v, mask, out=wrong)
    assert w.data_ptr() != wrong.data_ptr() and torch.equal(w, ref_w)
    qg = q.clone().requires_grad_(True)
    _, w = eager_attention(module, qg, k, v, mask, out=buf)
    assert w.data_ptr() != buf.data_ptr() and w.requires_grad


def test_broadcast_check_agrees_with_torch():
    """The per-layer check whether the mask can be added in place agrees with
    ``torch.broadcast_shapes`` on random shape pairs (ranks 1–4, sizes 1–3)."""
    import random

    from probe.tracing.attention_interface import _broadcasts_to

    rng = random.Random(0)
    agree = {True: 0, False: 0}
    for _ in range(2000):
        target = tuple(rng.randint(1, 3) for _ in range(rng.randint(1, 4)))
        shape = tuple(rng.choice([1, s, rng.randint(1, 3)]) for s in target)
        if rng.random() < 0.2:
            shape = shape[1:]
        try:
            expected = torch.broadcast_shapes(shape, target) == target and len(shape) == len(target)
        except RuntimeError:
            expected = False
        assert _broadcasts_to(shape, target) == expected, (shape, target)
        agree[expected] += 1
    assert min(agree.values()) > 100


def test_a_capture_ends_after_its_last_layer_and_its_maps_equal_a_full_forwards(minilm):
    """The capture's forward runs no further than its last captured layer: a language model's
    final norm and vocabulary projection never run (SmolLM2's 49,152-token head is a fifth of
    its forward), nor the layers after a chosen subset, and the maps equal those of a full
    forward (the same capture without stopping, and transformers' eager attentions); a
    capture that stops refuses ``keep_grad`` (no output to take a gradient of)."""
    from probe.errors import InputError
    from probe.models.sites import layer_modules

    llama = tiny_llama_lm(minilm.tokenizer, layers=3)
    ran = {"head": 0, "norm": 0, "last": 0}

    def counting(key):
        def hook(*_):
            ran[key] += 1

        return hook

    model = llama.model
    hooks = [
        model.lm_head.register_forward_hook(counting("head")),
        model.model.norm.register_forward_hook(counting("norm")),
        layer_modules(llama)[-1].register_forward_hook(counting("last")),
    ]
    try:
        maps = capture(llama, TEXTS, batch_size=2)
        assert ran == {"head": 0, "norm": 0, "last": 1}  # one batch: the last layer ran, nothing after it
        first = capture(llama, TEXTS, layers=[0, 1], batch_size=2)
        assert ran == {"head": 0, "norm": 0, "last": 1}  # layers 0 and 1 only: layer 2 never ran
        inputs = llama.batch([llama.encode(t) for t in TEXTS])
        with AttentionCapture(llama) as full:
            model(**inputs)
        assert ran == {"head": 1, "norm": 1, "last": 2}  # a capture that does not stop runs the whole model
    finally:
        for h in hooks:
            h.remove()
    encs, ref = hf_attentions(llama, TEXTS)
    whole = full.layer_tensors()
    for i, (m, e) in enumerate(zip(maps, encs)):
        n = len(e)
        assert m.attentions.shape == (3, 4, n, n)
        assert torch.equal(m.attentions, torch.stack([whole[layer][i, :, :n, :n] for layer in range(3)]))
        assert torch.allclose(m.attentions, ref[:, i, :, :n, :n], atol=1e-6)
        assert torch.equal(first[i].attentions, m.attentions[:2])
    with pytest.raises(InputError, match="no output to take a gradient of"):
        AttentionCapture(llama, keep_grad=True, stop=True)
