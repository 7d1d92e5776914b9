"""A loaded model plus what the toolkit needs to know about it: :class:`ModelAdapter`.

The adapter gives tokenization with word alignment (from character offsets), the
special-token positions, the model's size, and where each layer's attention module,
head-output site and value projection live (looked up in
:data:`models.architectures.ARCHITECTURES`).
"""

from __future__ import annotations


import inspect
import logging
import re
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, NoReturn, Optional, Sequence

import numpy as np
import torch

from .alignment import absorbing_tokens, align_batch
from .architectures import ARCHITECTURES, STACKS, UnsupportedModel, discover_attention
from .batching import ANY_LENGTHS, ONE_LENGTH, layer_prefixes, padding_check, sequence_convolutions
from .errors import InputError, NotApplicable
from .hooks import HookSet

log = logging.getLogger(__name__)

WORD_PATTERN = re.compile(r"\w+|[^\w\s]")


def split_words(text: str) -> list[tuple[int, int]]:
    """Character spans of the words of raw text: runs of word characters, and each
    punctuation mark on its own (the default when no treebank words are given)."""
    return [m.span() for m in WORD_PATTERN.finditer(text)]


@dataclass(frozen=True)
class Encoding:
    """One tokenized example.

    Attributes:
        input_ids: token ids ``[n_tokens]`` (no padding).
        tokens: the token strings.
        word_ids: for each token, the index of the word it belongs to (the word with the
            largest character overlap), or ``None`` (special tokens, stray pieces).
        special_mask: bool ``[n_tokens]``.
        words: the words' text.
        word_spans: ``(start, end)`` character offsets of each word in ``text``.
        unaligned_words: indices of words that no token covers and no token absorbed
            (the example cannot be evaluated at word level).
        absorbed_words: ``(word, token)`` pairs for words that got no token of their own
            (combining marks, zero-width joiners, control characters the tokenizer
            drops): the non-special token that absorbed the word's characters, else the
            nearest one before it, else after it. Word-level analyses give the word
            that token's attention too.
        truncated: True when the text was cut to the model's maximum length.
    """

    text: str
    input_ids: torch.Tensor
    tokens: tuple
    word_ids: tuple
    special_mask: torch.Tensor
    words: tuple
    word_spans: tuple
    unaligned_words: tuple = ()
    absorbed_words: tuple = ()
    truncated: bool = False

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])


@dataclass
class ModelAdapter:
    """A model in eval mode, its tokenizer, and where its attention lives.

    Attributes:
        name: the spec it was loaded from (``minilm``, ``hf:…``, ``zoo:…``).
        model: the torch module (a transformers ``PreTrainedModel``).
        tokenizer: a fast tokenizer that returns offset mappings.
        family: key into :data:`ARCHITECTURES`.
        source: where the weights came from (a path or package).
        card: extra facts (zoo cards, pooling of sentence models).
        batching: ``any lengths``, or ``one length per batch`` for a text model whose layers
            leak padding into real positions (found at load: :func:`models.batching.padding_check`;
            the reason is in ``card["batching"]``): every batcher of the toolkit then groups
            texts by token length, and :meth:`batch` refuses a batch of mixed lengths.
    """

    name: str
    # Any: a transformers PreTrainedModel or a zoo module with its interface; torch's stubs type
    # every attribute of an nn.Module as `Tensor | Module`, which would hide the real API
    model: Any
    tokenizer: Any  # a fast tokenizer (transformers PreTrainedTokenizerFast)
    family: str
    source: str = ""
    card: dict = field(default_factory=dict)
    batching: str = field(default=ANY_LENGTHS, init=False)

    def __post_init__(self) -> None:
        self.model.eval()
        if type(self.model).forward is torch.nn.Module.forward:
            t = getattr(getattr(self.model, "config", None), "model_type", "?")
            raise UnsupportedModel(
                f"model type {t!r} ({type(self.model).__name__}) has no forward of its own "
                "(a pipeline of sub-models): open one of its sub-models"
            )
        if self.tokenizer is None:  # images, audio: every text path refuses in one line
            self.tokenizer = NoTokenizer(self)
        _full_attention(self.model, self.card)
        # a family of the table (module-name patterns), else modules found by shape, with
        # causality and layer order read from one short forward (see _behaviour)
        table = ARCHITECTURES.get(self.family)
        self._problems: dict = {}
        if table is None:
            table = discover_attention(self.model)
            if table["arch"] == "encoder-decoder":
                _drop_uncalled(self.model, table)
            measured = _behaviour(self.model, table, self._problems)
            if measured is not None:
                causal, order, unused = measured
                if causal != (table["arch"] == "decoder"):
                    table = discover_attention(self.model, causal=causal)
                for name in unused:
                    table.pop(name, None)
                stack = table["arch"]
                if order is not None and stack in table:
                    table[stack] = order(table[stack])
        self._table = table
        self._modules = dict(self.model.named_modules())
        self._cache: dict = {}
        self._check_padding()

    def _check_padding(self) -> None:
        """Set :attr:`batching` from :func:`models.batching.padding_check` (text models only:
        the toolkit pads nothing else), note it in the card and say it on stderr."""
        if self.input_name != "input_ids" or isinstance(self.tokenizer, NoTokenizer):
            return
        if not sequence_convolutions(self.model):  # the common case: no forward, nothing to name
            return
        names = {id(m): n for n, m in self._modules.items()}
        try:
            attention = [names[id(m)] for s in self.stacks for m in self.attention_modules(s) if id(m) in names]
        except NotApplicable:  # no attention modules by the table's names: every convolution counts
            attention = []
        why = padding_check(self.model, self.pad_token_id, layer_prefixes(attention))
        if why is None:
            return
        self.batching = ONE_LENGTH
        self.card["batching"] = f"{ONE_LENGTH}: {why}"
        t = getattr(self.config, "model_type", "?")
        log.warning(
            "model type %r runs %s: a padded batch would change a text's maps and outputs (%s)", t, ONE_LENGTH, why
        )

    @property
    def input_name(self) -> str:
        """The model's main input: ``input_ids`` (text), ``pixel_values`` (ViT, CLIP vision),
        ``input_features`` (Whisper), ``input_values`` (wav2vec 2.0)… The class's
        ``main_input_name`` where its forward takes it; else the forward's first required
        argument (a vision tower whose class keeps the default ``input_ids`` but whose forward
        takes ``hidden_states`` and ``grid_thw``: Qwen2.5-VL's, GLM-4V's)."""
        name = getattr(self.model, "main_input_name", "input_ids") or "input_ids"
        name = str(name[0] if isinstance(name, (list, tuple)) else name)
        try:
            params = inspect.signature(self.model.forward).parameters
        except (TypeError, ValueError):
            return name
        required = [
            n
            for n, p in params.items()
            if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        if name not in params and required:
            return required[0]
        return name

    def _text_only(self) -> None:
        if self.input_name != "input_ids" or isinstance(self.tokenizer, NoTokenizer):
            raise self.not_text()
        failed = self._problems.get("text_forward")
        if failed:
            t = getattr(self.config, "model_type", "?")
            raise UnsupportedModel(
                f"{self.name} (model type {t!r}) needs more than text: a forward on token ids alone raises "
                f"{failed}; run it with its other inputs inside probe.runs.capture.AttentionCapture"
            )

    def not_text(self) -> UnsupportedModel:
        """The one-line refusal of a text path for a model that takes no text."""
        t = getattr(self.config, "model_type", "?")
        return UnsupportedModel(
            f"{self.name} (model type {t!r}) takes {self.input_name}, not text: capture and ablate it "
            f"through the Python API (probe.runs.capture.capture_inputs(adapter, {{{self.input_name!r}: ...}}), "
            "probe.interventions.heads.HeadIntervention)"
        )

    # ---- sizes ----------------------------------------------------------------
    @property
    def config(self) -> Any:
        return self.model.config

    @property
    def arch(self) -> str:
        """``encoder``, ``decoder`` or ``encoder-decoder``."""
        return self._table["arch"]

    @property
    def stacks(self) -> tuple:
        """The attention stacks this model has (``encoder``/``decoder``/``cross``)."""
        return tuple(s for s in STACKS if s in self._table)

    @property
    def default_stack(self) -> str:
        return "decoder" if self.arch == "decoder" else "encoder"

    def n_layers_of(self, stack: Optional[str] = None) -> int:
        return len(self.attention_modules(stack))

    @property
    def n_layers(self) -> int:
        return self.n_layers_of(self.default_stack)

    @property
    def n_heads(self) -> int:
        # the attention modules' own count first (Laguna sets it per layer, not from the config)
        counts: set[int] = {c for c in map(_heads_of, self.attention_modules()) if c}
        if len(counts) > 1:
            t = getattr(self.config, "model_type", "?")
            raise UnsupportedModel(
                f"{self.name} (model type {t!r}): its layers have different head counts "
                f"{sorted(counts)}; maps are [layer, head, query, key] with one count"
            )
        if counts:
            return counts.pop()
        first = self.attention_modules()[0]
        for c in (self.config, getattr(self.config, "text_config", None), getattr(first, "config", None)):
            for k in ("num_attention_heads", "n_head", "n_heads", "encoder_attention_heads", "num_heads"):
                if isinstance(getattr(c, k, None), int) and getattr(c, k) > 0:
                    return int(getattr(c, k))
        t = getattr(self.config, "model_type", "?")
        raise UnsupportedModel(
            f"{self.name} (model type {t!r}): neither its attention modules ({type(first).__name__}) nor its "
            "config state a head count (no softmax heads: a recurrent or linear mixer); the toolkit cannot "
            "capture or edit heads there"
        )

    @property
    def head_dim(self) -> int:
        """The width of one head's output: the attention module's own per-head size where it
        states one that the output projection's input holds (ConvBERT: 8 of a 32-wide input
        that also carries its convolution half), else that input's width over the heads."""
        fan_in = _fan_in(self.head_output_modules()[0])
        stated = _head_size_of(self.attention_modules()[0])
        if stated and stated * self.n_heads <= fan_in:
            return stated
        return fan_in // self.n_heads

    def other_head_columns(self, stack: Optional[str] = None) -> Optional[str]:
        """Why the output projection's input holds more than the heads' outputs, or None.

        The attention module's own per-head size (``attention_head_size``, ``v_head_dim``,
        ``head_dim``, ``head_size``) times its head count is the heads' columns; where that is
        less than the projection's input, other columns sit beside them (ConvBERT, Jiang et al.
        2020: ``config.head_ratio`` of the heads become a span-based dynamic convolution whose
        outputs are concatenated after the attention heads'), and dividing the whole width by
        the head count would put a head's edit on those columns."""
        module = self.attention_modules(stack)[0]
        stated = _head_size_of(module)
        width = _fan_in(self.head_output_modules(stack)[0])
        heads = self.n_heads
        if not stated or not width or stated * heads >= width:
            return None
        t = getattr(self.config, "model_type", "?")
        return (
            f"{self.name} (model type {t!r}): the output projection's input ({width} columns) holds the "
            f"{heads} attention heads' outputs ({heads} x {stated}, {type(module).__name__}'s own head size) "
            f"beside {width - heads * stated} other columns (ConvBERT: its span-based convolution, "
            "config.head_ratio); no per-head site to edit or read there"
        )

    @property
    def max_length(self) -> int:
        c = self.config
        for k in ("max_position_embeddings", "n_positions", "max_length"):
            v = getattr(c, k, None)
            if isinstance(v, int) and v > 0:
                # RoBERTa-style position ids start after the padding index
                return v - 2 if getattr(c, "model_type", "") in ("roberta", "xlm-roberta", "camembert") else v
        v = getattr(self.tokenizer, "model_max_length", None)
        return int(v) if v and v < 10**6 else 512

    @property
    def causal(self) -> bool:
        return self.arch == "decoder"

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # ---- module lookup ----------------------------------------------------------
    def _lookup(self, stack: Optional[str], site: str) -> list:
        stack = stack or self.default_stack
        if stack not in self._table:
            raise InputError(f"{self.name} has no {stack!r} attention; it has: {', '.join(self.stacks)}")
        key = (stack, site)
        entry = self._table[stack][site]
        if isinstance(entry, list):  # discovered modules
            if any(m is None for m in entry):
                raise NotApplicable(
                    f"{self.name} has no separate {site} module (fused projection); this analysis needs one"
                )
            return entry
        if key not in self._cache:
            pattern = re.compile(entry)
            found = {}
            for name, module in self._modules.items():
                m = pattern.search(name)
                if m:
                    found[int(m.group(1))] = module
            if not found:
                raise NotApplicable(f"no {site} modules found for {stack} of {self.name}")
            self._cache[key] = [found[i] for i in sorted(found)]
        return self._cache[key]

    def attention_modules(self, stack: Optional[str] = None) -> list:
        """The module per layer whose output tuple ends with the attention probabilities."""
        return self._lookup(stack, "attention")

    def head_output_modules(self, stack: Optional[str] = None) -> list:
        """The output projection per layer; its input ``[batch, seq, heads*head_dim]``
        is the per-head output site."""
        return self._lookup(stack, "head_output")

    def check_head_site(self, stack: Optional[str] = None) -> None:
        """Raise :class:`UnsupportedModel` when the output projection's input is not the heads'
        outputs side by side (a norm over all heads sits between: BitNet, DiffLlama), so no
        head can be edited there on its own."""
        entry = self._table.get(stack or self.default_stack, {})
        mixer = next((m for m in entry.get("mixed_by", []) if m), None) if isinstance(entry, dict) else None
        t = getattr(self.config, "model_type", "?")
        heads = self.n_heads
        proj = self.head_output_modules(stack)[0]
        width = proj.weight.shape[0] if type(proj).__name__ == "Conv1D" else getattr(proj, "in_features", 0)
        other = self.other_head_columns(stack)
        if other:
            raise UnsupportedModel(other)
        module = self.attention_modules(stack)[0]
        if _calls_functional_attention(type(module)):
            raise UnsupportedModel(
                f"{self.name} (model type {t!r}): {type(module).__name__} hands its output projection's weights to "
                "torch's multi_head_attention_forward, so the projection never runs as a module and no hook sees "
                "the heads' outputs; no per-head site to edit"
            )
        if not width or width % heads:  # (MLA's value width differs from its query head_dim: no equality test)
            raise UnsupportedModel(
                f"{self.name} (model type {t!r}): the output projection found ({type(proj).__name__}, {width} inputs) "
                f"is not the {heads} heads' outputs side by side; no per-head site to edit"
            )
        if mixer:
            raise UnsupportedModel(
                f"{self.name} (model type {t!r}): its attention normalises or gates all heads together ({mixer}) "
                "before the output projection, so no head's output can be edited alone"
            )

    def value_modules(self, stack: Optional[str] = None) -> list:
        """The value projection per layer (GPT-2: the fused ``c_attn``, value = last third);
        a module may repeat where layers share one (ALBERT: the trace tells them apart by call)."""
        return self._lookup(stack, "value")

    def refuse_shared_layers(self, stack: Optional[str], what: str) -> None:
        """Raise :class:`UnsupportedModel` when several layers call one attention module
        (ALBERT): ``what`` keys its work by module and would mix the layers. Every site of
        :class:`probe.tracing.trace_context.Trace` tells the layers apart by call (:mod:`probe.tracing.layer_calls`)."""
        modules = self.attention_modules(stack)
        if len(set(map(id, modules))) < len(modules):
            t = getattr(self.config, "model_type", "?")
            raise UnsupportedModel(
                f"{self.name} (model type {t!r}): its {len(modules)} layers share "
                f"{len(set(map(id, modules)))} attention module(s); {what} are not supported"
            )

    def embeddings(self) -> torch.nn.Module:
        """The input token-embedding module."""
        return self.model.get_input_embeddings()

    def check_head(self, layer: int, head: int, stack: Optional[str] = None) -> None:
        """Raise ``ValueError`` naming the valid range when (layer, head) does not exist."""
        n_layers = self.n_layers_of(stack)
        if not 0 <= int(layer) < n_layers:
            raise InputError(f"layer {layer} out of range: {self.name} has layers 0..{n_layers - 1}")
        if not 0 <= int(head) < self.n_heads:
            raise InputError(f"head {head} out of range: {self.name} has heads 0..{self.n_heads - 1}")

    # ---- tokenization -----------------------------------------------------------
    def encode(
        self,
        text: str,
        word_spans: Optional[Sequence[tuple]] = None,
        *,
        truncate: bool = False,
        target: bool = False,
    ) -> Encoding:
        """Tokenize ``text`` and align tokens to words through character offsets.

        Args:
            text: the raw text.
            word_spans: ``(start, end)`` character spans of the words (from a treebank);
                default: :func:`split_words`.
            truncate: cut to :attr:`max_length` instead of refusing.
            target: tokenize as a decoder target (encoder-decoder models).

        Raises:
            ValueError: on empty text, or text longer than the model's limit when
                ``truncate`` is False (the message names the limit and the length).
        """
        return self.encode_batch(
            [text], None if word_spans is None else [word_spans], truncate=truncate, target=target
        )[0]

    def encode_batch(
        self,
        texts: Sequence[str],
        word_spans: Optional[Sequence[Optional[Sequence[tuple]]]] = None,
        *,
        truncate: bool = False,
        target: bool = False,
    ) -> list:
        """:meth:`encode` for many texts: one call of the fast tokenizer for the batch,
        word alignment vectorised over all its tokens (:func:`models.alignment.align_batch`).

        Returns:
            one :class:`Encoding` per text, equal to ``encode(text, spans)``.

        Raises:
            ValueError: as :meth:`encode`, for the first offending text.
        """
        self._text_only()
        texts = list(texts)
        for text in texts:
            if not isinstance(text, str) or not text.strip():
                raise InputError("empty input text: give at least one non-blank sentence")
        spans = [
            list(sp) if sp is not None else split_words(t)
            for t, sp in zip(texts, word_spans if word_spans is not None else [None] * len(texts))
        ]
        ids, offsets, special, rust = self._tokenize_batch(texts, target)
        limit = self.max_length
        long = [k for k, x in enumerate(ids) if len(x) > limit]
        if long and not truncate:
            k = long[0]
            raise InputError(
                f"text has {len(ids[k])} tokens but {self.name} takes at most {limit}: "
                f"shorten or split it; starts {texts[k][:40]!r}"
            )
        if long:
            cut_ids, cut_offsets, cut_special, _ = self._tokenize_batch(
                [texts[k] for k in long], target, truncation=True, max_length=limit
            )
            for k, i, o, sp in zip(long, cut_ids, cut_offsets, cut_special):
                ids[k], offsets[k], special[k] = i, o, sp
            rust = None
        truncated = set(long)
        aligned = align_batch(offsets, special, spans)
        # one tensor per batch for the ids and one for the special mask (one C-level pass
        # over the numbers each), each example a view of its slice (a few bytes per token)
        lengths = [len(x) for x in ids]
        total = sum(lengths)
        all_ids = torch.from_numpy(np.fromiter(chain.from_iterable(ids), dtype=np.int64, count=total)).split(lengths)
        all_special = torch.from_numpy(np.fromiter(chain.from_iterable(special), dtype=bool, count=total)).split(
            lengths
        )
        out = []
        for k, text in enumerate(texts):
            word_ids, covered = aligned[k]
            sp = spans[k]
            if k in truncated:
                sp = sp[: (max(covered) if covered else -1) + 1]
            absorbed = absorbing_tokens(offsets[k], special[k], sp, covered) if len(covered) < len(sp) else {}
            out.append(
                Encoding(
                    text=text,
                    input_ids=all_ids[k],
                    tokens=tuple(rust[k].tokens if rust else self.tokenizer.convert_ids_to_tokens(ids[k])),
                    word_ids=word_ids,
                    special_mask=all_special[k],
                    words=tuple([text[a:b] for a, b in sp]),
                    word_spans=tuple([x if type(x) is tuple else tuple(x) for x in sp]),
                    unaligned_words=(
                        ()
                        if len(covered) == len(sp)
                        else tuple(w for w in range(len(sp)) if w not in covered and w not in absorbed)
                    ),
                    absorbed_words=tuple(sorted(absorbed.items())),
                    truncated=k in truncated,
                )
            )
        return out

    def _tokenize_batch(self, texts: list, target: bool, **extra: Any) -> tuple:
        """``(ids, offsets, special masks, the fast tokenizer's encodings or None)`` of a batch,
        each a list per text, with special tokens, neither padded nor truncated unless
        ``extra`` says so.

        A fast tokenizer without input/target modes is called directly on its Rust backend
        (``encode_batch``), after the reset transformers' wrapper makes on every call (no
        truncation, no padding); this is what the wrapper calls, without building its
        dictionaries (~0.3 ms of a batch of 16). Others, targets and truncation go
        through the wrapper.
        """
        tok = self.tokenizer
        backend = getattr(tok, "_tokenizer", None)
        if (
            not extra
            and not target
            and getattr(tok, "is_fast", False)
            and backend is not None
            and hasattr(backend, "encode_batch")
            and not hasattr(tok, "_switch_to_input_mode")
            and getattr(backend, "encode_special_tokens", False) == bool(getattr(tok, "split_special_tokens", False))
        ):
            if backend.truncation is not None:
                backend.no_truncation()
            if backend.padding is not None:
                backend.no_padding()
            encs = backend.encode_batch(texts, add_special_tokens=True)
            return ([e.ids for e in encs], [e.offsets for e in encs], [e.special_tokens_mask for e in encs], encs)
        kwargs = dict(return_offsets_mapping=True, return_special_tokens_mask=True, add_special_tokens=True, **extra)
        enc = tok(text_target=texts, **kwargs) if target else tok(texts, **kwargs)
        return (
            enc["input_ids"],
            enc["offset_mapping"],
            enc["special_tokens_mask"],
            None if extra else getattr(enc, "encodings", None),
        )

    @property
    def pad_token_id(self) -> int:
        pid = getattr(self.tokenizer, "pad_token_id", None)
        if pid is None:
            pid = getattr(self.config, "pad_token_id", None)
        return int(pid) if pid is not None else 0

    def decoder_start_id(self) -> int:
        c = self.config
        for k in ("decoder_start_token_id", "bos_token_id", "pad_token_id"):
            v = getattr(c, k, None)
            if v is not None:
                return int(v)
        return 0

    def batch(self, encodings: Sequence[Encoding]) -> dict:
        """Right-padded ``input_ids`` and ``attention_mask`` ``[batch, max_len]`` on the
        model's device.

        Raises:
            InputError: encodings of different lengths for a model that runs one length per
                batch (:attr:`batching`).
        """
        lengths = torch.tensor([len(e) for e in encodings])
        if self.batching == ONE_LENGTH and len(set(lengths.tolist())) > 1:
            raise InputError(
                f"{self.name} runs {ONE_LENGTH} (its padding leaks into other positions: see its card), "
                f"but this batch holds texts of {len(set(lengths.tolist()))} token lengths; "
                "give texts of one length per call, or batch_size=1 (--batch-size 1)"
            )
        n = int(lengths.max())
        mask = (torch.arange(n)[None, :] < lengths[:, None]).long()
        ids = torch.full((len(encodings), n), self.pad_token_id, dtype=torch.long)
        ids[mask.bool()] = torch.cat([e.input_ids for e in encodings])
        return {"input_ids": ids.to(self.device), "attention_mask": mask.to(self.device)}

    def decoder_inputs(self, targets: Sequence[Encoding]) -> dict:
        """Teacher-forcing decoder inputs: the start token followed by each target but
        its last token, right-padded: ``decoder_input_ids``/``decoder_attention_mask``."""
        start = self.decoder_start_id()
        seqs = [torch.cat([torch.tensor([start]), t.input_ids[:-1]]) for t in targets]
        n = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), n), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), n), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = s
            mask[i, : len(s)] = 1
        return {"decoder_input_ids": ids.to(self.device), "decoder_attention_mask": mask.to(self.device)}

    def inputs_of(self, texts: Sequence[str]) -> dict:
        """Model inputs for a text or texts: tokenized, right-padded (:meth:`batch`); for an
        encoder-decoder model the texts are also the decoder's targets (teacher forcing).

        Raises:
            ValueError: no texts, or as :meth:`encode`.
        """
        texts = [texts] if isinstance(texts, str) else list(texts)
        if not texts:
            raise InputError("no input texts: give at least one sentence")
        inputs = self.batch(self.encode_batch(texts))
        if self.arch == "encoder-decoder":
            inputs.update(self.decoder_inputs(self.encode_batch(texts, target=True)))
        return inputs

    def run(self, texts: Sequence[str], **model_kwargs: Any) -> Any:
        """The model's output on a text or texts, in one call (``adapter(texts)`` is the
        same): :meth:`inputs_of`, then one forward without autograd. To read or edit
        activations on the way, use :func:`probe.trace`."""
        with torch.no_grad():
            return self.model(**self.inputs_of(texts), **model_kwargs)

    __call__ = run

    def describe(self) -> dict:
        """JSON-able summary: name, source, family, architecture, layers, heads."""
        d = {
            "name": self.name,
            "source": self.source,
            "family": self.family,
            "arch": self.arch,
            "layers": self.n_layers,
            "heads": self.n_heads,
            "head_dim": self.head_dim,
            "max_length": self.max_length,
        }
        if self.card:
            d["card"] = self.card
        return d


_FUNCTIONAL_ATTENTION: dict = {}  # class -> whether its source calls multi_head_attention_forward


def _calls_functional_attention(cls: type) -> bool:
    """Whether an attention module's forward calls torch's functional
    ``multi_head_attention_forward`` (WavLM): its output projection is then a weight, not a call.
    Cached per class: reading and parsing the source took 27 ms a call, and every head
    removal asks (``check_head_site``), 49 s of the EWT dev report before the cache."""
    if cls in _FUNCTIONAL_ATTENTION:
        return _FUNCTIONAL_ATTENTION[cls]
    try:
        found = "multi_head_attention_forward(" in inspect.getsource(cls)
    except (OSError, TypeError):
        found = False
    _FUNCTIONAL_ATTENTION[cls] = found
    return found


def _fan_in(proj: torch.nn.Module) -> int:
    """The input width of an output projection (a Linear, or GPT-2's transposed Conv1D)."""
    weight = getattr(proj, "weight", None)
    if type(proj).__name__ == "Conv1D" and torch.is_tensor(weight):
        return int(weight.shape[0])
    return int(getattr(proj, "in_features", 0) or 0)


def _head_size_of(module: torch.nn.Module) -> Optional[int]:
    """The per-head output width an attention module states itself (the value head's where
    it differs from the query's), or None."""
    for k in ("v_head_dim", "attention_head_size", "head_dim", "head_size"):
        v = getattr(module, k, None)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def _heads_of(module: torch.nn.Module) -> Optional[int]:
    """The query-head count an attention module states itself, or None."""
    for k in ("num_heads", "num_attention_heads", "n_heads", "n_head"):
        v = getattr(module, k, None)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


class NoTokenizer:
    """The tokenizer of a model that takes no text: using it raises the adapter's one-line
    refusal (:meth:`ModelAdapter.not_text`); ``model_max_length`` is None."""

    model_max_length = None
    is_fast = False

    def __init__(self, adapter: "ModelAdapter") -> None:
        self._adapter = adapter

    def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise self._adapter.not_text()

    def __getattr__(self, name: str) -> NoReturn:
        if name.startswith("__"):
            raise AttributeError(name)
        raise self._adapter.not_text()

    def __len__(self) -> int:
        raise self._adapter.not_text()


def _full_attention(model: torch.nn.Module, card: dict) -> None:
    """Switch block-sparse attention (BigBird; Zaheer et al., 2020) to full attention, whose
    probabilities are an ordinary ``[query, key]`` map: block-sparse attention has none, and
    BigBird swaps its attention modules for full ones by itself on the first input shorter
    than its blocks, leaving module lists found before stale. Noted in ``card`` and said on
    stderr (a logging warning) when it happens, so a user does not read full-attention maps
    as the block-sparse model's."""
    sparse = [
        m
        for m in model.modules()
        if getattr(m, "attention_type", None) == "block_sparse" and hasattr(m, "set_attention_type")
    ]
    for module in sparse:  # the whole list first: switching replaces modules of the tree
        if module.attention_type == "block_sparse":
            module.set_attention_type("original_full")  # type: ignore[operator]
            card["attention_type"] = "original_full (switched from block_sparse: its maps are not [query, key])"
    cfg = getattr(model, "config", None)
    if cfg is not None and getattr(cfg, "attention_type", None) == "block_sparse":
        cfg.attention_type = "original_full"
    if sparse:
        t = getattr(cfg, "model_type", "?")
        log.warning(
            "model type %r: switched from block-sparse to full attention (attention_type='original_full'): "
            "block-sparse attention has no [query, key] map, so the maps, ablations and outputs are those "
            "of the full-attention model, not the block-sparse one",
            t,
        )


def _probe_ids(model: torch.nn.Module, n: int = 6) -> Optional[torch.Tensor]:
    vocab = getattr(model.config, "vocab_size", None) or getattr(
        getattr(model.config, "text_config", None), "vocab_size", None
    )
    if not isinstance(vocab, int) or vocab < n + 12:
        return None
    base = torch.arange(10, 10 + n)
    other = base.clone()
    other[-1] = 10 + n + 1
    return torch.stack([base, other])


def _drop_uncalled(model: torch.nn.Module, table: dict) -> None:
    """Encoder-decoders: leave out the attention modules one short text forward (with a
    two-token decoder input) never calls — a vision tower inside (T5Gemma 2). Nothing
    changes when that forward fails."""
    ids = _probe_ids(model)
    if ids is None or str(getattr(model, "main_input_name", "input_ids")) != "input_ids":
        return
    calls: set = set()
    every = [m for name in STACKS if name in table for m in table[name]["attention"]]
    hooks = HookSet()
    try:
        for m in dict.fromkeys(every):
            hooks.forward(m, lambda mod, a, o: calls.add(mod))
        with torch.no_grad():
            model(input_ids=ids, attention_mask=torch.ones_like(ids), decoder_input_ids=ids[:, :2])
    except Exception:
        return
    finally:
        hooks.remove()
    for name in STACKS:
        if name in table:
            keep = [k for k, m in enumerate(table[name]["attention"]) if m in calls]
            if keep and len(keep) < len(table[name]["attention"]):
                table[name] = {site: [v[k] for k in keep] for site, v in table[name].items()}


def _behaviour(model: torch.nn.Module, table: dict, problems: dict) -> Any:
    """Causality and layer order read from one short forward of a text model (not an
    encoder-decoder): two inputs that differ only in their last token. The main stack is
    causal when no earlier position's output changes (a model may build its causal mask
    outside the attention modules: CLIP's text model). The order in which the stack's
    attention modules are called gives one entry per call: a model that calls one module
    for several layers (ALBERT's shared layer) gets one entry per layer.

    Modules of the stack that a text input never calls (a multimodal model's vision
    tower) are left out.

    Returns:
        ``(causal, order, unused)`` — ``unused``: the other stacks no text forward calls
        (left out); ``order`` maps the stack's module lists to per-call lists
        (None when every module is called once, in table order) — or None when the model
        takes no text or the forward fails (then the table's own reading stands).
    """
    if getattr(model.config, "is_encoder_decoder", False) or table["arch"] not in table:
        return None
    if str(getattr(model, "main_input_name", "input_ids")) != "input_ids":
        return None
    ids = _probe_ids(model)
    if ids is None:
        return None
    stack = table[table["arch"]]
    modules = stack["attention"]
    calls: list = []
    every = [m for name in STACKS if name in table for m in table[name]["attention"]]
    hooks = HookSet()
    try:
        for m in dict.fromkeys(every):
            hooks.forward(m, lambda mod, a, o: calls.append(mod))
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=torch.ones_like(ids))
    except Exception as exc:
        towers = [
            k
            for k in vars(model.config)
            if k.endswith("_config") and k != "text_config" and hasattr(getattr(model.config, k), "model_type")
        ]
        if towers:
            t = getattr(model.config, "model_type", "?")
            raise UnsupportedModel(
                f"model type {t!r} ({type(model).__name__}) is multimodal: its forward needs more than text "
                f"({', '.join(towers)}; a text-only forward raises {type(exc).__name__}); open its text or "
                "vision model on its own"
            ) from None
        text = str(exc).strip()
        problems["text_forward"] = f"{type(exc).__name__}: {text.splitlines()[0][:120]}" if text else type(exc).__name__
        return None  # keep the table's reading
    finally:
        hooks.remove()
    hidden = next(
        (
            v
            for v in (
                getattr(out, "last_hidden_state", None),
                out[0] if isinstance(out, (tuple, list)) or hasattr(out, "to_tuple") else None,
            )
            if torch.is_tensor(v)
        ),
        None,
    )
    if hidden is None or hidden.dim() != 3 or hidden.shape[1] != ids.shape[1]:
        return None
    before = hidden[:, :-1].double()
    scale = before.abs().max().clamp(min=1e-12)
    causal = bool(((before[0] - before[1]).abs().max() / scale) < 1e-6)
    called = set(calls)  # another stack a text input never runs (a multimodal projector's cross-attention)
    unused = {
        name
        for name in STACKS
        if name != table["arch"] and name in table and not called.intersection(table[name]["attention"])
    }
    order = None
    if calls and (len(calls) != len(modules) or any(a is not b for a, b in zip(calls, modules))):
        position = {m: k for k, m in enumerate(modules)}
        seq = [position[m] for m in calls if m in position]
        if seq:  # modules a text input never calls (a multimodal model's vision tower) are left out

            def order(entry: dict, seq: Any = seq) -> dict:
                return {site: [entry[site][k] for k in seq] for site in entry}

    return causal, order, unused
