"""The model zoo: small models trained by this project on synthetic tasks whose
mechanism or evidence is known by construction.

Each task lives in its own module (``models/zoo/<task>.py``) with its data generator,
model configuration and training routine; trained weights are committed under
``models/zoo/weights/<task>/`` as safetensors beside a tokenizer and a JSON card
(task, generator settings, seed, held-out accuracy, where the ground truth lives).

Public API:
    TASKS: the task names.
    load_zoo(task, path=None) -> ZooModel
    eval_examples(task, n=None, seed=None) -> list[dict]   (deterministic held-out set)
    train(task, out, steps=None, seed=None, force=False, checkpoints=(), batch_size=None) -> dict (the card)
    checkpoint_schedule(steps, every=None, n=None) -> list[int]
    evaluate(task_or_model, n=None) -> dict

Transformer tasks are plain Hugging Face models (BERT, GPT-2, BART), so the generic
adapter gets capture, interventions and word alignment for free; ``translate-rnn`` is a
GRU encoder-decoder with additive attention (``card["family"] == "gru-attention"``).
"""

from __future__ import annotations


import importlib
import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from . import _common
from ..errors import InputError

log = logging.getLogger(__name__)

#: task name -> module under models.zoo
_MODULES = {
    "prev-token": "prev_token",
    "induction": "induction",
    "agreement": "agreement",
    "brackets": "brackets",
    "translate": "translate",
    "translate-rnn": "translate_rnn",
    "constructed": "constructed",
    "relay": "relay",
}
TASKS = tuple(_MODULES)
WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"


@dataclass(frozen=True)
class ZooModel:
    """A loaded zoo model.

    Attributes:
        model: the model in eval mode (a Hugging Face ``PreTrainedModel``, or for
            ``translate-rnn`` a ``torch.nn.Module``, see ``card["family"]``).
        tokenizer: a ``PreTrainedTokenizerFast`` (word level, offsets available).
        card: the JSON card (task, generator, seed, accuracy, ground truth).
        task: the task name.
        path: the directory the model was loaded from.
    """

    model: Any
    tokenizer: Any
    card: dict
    task: str
    path: Optional[Path] = None
    extra: dict = field(default_factory=dict)


def task_module(task: str) -> Any:
    """The module implementing ``task``; ``ValueError`` listing known tasks otherwise."""
    name = task[4:] if isinstance(task, str) and task.startswith("zoo:") else task
    if name not in _MODULES:
        raise InputError(f"unknown zoo task {task!r}; known tasks: {', '.join(TASKS)}")
    return importlib.import_module(f"{__name__}.{_MODULES[name]}")


#: the most held-out examples :func:`eval_examples` generates (each command's count is
#: refused beyond it instead of filling memory for minutes)
MAX_EVAL = 10_000


def eval_examples(task: str, n: Optional[int] = None, seed: Optional[int] = None) -> list:
    """Regenerate the held-out evaluation set of ``task`` deterministically.

    Returns a list of dicts with at least ``text`` (space-joined words) plus the task's
    ground-truth fields (see ``card["ground_truth"]``). ``n`` defaults to the card's
    ``N_EVAL``; ``seed`` to the task's evaluation seed. Raises ``ValueError`` for an
    unknown task, ``n < 1`` or ``n > MAX_EVAL``.
    """
    mod = task_module(task)
    n = mod.N_EVAL if n is None else int(n)
    if n < 1:
        raise InputError(f"n must be ≥ 1, got {n}")
    if n > MAX_EVAL:
        raise InputError(
            f"{n} held-out examples asked for; the evaluation set of {mod.TASK} is generated in "
            f"memory, at most {MAX_EVAL} (its card uses {mod.N_EVAL}): ask for fewer"
        )
    return mod.generate(n, mod.EVAL_SEED if seed is None else int(seed))


def load_zoo(task: str, path: Optional[str | Path] = None) -> ZooModel:
    """Load the committed model of ``task`` (or one trained into ``path``).

    Raises ``ValueError`` for an unknown task, a directory without a card, a card for
    another task, or a missing/corrupted/truncated weights file.
    """
    mod = task_module(task)
    directory = Path(path) if path is not None else WEIGHTS_DIR / mod.TASK
    if not directory.is_dir():
        raise InputError(
            f"no trained model for zoo:{mod.TASK} at {directory}; run `probe train zoo:{mod.TASK} --out {directory}`"
        )
    card = _common.read_card(directory)
    if card.get("task") != mod.TASK:
        raise InputError(f"{directory} holds a zoo:{card.get('task')} model, not zoo:{mod.TASK}")
    model, tok = mod.load(directory)
    card = dict(card, path=str(directory))
    return ZooModel(model=model, tokenizer=tok, card=card, task=mod.TASK, path=directory)


#: the folder of a run's checkpoints inside ``out`` (``checkpoints/step-000100/`` …)
CHECKPOINTS_DIR = "checkpoints"


def checkpoint_dir(out: str | Path, step: int) -> Path:
    """Where :func:`train` saves the checkpoint taken after ``step`` steps."""
    return Path(out) / CHECKPOINTS_DIR / f"step-{int(step):06d}"


def checkpoint_schedule(steps: int, every: Optional[int] = None, n: Optional[int] = None) -> list:
    """The steps a run of ``steps`` steps saves checkpoints at: ``0`` (the initialisation),
    every ``every`` steps, or ``n`` evenly spaced ones, and always the last step.

    Raises:
        InputError: both or neither of ``every`` and ``n``, or a value below 1.
    """
    if (every is None) == (n is None):
        raise InputError("give one checkpoint schedule: every N steps, or N checkpoints")
    k = int(every if every is not None else n)  # type: ignore[arg-type]  # one of them is given (checked)
    if k < 1:
        raise InputError(f"the checkpoint schedule needs a positive number, got {k}")
    if every is not None:
        points = set(range(0, steps + 1, k))
    else:
        points = {round(i * steps / k) for i in range(k + 1)}
    return sorted(points | {0, int(steps)})


def train(
    task: str,
    out: str | Path,
    steps: Optional[int] = None,
    seed: Optional[int] = None,
    force: bool = False,
    checkpoints: Any = (),
    batch_size: Optional[int] = None,
    stop_after: Optional[int] = None,
) -> dict:
    """Train ``task`` from scratch into ``out``; return the card written there.

    ``checkpoints``: steps after which the weights are saved too, each as a zoo model
    directory ``out/checkpoints/step-NNNNNN/`` (weights, tokenizer, a card with its
    ``step``; :func:`load_zoo` opens it with ``path=``), for training dynamics
    (``probe compare out/checkpoints/step-*``); ``0`` is the initialisation.
    ``batch_size``: examples per step (default: the task's). ``stop_after``: end the run
    after this many of its ``steps`` (the learning-rate schedule stays the full run's, so
    its checkpoints are the first ones of the long run: the tests' training dynamics).

    Raises ``InputError`` if ``out`` exists and is not empty, unless ``force``; for a
    checkpoint step outside ``0..steps``; for checkpoints of a task whose trainer takes
    no schedule.
    """
    import inspect

    mod = task_module(task)
    out = Path(out)
    steps = mod.STEPS if steps is None else int(steps)
    seed = mod.SEED if seed is None else int(seed)
    schedule = sorted({int(s) for s in checkpoints})
    last = steps if stop_after is None else int(stop_after)
    if stop_after is not None and not 1 <= last <= steps:
        raise InputError(f"stop_after must lie in 1..{steps} (the run's steps), got {stop_after}")
    if schedule and (schedule[0] < 0 or schedule[-1] > last):
        raise InputError(f"checkpoint steps must lie in 0..{last} (the steps run), got {schedule}")
    accepts = inspect.signature(mod.fit).parameters
    if (schedule or stop_after is not None) and "on_step" not in accepts:
        raise InputError(f"zoo:{mod.TASK}'s trainer saves no checkpoints yet (it takes no schedule); train it without")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        if not force:
            raise InputError(f"{out} already exists; pass --force to overwrite it")
        shutil.rmtree(out) if out.is_dir() else out.unlink()
    held_out = mod.generate(mod.N_EVAL, mod.EVAL_SEED)
    settings: dict = {} if batch_size is None else {"batch_size": int(batch_size)}
    t0 = time.perf_counter()
    tok_box: dict = {}

    def save_checkpoint(done: int, model: Any) -> None:
        if done in schedule:
            where = checkpoint_dir(out, done)
            where.mkdir(parents=True, exist_ok=True)
            mod.save(model, tok_box["tok"], where)
            _common.write_card(where, _checkpoint_card(mod, seed, steps, done, settings))
        if done == last and last < steps:
            raise _common.StopTraining()

    if schedule or last < steps:
        settings["on_step"] = save_checkpoint
    with _common.one_thread():
        model, tok = mod.build(seed)
        tok_box["tok"] = tok
        stats = mod.fit(model, tok, steps, seed, avoid={e["text"] for e in held_out}, **settings)
        acc = mod.accuracy(model, tok, held_out)
    settings.pop("on_step", None)
    out.mkdir(parents=True, exist_ok=True)
    mod.save(model, tok, out)
    card = {
        "task": mod.TASK,
        "family": mod.FAMILY,
        "architecture": type(model).__name__,
        "config": getattr(mod, "CONFIG", {}),
        "generator": mod.GENERATOR,
        "seed": seed,
        "train_steps": steps,
        "step": last,  # the steps the saved weights took (--stop-after ends the run early)
        "train_seconds": round(time.perf_counter() - t0, 1),
        "train_final_loss": stats.get("loss"),
        "trained_with": _common.n_threads_note(),
        "metric": mod.METRIC,
        "accuracy": round(100 * acc, 2),
        "eval_seed": mod.EVAL_SEED,
        "n_eval": mod.N_EVAL,
        "ground_truth": mod.GROUND_TRUTH,
        "retrain": f"probe train zoo:{mod.TASK} --out DIR --seed {seed} --steps {steps}",
    }
    if settings.get("batch_size"):
        card["batch_size"] = settings["batch_size"]
        card["retrain"] += f" --batch-size {settings['batch_size']}"
    if last < steps:
        card["stopped_after"] = last
    if schedule:
        card["checkpoints"] = {str(s): str(checkpoint_dir(out, s).relative_to(out)) for s in schedule}
    card.update(getattr(mod, "CARD_EXTRA", {}))
    _common.write_card(out, card)
    log.info(
        "zoo:%s trained in %.1fs, held-out %s = %.2f%%", mod.TASK, card["train_seconds"], mod.METRIC, card["accuracy"]
    )
    return card


def _checkpoint_card(mod: Any, seed: int, steps: int, done: int, settings: dict) -> dict:
    """The card of a checkpoint: what made it and after how many of the run's steps."""
    card = {
        "task": mod.TASK,
        "family": mod.FAMILY,
        "config": getattr(mod, "CONFIG", {}),
        "generator": mod.GENERATOR,
        "seed": seed,
        "step": done,
        "train_steps": steps,
        "metric": mod.METRIC,
        "eval_seed": mod.EVAL_SEED,
        "n_eval": mod.N_EVAL,
        "ground_truth": mod.GROUND_TRUTH,
    }
    if settings.get("batch_size"):
        card["batch_size"] = settings["batch_size"]
    return card


def evaluate(task: str, path: Optional[str | Path] = None, n: Optional[int] = None) -> dict:
    """Held-out accuracy (percent) of a zoo model on its regenerated evaluation set.

    Returns ``{"task", "metric", "accuracy", "card_accuracy", "n_eval", "path"}``.
    """
    zm = load_zoo(task, path)
    mod = task_module(zm.task)
    examples = eval_examples(zm.task, n=n if n is not None else zm.card.get("n_eval"))
    with _common.one_thread():
        acc = 100 * mod.accuracy(zm.model, zm.tokenizer, examples)
    return {
        "task": zm.task,
        "metric": mod.METRIC,
        "accuracy": round(acc, 2),
        "card_accuracy": zm.card.get("accuracy"),
        "n_eval": len(examples),
        "path": str(zm.path),
    }


def cards() -> list:
    """The cards of all committed zoo models (tasks without weights are skipped)."""
    out = []
    for t in TASKS:
        d = WEIGHTS_DIR / t
        if (d / _common.CARD).is_file():
            out.append(_common.read_card(d))
    return out


_ARCH = {
    "bert": "encoder",
    "gpt2": "decoder",
    "llama": "decoder",
    "bart": "encoder-decoder",
    "gru-attention": "encoder-decoder (recurrent)",
}


def list_zoo() -> list:
    """What ``probe models`` shows for the zoo: one dict per committed model
    (``name, source, family, arch, layers, heads, card``), read from the cards and
    config files without loading weights."""
    import json

    out = []
    for card in cards():
        d = WEIGHTS_DIR / card["task"]
        try:
            cfg = json.loads((d / "config.json").read_text())
        except (OSError, json.JSONDecodeError):
            cfg = {}
        layers = cfg.get("num_hidden_layers", cfg.get("n_layer", cfg.get("encoder_layers", 1)))
        heads = cfg.get("num_attention_heads", cfg.get("n_head", cfg.get("encoder_attention_heads", 1)))
        out.append(
            {
                "name": f"zoo:{card['task']}",
                "source": str(d),
                "family": card["family"],
                "arch": _ARCH.get(card["family"], ""),
                "layers": layers,
                "heads": heads,
                "card": card,
            }
        )
    return out
