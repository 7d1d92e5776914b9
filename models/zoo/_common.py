"""Shared plumbing for the zoo: word-level tokenizers, a small training loop, cards, and
safe loading of weights (safetensors only, never pickles).

Every zoo model is trained by the project's own code on generated data, so that the
mechanism or the evidence it must use is known by construction. Each task module
(``models/zoo/<task>.py``) exposes the same small protocol, used by
:mod:`models.zoo`:

``TASK``, ``FAMILY``, ``SEED``, ``STEPS``, ``EVAL_SEED``, ``N_EVAL``, ``GENERATOR``,
``GROUND_TRUTH`` (a dict describing where the truth lives), ``METRIC``,
``generate(n, seed) -> list[dict]``, ``build(seed) -> (model, tokenizer)``,
``fit(model, tokenizer, steps, seed, avoid)``, ``accuracy(model, tokenizer, examples)``,
and optionally ``save(model, tokenizer, dir)`` / ``load(dir) -> (model, tokenizer)``
when the model is not a Hugging Face model.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Self, Sequence

import torch

from ..errors import InputError
from ..weights_check import check_model_folder, read_safetensors_header

log = logging.getLogger(__name__)

CARD = "card.json"
WEIGHTS = "model.safetensors"


# --------------------------------------------------------------------------- tokenizers
def word_tokenizer(
    words: Sequence[str],
    specials: Sequence[str],
    *,
    template: str | None = None,
    roles: dict | None = None,
    max_length: int = 64,
) -> Any:
    """A word-level fast tokenizer: one token per whitespace-separated word.

    Args:
        words: the ordinary vocabulary (ids follow ``specials``).
        specials: special tokens, first ids (e.g. ``["[PAD]", "[UNK]", "[CLS]", "[SEP]"]``).
        template: a ``TemplateProcessing`` single-sequence template such as
            ``"[CLS] $A [SEP]"`` (``None``: no special tokens added).
        roles: keyword roles for ``PreTrainedTokenizerFast`` (``pad_token`` …).
        max_length: ``model_max_length``.

    Returns:
        a ``transformers.PreTrainedTokenizerFast`` that returns offset mappings and
        word ids (``encoding.word_ids()``).
    """
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab: dict[str, int] = {}
    for w in list(specials) + list(words):
        if w in vocab:
            raise ValueError(f"duplicate vocabulary entry {w!r}")
        vocab[w] = len(vocab)
    roles = dict(roles or {})
    unk = roles.get("unk_token", specials[1] if len(specials) > 1 else None)
    tok = Tokenizer(models.WordLevel(vocab, unk_token=unk))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if template:
        used = [t for t in template.split() if t in vocab]
        tok.post_processor = processors.TemplateProcessing(
            single=template, special_tokens=[(t, vocab[t]) for t in used]
        )
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=max_length, **roles)
    fast.add_special_tokens({"additional_special_tokens": [s for s in specials if s not in roles.values()]})
    return fast


# --------------------------------------------------------------------------- training
class one_thread:
    """Context manager: run torch on one intra-op thread, restoring the old count.

    The zoo models are tiny; one thread is as fast and does not spin against other jobs
    on a shared machine (two spinning OpenMP threads made training 10× slower there).
    """

    def __enter__(self) -> Self:
        self.n = torch.get_num_threads()
        torch.set_num_threads(1)
        return self

    def __exit__(self, *exc: object) -> bool:
        torch.set_num_threads(self.n)
        return False


BERT_SPECIALS = dict(pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")


def bert_word_tokenizer(vocab: Sequence[str], specials: Sequence[str], max_length: int) -> Any:
    """A word-level tokenizer framing each input as ``[CLS] … [SEP]`` (the encoder tasks)."""
    return word_tokenizer(vocab, specials, template="[CLS] $A [SEP]", roles=dict(BERT_SPECIALS), max_length=max_length)


def seed_everything(seed: int) -> None:
    """Seed torch (model initialisation, dropout) deterministically."""
    torch.manual_seed(int(seed))


def train_loop(
    model: torch.nn.Module,
    batch_fn: Callable[[int], dict],
    loss_fn: Callable[[torch.nn.Module, dict], torch.Tensor],
    *,
    steps: int,
    lr: float = 3e-3,
    warmup: int = 50,
    weight_decay: float = 0.01,
    clip: float = 1.0,
    log_every: int = 200,
    on_step: Optional[Callable[[int, torch.nn.Module], None]] = None,
) -> dict:
    """AdamW with linear warm-up and cosine decay; returns ``{"steps", "seconds", "loss"}``.

    ``batch_fn(step)`` returns a batch (a dict of tensors); ``loss_fn(model, batch)``
    returns a scalar loss. ``on_step(done, model)`` is called before the first step
    (``done = 0``) and after each one (``done`` steps taken), the model in eval mode
    during the call (a checkpoint schedule saves there). The model is left in eval mode.
    """
    if steps < 1:
        raise InputError(f"steps must be ≥ 1, got {steps}")
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    warmup = min(warmup, max(1, steps // 5))

    def schedule(s: int) -> float:
        if s < warmup:
            return (s + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (s - warmup) / max(1, steps - warmup))) * 0.95 + 0.05

    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
    model.train()
    t0 = time.perf_counter()
    running = None
    with one_thread():
        running = _run(model, opt, sched, batch_fn, loss_fn, steps, clip, log_every, t0, on_step)
    model.eval()
    return {"steps": steps, "seconds": round(time.perf_counter() - t0, 1), "loss": running}


class StopTraining(Exception):
    """Raised by an ``on_step`` callback to end a run early (the schedule stays the full
    run's: the first steps of a long run, for training dynamics in a short time)."""


def _visit(on_step: Optional[Callable], done: int, model: Any) -> None:
    """Call ``on_step(done, model)`` with the model in eval mode, then back to training."""
    if on_step is None:
        return
    model.eval()
    on_step(done, model)
    model.train()


def _run(
    model: Any,
    opt: Any,
    sched: Any,
    batch_fn: Callable,
    loss_fn: Callable,
    steps: int,
    clip: float,
    log_every: int,
    t0: float,
    on_step: Optional[Callable] = None,
) -> Any:
    try:
        return _steps(model, opt, sched, batch_fn, loss_fn, steps, clip, log_every, t0, on_step)
    except StopTraining as stop:
        return stop.args[0] if stop.args else None


def _steps(
    model: Any,
    opt: Any,
    sched: Any,
    batch_fn: Callable,
    loss_fn: Callable,
    steps: int,
    clip: float,
    log_every: int,
    t0: float,
    on_step: Optional[Callable],
) -> Any:
    running = None
    _visit(on_step, 0, model)
    for step in range(steps):
        batch = batch_fn(step)
        loss = loss_fn(model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        sched.step()
        running = loss.item() if running is None else 0.95 * running + 0.05 * loss.item()
        _visit(on_step, step + 1, model)
        if log_every and (step + 1) % log_every == 0:
            log.info("step %d/%d loss %.4f (%.1fs)", step + 1, steps, running, time.perf_counter() - t0)
    return running


def fresh_sampler(generate: Callable[[int, int], list], avoid: Iterable[str], seed: int) -> Callable[[int], list]:
    """Return ``sample(n) -> list[dict]`` drawing training examples from ``generate``
    with successive seeds derived from ``seed``, skipping any whose ``text`` is in
    ``avoid`` (the held-out set), so that held-out accuracy is on unseen examples."""
    avoid = set(avoid)
    state = {"k": 0}

    def sample(n: int) -> list:
        out: list = []
        while len(out) < n:
            state["k"] += 1
            batch = generate(n, seed * 1_000_003 + state["k"])
            out.extend(e for e in batch if _key(e) not in avoid)
        return out[:n]

    return sample


def _key(example: dict) -> str:
    return example["text"]


# --------------------------------------------------------------------------- cards / io
@torch.no_grad()
def token_accuracy(model: Any, tok: Any, examples: Sequence[dict], encode: Callable, batch_size: int = 256) -> float:
    """Per-token accuracy of a token classifier over the positions whose label is not
    −100; ``encode(tok, examples) -> (encoding, labels [batch, seq])``."""
    correct = total = 0
    for i in range(0, len(examples), batch_size):
        enc, labels = encode(tok, examples[i : i + batch_size])
        pred = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits.argmax(-1)
        m = labels != -100
        correct += (pred[m] == labels[m]).sum().item()
        total += m.sum().item()
    return correct / max(1, total)


def write_card(directory: Path, card: dict) -> None:
    with open(Path(directory) / CARD, "w") as f:
        json.dump(card, f, indent=2, sort_keys=False)
        f.write("\n")


def read_card(directory: Path) -> dict:
    path = Path(directory) / CARD
    if not path.is_file():
        raise InputError(f"no {CARD} in {directory}: not a zoo model directory")
    try:
        with open(path) as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise InputError(f"{path} is not valid JSON ({e}); retrain with `probe train`") from None


def check_safetensors(path: Path) -> None:
    """Raise :class:`InputError` naming ``path`` if it is missing, truncated or corrupted
    (:func:`probe.models.weights_check.read_safetensors_header`; never unpickles anything)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"weights file {path} is missing; retrain with `probe train`")
    read_safetensors_header(path)


def save_hf(model: Any, tokenizer: Any, directory: Path) -> None:
    """Save a Hugging Face model (safetensors) and its tokenizer in ``directory``."""
    model.save_pretrained(directory, safe_serialization=True)
    tokenizer.save_pretrained(directory)


def load_hf(model_class: Any, directory: str | os.PathLike, **kwargs: Any) -> tuple:
    """Load a Hugging Face model and tokenizer saved by :func:`save_hf` (eval mode,
    eager attention so that attention weights can be returned)."""
    from transformers import PreTrainedTokenizerFast

    directory = Path(directory)
    check_safetensors(directory / WEIGHTS)
    check_model_folder(directory, layers=True)  # the config's sizes, and its layers against the weights'
    model = model_class.from_pretrained(directory, attn_implementation="eager", trust_remote_code=False, **kwargs)
    model.eval()
    tok = PreTrainedTokenizerFast.from_pretrained(directory, trust_remote_code=False)
    return model, tok


def n_threads_note() -> str:
    return f"1 torch thread, {os.cpu_count()} CPUs (train_seconds is wall time, load included)"
