"""Build the per-head report: :func:`build_report` (capture then report) and
:func:`write_report` (report from maps already captured).

Output directory ``DIR``::

    index.html               layer × head grid, corpus/model/settings, sections run or skipped
    heads/L{l}H{h}.html      one page per head: verdict, evidence, heatmaps, line view, head view
    heads/*.png              the heatmaps
    summary.json, report.md  the same numbers, machine-readable
    tables/<section>_<name>.csv

The report is built in a temporary directory beside ``DIR`` and renamed into place, so an
existing ``DIR`` (replaced only with ``force``) is never half-overwritten.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from probe.app.registry import Context, open_run
from probe.errors import InputError

from .examples import representative_examples, sharpest_examples
from .sections import choose, note_choices, run_sections
from .verdict import claims_verdict, verdict

log = logging.getLogger(__name__)


@dataclass
class ReportData:
    """A report's content: the context, the sections' outcomes, facts, evidence and verdicts.

    ``facts[(layer, head)][section] = {column: value}`` (summary.json's raw facts);
    ``evidence[(layer, head)] = [HeadEvidence, …]`` (:mod:`probe.app.registry.evidence`:
    what pages, the verdict, report.md and summary.json say); ``verdicts[(layer, head)]``.
    """

    ctx: Context
    outcomes: list
    facts: dict = field(default_factory=dict)
    verdicts: dict = field(default_factory=dict)
    evidence: dict = field(default_factory=dict)
    seconds: float = 0.0
    claims: Optional[object] = None  # probe.analyses.claims.heads.HeadClaims when that section ran
    path: Optional[Path] = None
    #: the run time the index states ("455 s (from the start of the process …)"), set as it is written
    built_in: str = ""

    @property
    def layers(self) -> tuple:
        return self.ctx.layers

    @property
    def n_heads(self) -> int:
        return self.ctx.n_heads

    def flat_facts(self, layer: int, head: int) -> dict:
        """All sections' facts about one head in one dict (later sections win)."""
        out = {}
        for facts in self.facts.get((layer, head), {}).values():
            out.update(facts)
        return out

    @property
    def statuses(self) -> dict:
        """section name -> ran | skipped | failed."""
        return {o.name: o.status for o in self.outcomes}


def _collect_facts(ctx, outcomes) -> dict:
    facts = {}
    for o in outcomes:
        ph = o.result.per_head if o.status == "ran" else None
        if ph is None or len(ph) == 0:
            continue
        for rec in ph.to_dict("records"):
            key = (int(rec.pop("layer")), int(rec.pop("head")))
            facts.setdefault(key, {})[o.name] = rec
    return facts


def _special_names(maps) -> tuple:
    m = maps[0]
    idx = [i for i, s in enumerate(m.special_mask.tolist()) if s]
    if not idx:
        return "the first token", "the last token"
    return str(m.tokens[idx[0]]), str(m.tokens[idx[-1]])


def analyse(
    ctx: Context,
    sections: Optional[Sequence[str]] = None,
    strict: bool = False,
    progress: Any = None,
    partial: Any = None,
) -> ReportData:
    """Run the report sections on the run ``ctx`` (:func:`probe.app.registry.open_run`)
    and derive per-head facts and verdicts.

    ``progress(i, n, name)`` is called before each section runs (the CLI prints a line).
    ``partial`` (:class:`.resume.PartialReport`) keeps finished sections and resumes them.

    Raises:
        ValueError: an unknown section name, or a run with no example captured.
    """
    t0 = time.perf_counter()
    if not ctx.maps:
        raise InputError("nothing to report: no example was captured")
    if not ctx.report.representatives:
        ctx.report.representatives = representative_examples(ctx.maps)
    outcomes = run_sections(ctx, choose(sections), strict=strict, progress=progress, partial=partial)
    from probe.app.registry.evidence import collect

    data = ReportData(ctx, outcomes, _collect_facts(ctx, outcomes))
    by_name = {a.name: a for a in choose(sections)}
    data.evidence = collect((by_name[o.name], o.result) for o in outcomes if o.status == "ran")
    cls, sep = _special_names(ctx.maps)
    claims = data.claims = _claims_made(by_name, outcomes)
    for layer in ctx.layers:
        for h in range(ctx.n_heads):
            if claims is not None and (layer, h) in claims.claims:
                data.verdicts[(layer, h)] = claims_verdict(claims.claims[(layer, h)])
            else:
                data.verdicts[(layer, h)] = verdict(data.evidence.get((layer, h), []), cls=cls, sep=sep)
    data.seconds = time.perf_counter() - t0
    return data


def _claims_made(by_name: dict, outcomes: list) -> Any:
    """The heads' claims (:class:`probe.analyses.claims.heads.HeadClaims`) of the section whose
    presentation says its evidence is the claims (``Presentation.claims``), where it ran."""
    for o in outcomes:
        made = by_name[o.name].shows.claims
        if o.status == "ran" and callable(made):
            return made(o.result)
    return None


def _check_out(out, force: bool) -> Path:
    """The one ``--out`` rule (:func:`probe.app.registry.outdir.check_out`): a directory,
    empty or absent unless ``force``, whose parent can be written."""
    from probe.app.registry.outdir import check_out

    return check_out(out, force)


def _render(data: ReportData, tmp: Path) -> None:
    from .heatmaps import render_heatmaps
    from .outputs import write_summary, write_tables
    from .pages import head_file, head_html, index_html

    ctx = data.ctx
    heads_dir = tmp / "heads"
    heads_dir.mkdir()
    sharp = sharpest_examples(ctx.maps)
    rep = ctx.report.representatives[0]
    requests, figures = {}, {}
    for li, layer in enumerate(ctx.layers):
        for h in range(ctx.n_heads):
            exs = list(dict.fromkeys([rep, int(sharp[li, h])]))
            figures[(layer, h)] = []
            for ex in exs:
                name = f"L{layer}H{h}_ex{ex}.png"
                requests.setdefault(ex, []).append((layer, h, heads_dir / name))
                figures[(layer, h)].append((ex, name))
    t0 = time.perf_counter()
    render_heatmaps(ctx.maps, requests)
    log.info("heatmaps: %.1fs", time.perf_counter() - t0)
    for (layer, h), figs in figures.items():
        (heads_dir / head_file(layer, h)).write_text(head_html(data, layer, h, figs), encoding="utf-8")
    write_tables(data, tmp)
    write_summary(data, tmp)
    from .views_pages import write_views

    write_views(data, tmp)
    (tmp / "index.html").write_text(index_html(data), encoding="utf-8")


def write_report(data: ReportData, out: Any, force: bool = False) -> Path:
    """Write ``data`` to the directory ``out`` (built beside it, then renamed).

    Raises:
        ValueError: ``out`` exists and ``force`` is false, ``out`` is a file, or its
            parent directory does not exist.
    """
    out = _check_out(out, force)
    out.absolute().parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.absolute().parent))
    try:
        t0 = time.perf_counter()
        _render(data, tmp)
        log.info("rendered the report in %.1fs", time.perf_counter() - t0)
        os.chmod(tmp, 0o755)
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.absolute().parent))
            os.replace(out, old / out.name)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    data.path = out
    return out


def _print_progress(i: int, n: int, name: str) -> None:
    import sys

    print(f"[{i + 1}/{n}] {name} …", file=sys.stderr, flush=True)


def build_report(
    out: Any,
    *,
    model: str = "minilm",
    text: Optional[Sequence[str]] = None,
    file: Optional[str] = None,
    conllu: Optional[str] = None,
    limit: Optional[int] = None,
    force: bool = False,
    sections: Optional[Sequence[str]] = None,
    device: str = "cpu",
    batch_size: int = 16,
    adapter: Any = None,
    strict: bool = False,
    progress: Any = False,
    memory_budget: Optional[int] = None,
    objective: Any = "auto",
    max_model_examples: Optional[int] = None,
    explained_examples: Optional[int] = None,
    resume: bool = True,
    window: Optional[int] = None,
    stride: Optional[int] = None,
    truncate: bool = False,
    engine: str = "auto",
    workers: int = 2,
    address: Optional[str] = None,
    kept_examples: Optional[int] = None,
    null: Optional[str] = None,
    causal: Optional[str] = None,
) -> ReportData:
    """Capture a corpus with a model and write the per-head report to ``out``.

    With no input (``text``/``file``/``conllu``) the bundled sample is used (a
    ``zoo:<task>`` model uses its own evaluation set). Examples longer than the model's
    limit are skipped and counted.

    Args:
        out: the report directory (refused when it exists, unless ``force``).
        model: a :func:`models.load_model` spec (ignored when ``adapter`` is given).
        sections: names of the sections to run (default: all default sections).
        strict: raise an analysis' error instead of listing the section as failed.
        memory_budget: bytes the process may use (:mod:`probe.inputs.budget`; default 2 GiB):
            forwards with gradients are sized from the input length to fit it.
        objective: what the sections measure the model by (ablation, importance, claims,
            faithfulness' target; ``auto``: chosen per model and use, printed), resolved
            once per use when the run opens (``ctx.objective(use)``).
        max_model_examples: most examples the model-running sections (ablation,
            importance, claims) use; ``0`` for the whole corpus; default their own cap.
        window, stride: split examples longer than ``window`` tokens into overlapping
            windows ``stride`` tokens apart (default half a window), each analysed as an
            example (:func:`probe.inputs.long_inputs.window_corpus` says how they are joined).
        truncate: cut examples longer than the model's limit to it instead.
        resume: keep each finished section in ``.OUT.partial/`` beside ``out`` and, when
            a previous run of the same command left one, resume from its finished
            sections (:mod:`.resume`); ``False`` discards it and starts afresh.
        progress: ``True`` for a capture bar and one line per section on stderr, or a
            callable ``progress(i, n, name)`` called before each section.
        engine: ``local`` (every example's maps held), ``stream`` or ``ray``: the corpus
            statistics (syntax, roles, the claims' evidence and sweeps) streamed over the
            whole corpus as accumulators, in this process or ``workers`` Ray actors (at
            ``address``), and only the first ``kept_examples`` examples (default 128)
            captured whole for the pages and the other sections (:mod:`.engine_sections`);
            ``auto`` (default): ``local`` while every example's maps fit in a quarter of
            the memory budget, else ``stream`` (:func:`choose_engine`).
        null: the null model the claims and the faithfulness bar are calibrated on
            (``reinit``, ``permute``, ``none``; default: the toolkit's,
            :data:`probe.analyses.claims.null_model.DEFAULT_NULL`).
        causal: the causal claims' path (``--causal``): ``auto`` (``None``: screened above
            144 heads, else sequential where the model-run cap cuts the corpus, else
            exhaustive), ``exhaustive`` (every head removed on the capped examples),
            ``sequential`` or ``screened`` (every example screened, the heads that could
            matter removed exactly, :mod:`probe.analyses.claims.screened_claims`).

    Returns:
        :class:`ReportData`, with ``path`` set.

    Raises:
        ValueError: bad input (see :func:`probe.inputs.corpus.load_corpus`), unknown model or
            section, ``out`` exists without ``force``, nothing left to capture.
    """
    from probe.inputs.budget import memory_budget as budget_in_force
    from probe.inputs.long_inputs import check_window

    t_start = time.perf_counter()
    out = _check_out(out, force)  # resolved once (a link followed), proved writable, before any compute
    choose(sections)  # unknown names fail before the slow part
    check_window(window, stride, truncate, None if adapter is not None else peek_limit(model))
    corpus, source = _input_corpus(model, text, file, conllu, limit, adapter)
    if adapter is None and _is_rnn_zoo(model):  # no hooks: its own attention function, no live adapter
        return _write_from_maps(out, model, corpus, sections, strict, force, source, limit, t_start)
    fit: dict[str, Any] = {"window": window, "stride": stride, "truncate": truncate, "memory_budget": memory_budget}
    adapter, corpus, budget, engine, notes = _prepared(model, adapter, corpus, device, engine=engine, **fit)
    overrides = _overrides(max_model_examples, explained_examples, null, causal)
    where = {"engine": engine, "address": address, "workers": workers, "kept_examples": kept_examples}
    ctx = _report_run(model, corpus, adapter, device, where, batch_size, overrides, objective, progress, sections)
    fingerprinted = dict(
        input=source, limit=limit, sections=[s.name for s in choose(sections)], overrides=overrides, device=device,
        objective=str(objective), batch_size=batch_size, window=window, stride=stride, truncate=truncate,
    )  # fmt: skip
    partial = _partial_report(out, ctx, adapter, fingerprinted, streamed=engine != "local", fresh=not resume)
    try:
        settings = _run_settings(ctx, adapter, source, limit, device, budget, _timed_capture(ctx))
        n, heads = len(ctx.corpus.whole), _head_count(adapter)
        settings.update(_model_examples_setting(n, max_model_examples, explained_examples, causal, heads=heads))
        settings.update({k: v for k, v in notes.items() if v})
        ctx.report.settings.update(settings, **_streamed_settings(ctx, batch_size, bool(progress), sections))
        with budget_in_force(budget):
            data = analyse(ctx, sections=sections, strict=strict, partial=partial, progress=_shown(progress))
        write_report(data, out, force=force)
        partial.discard()
    finally:
        partial.release()  # the lock, also when a section or the writing failed
    data.seconds = time.perf_counter() - t_start
    log.info("report written to %s in %.1fs", out, data.seconds)
    return data


def _prepared(
    model: Any,
    adapter: Any,
    corpus: Any,
    device: str,
    *,
    window: Optional[int],
    stride: Optional[int],
    truncate: bool,
    memory_budget: Optional[int],
    engine: str,
) -> tuple:
    """``(adapter, corpus, budget, engine, notes)`` before the slow part: the model loaded
    (unless given), the corpus fitted to its limit (:func:`_fitted`), the longest input
    checked against the memory budget (default :data:`probe.inputs.budget.DEFAULT_BUDGET`)
    and ``auto`` engine chosen (:func:`choose_engine`); ``notes`` the settings that say what
    was done to long inputs and why the engine was chosen (``""`` when nothing)."""
    from probe.inputs.budget import DEFAULT_BUDGET, check_budget
    from probe.models import load_model

    budget = memory_budget or DEFAULT_BUDGET
    adapter = adapter if adapter is not None else load_model(model, device=device)
    corpus, long_note = _fitted(corpus, adapter, window, stride, truncate)
    check_budget(adapter, _longest(corpus, adapter), budget)
    engine, engine_why = choose_engine(engine, corpus, adapter, budget)
    return adapter, corpus, budget, engine, {"long inputs": long_note, "engine choice": engine_why}


def _report_run(
    model: Any,
    corpus: Any,
    adapter: Any,
    device: str,
    where: dict,
    batch_size: int,
    overrides: dict,
    objective: Any,
    progress: Any,
    sections: Optional[Sequence[str]],
) -> Context:
    """The report's frozen run (:func:`probe.app.registry.runs.open_run`) on ``where``'s
    engine (``engine``, ``address``, ``workers``; a streamed engine holds the first
    ``kept_examples`` examples' maps, default :data:`.engine_sections.KEPT_EXAMPLES`), with
    an empty :class:`probe.app.registry.context.ReportState` and the objective of every use
    the chosen ``sections`` declare resolved now: one that does not fit the model is refused
    before any forward."""
    from probe.app.engine.kind import Engine
    from probe.app.registry.context import ReportState

    from .engine_sections import KEPT_EXAMPLES

    engine = where["engine"]
    ctx = open_run(
        model,
        corpus,
        adapter=adapter,
        device=device,
        engine=Engine(engine, address=where["address"], workers=where["workers"], device=device),
        kept_examples=(where["kept_examples"] or KEPT_EXAMPLES) if engine != "local" else None,
        batch_size=batch_size,
        report=ReportState(overrides=overrides),
        objective=objective,
        objective_fallback=True,
        quiet=not progress,
        echo=bool(progress),
        indent="  ",
    )
    readers: dict = {}
    for s in choose(sections):
        if s.objective:
            readers.setdefault(s.objective, []).append(s.name)
    ctx.open_objectives(readers, readers=readers)
    note_choices(ctx)  # the objective of each use and why: the report's settings
    return ctx


def _timed_capture(ctx: Context) -> float:
    """Seconds the run's capture takes (it captures on first use of ``ctx.maps``)."""
    t0 = time.perf_counter()
    n_captured = len(ctx.maps)
    t_capture = time.perf_counter() - t0
    log.info("captured %d examples in %.1fs", n_captured, t_capture)
    return t_capture


def _streamed_settings(ctx: Context, batch_size: int, progress: bool, sections: Optional[Sequence[str]]) -> dict:
    """Stream the corpus statistics on the run's engine (:func:`_engine_statistics`) and
    return the settings that say what ran where and how long it took; ``{}`` on the local
    engine (every example's maps held: nothing is streamed)."""
    if ctx.engine.holds_every_map:
        return {}
    on_engine = _engine_statistics(ctx, batch_size, progress, sections)
    out = on_engine.statement(len(ctx.corpus.kept), choose(sections))
    out["engine seconds"] = round(on_engine.stats["seconds"], 2)
    return out


def _input_corpus(
    model: str,
    text: Optional[Sequence[str]],
    file: Optional[str],
    conllu: Optional[str],
    limit: Optional[int],
    adapter: Any,
) -> tuple:
    """``(corpus, source)``: the given input (a zoo model's own set when none is given and
    no adapter), else the bundled sample."""
    from probe.inputs.corpus import load_corpus

    from .bundled import sample_corpus

    if text or file or conllu or (adapter is None and str(model).startswith("zoo:")):
        return load_corpus(text=text, file=file, conllu=conllu, limit=limit, model=model), "given"
    return sample_corpus(
        limit=limit
    ), "bundled sample (24 hand-annotated sentences; the first two from Vaswani et al. 2017)"


def _fitted(corpus: Any, adapter: Any, window: Optional[int], stride: Optional[int], truncate: bool) -> tuple:
    """``(corpus, note)``: long examples windowed or truncated (:func:`_cut_long`), then the
    corpus fitted to the model.

    Raises:
        InputError: every example is longer than the model's limit (the message says how
            the report can cut them).
    """
    from probe.inputs.corpus import fit_to_model

    corpus, long_note = _cut_long(corpus, adapter, window, stride, truncate)
    try:
        corpus = fit_to_model(corpus, adapter)
    except InputError as exc:  # every input too long: the report can cut them
        raise InputError(
            f"{exc}; or let the report cut them: --window N [--stride S] (overlapping windows) or --truncate"
        ) from None
    if not len(corpus):
        raise InputError(f"every example is longer than the model's {adapter.max_length} tokens")
    return corpus, long_note


def _partial_report(out: Path, ctx: Context, adapter: Any, fingerprinted: dict, streamed: bool, fresh: bool) -> Any:
    """The :class:`.resume.PartialReport` of this command: ``fingerprinted`` plus the
    model and the kept corpus (and, when ``streamed`` on an engine, the whole corpus's digest)."""
    from .resume import PartialReport, corpus_digest, fingerprint

    corpus, full = ctx.corpus.kept, ctx.corpus.whole  # the kept sample (maps held); the whole corpus
    engine = {"engine_kept": len(corpus), "engine_corpus": corpus_digest(full)} if streamed else {}
    from probe.models.fingerprint import tokenizer_fingerprint, weights_fingerprint

    keys = dict(model=adapter.name, model_info=adapter.describe(), corpus=corpus_digest(corpus), examples=len(corpus))
    keys.update(weights=weights_fingerprint(adapter.model), tokenizer=tokenizer_fingerprint(adapter.tokenizer))
    return PartialReport(out, fingerprint(**keys, **fingerprinted, **engine), fresh=fresh)


def _run_settings(
    ctx: Context, adapter: Any, source: str, limit: Optional[int], device: str, budget: int, t_capture: float
) -> dict:
    """The settings every report states: model, input, device, capture time, budget, unknown tokens."""
    from probe.inputs.budget import format_size

    return {
        "model": adapter.name,
        "model_info": adapter.describe(),
        "input": source,
        "limit": limit,
        "device": device,
        "capture seconds": round(t_capture, 2),
        "memory budget": format_size(budget),
        "unknown tokens": _unknown_summary(ctx.corpus.kept, adapter),
    }


def _engine_statistics(ctx: Context, batch_size: int, progress: bool, sections: Optional[Sequence[str]] = None) -> Any:
    """Stream the run's whole corpus once through the accumulators the sections declare
    (``Analysis.accumulators``) on its engine; they are kept as ``ctx.report.streamed`` (what
    ``ctx.accumulated`` returns) and the :class:`.engine_sections.EngineRun` as
    ``ctx.report.on_engine``, which is returned."""
    import sys

    from probe.runs.blocks import Streamed, corpus_items, stream_into

    from .engine_sections import EngineRun

    run = ctx.engine_run
    if run is None:
        raise RuntimeError("the local engine holds every example's maps: it streams no statistics")
    on_engine = ctx.report.on_engine = EngineRun(ctx.engine.name, run, ctx.corpus.whole)
    corpus = on_engine.corpus
    if progress:
        where = f"{on_engine.run.get('workers')} Ray workers" if on_engine.name == "ray" else "this process"
        print(f"statistics of all {len(corpus)} examples on {where} …", file=sys.stderr, flush=True)
    declared = {a.name: a.accumulators(ctx, corpus) for a in choose(sections) if a.accumulators is not None}
    keys = [(name, key) for name, by_key in declared.items() for key in by_key]
    filled: dict = {name: {} for name in declared}
    streamed = Streamed([], [])
    if keys:  # one pass of every declared accumulator, wherever the run's engine runs it
        streamed = stream_into(
            ctx.runner, corpus_items(corpus), [declared[n][k] for n, k in keys], batch_size=batch_size
        )
        for (name, key), acc in zip(keys, streamed.accumulators):
            filled[name][key] = acc
    on_engine.stats = {"filled": filled, "long": streamed.long, "seconds": streamed.seconds}
    ctx.report.streamed.update(filled)
    return on_engine


def _unknown_summary(corpus, adapter) -> str:
    """How many examples hold the tokenizer's unknown token, and which (the first ten)."""
    counts = list(corpus.unknown)
    hit = [k for k, n in enumerate(counts) if n]
    name = getattr(adapter.tokenizer, "unk_token", None) or "[UNK]"
    if not hit:
        return f"none ({name} in 0 of {len(counts)} examples)"
    listed = ", ".join(f"example {k}: {counts[k]}" for k in hit[:10]) + (", …" if len(hit) > 10 else "")
    return f"{sum(counts)} {name} in {len(hit)} of {len(counts)} examples ({listed})"


def peek_limit(model: Any) -> Optional[int]:
    """The longest input (tokens) of ``model`` read from its config without loading
    weights (``minilm`` and ``hf:`` folders); ``None`` when it cannot be told."""
    import json

    from probe.models.registry import minilm_path

    spec = str(model or "minilm")
    try:
        folder = minilm_path() if spec == "minilm" else Path(spec[3:]).expanduser() if spec.startswith("hf:") else None
        if folder is None:
            return None
        cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):  # no readable config: no early length check
        return None
    for k in ("max_position_embeddings", "n_positions", "max_seq_len"):
        if isinstance(cfg.get(k), int) and cfg[k] > 0:
            return int(cfg[k])
    return None


def _cut_long(corpus, adapter, window, stride, truncate) -> tuple:
    """``(corpus, note)``: over-length examples windowed or truncated, and what was done."""
    from probe.inputs.long_inputs import check_window, default_stride, truncate_corpus, window_corpus

    if window is not None:
        check_window(window, stride, truncate, adapter.max_length)
        stride = stride or default_stride(window)
        cut, split = window_corpus(corpus, adapter, window, stride)
        if not split:
            return cut, f"--window {window} --stride {stride}: no example was longer than {window} tokens"
        return cut, (
            f"{len(split)} example(s) longer than {window} tokens split into {sum(split.values())} "
            f"overlapping windows ({window} tokens, {stride} apart, each with the model's special tokens); "
            "each window is analysed as an example of its own, so statistics average over windows and "
            "a token in an overlap counts once per window"
        )
    if truncate:
        cut, n = truncate_corpus(corpus, adapter)
        return cut, f"--truncate: {n} example(s) cut to the model's first {adapter.max_length} tokens"
    return corpus, ""


def _longest(corpus, adapter) -> int:
    """Tokens of the longest example (special tokens included)."""
    ids = adapter.tokenizer(list(corpus.texts), add_special_tokens=True)["input_ids"]
    return max((len(x) for x in ids), default=1)


#: the share of the memory budget that ``--engine auto`` lets every example's maps take
HELD_MAPS_SHARE = 0.25


def held_maps_bytes(corpus: Any, adapter: Any) -> int:
    """Bytes of every example's captured maps, float32 ``[layers, heads, n, n]`` each (the
    model's default stack), from the token counts alone."""
    ids = adapter.tokenizer(list(corpus.texts), add_special_tokens=True)["input_ids"]
    layers = adapter.n_layers_of(adapter.default_stack)
    return int(sum(len(x) ** 2 for x in ids)) * layers * adapter.n_heads * 4


def choose_engine(engine: str, corpus: Any, adapter: Any, budget: int) -> tuple:
    """``(engine, why)``: ``auto`` becomes ``local`` when every example's maps fit in
    :data:`HELD_MAPS_SHARE` of the memory budget, else ``stream`` (a kept sample's maps
    held, the corpus statistics streamed: peak memory no longer grows with the corpus);
    the numbers equal either way (tests/test_report_engine.py). Another engine is kept
    (``why`` empty)."""
    from probe.inputs.budget import format_size

    if engine != "auto":
        return engine, ""
    held = held_maps_bytes(corpus, adapter)
    limit = int(budget * HELD_MAPS_SHARE)
    chosen = "local" if held <= limit else "stream"
    return chosen, (
        f"--engine auto: {chosen} (the {len(corpus)} examples' maps take {format_size(held)}, "
        f"{'within' if chosen == 'local' else 'over'} a quarter of the memory budget, {format_size(limit)}"
        + ("" if chosen == "local" else "; the statistics streamed, a kept sample's maps held")
        + ")"
    )


def _overrides(max_model_examples, explained_examples=None, null=None, causal=None) -> dict:
    """Section parameters set on the command line (the model-run caps), for the sections
    that declare them (``ReportState.overrides``); the objective is the run's, not a
    parameter (``ctx.objective(use)``)."""
    out: dict = {}
    if explained_examples is not None:  # 0: every example; either way not sized by the claim's power
        out.update(explain_limit=explained_examples or None, sized_by_power=False)
    if max_model_examples is not None:
        out["max_model_examples"] = max_model_examples or None  # 0: the whole corpus
    if null is not None:
        out["null"] = null
    if causal is not None:
        out["causal"] = causal
    return out


def _shown(progress: Any) -> Any:
    """The progress callback: the caller's, or one line per section printed, or none."""
    return progress if callable(progress) else (_print_progress if progress else None)


def _head_count(adapter: Any) -> int:
    from probe.app.registry.analyses._shared import head_count

    return head_count(adapter)


def _model_examples_setting(
    n: int,
    max_model_examples: Optional[int],
    explained_examples: Optional[int] = None,
    causal: Optional[str] = None,
    heads: int = 0,
) -> dict:
    """The settings the registered sections state before any runs (``Analysis.settings``:
    the model-running sections' examples and causal path, the explaining one's examples),
    each given its report parameters with the report's options (:func:`_overrides`) in, for
    ``n`` examples and a model of ``heads`` heads."""
    from .sections import params_with, registered

    overrides = _overrides(max_model_examples, explained_examples, causal=causal)
    out: dict = {}
    for section in registered():
        if section.settings is not None:
            out.update(section.settings(n, heads, params_with(section, overrides)))
    return out


def _is_rnn_zoo(model) -> bool:
    """``zoo:translate-rnn``-like models: a GRU with additive attention (no transformer hooks)."""
    if not str(model).startswith("zoo:"):
        return False
    from probe.models.zoo import load_zoo

    return load_zoo(str(model)[4:]).card.get("family") == "gru-attention"


def _rnn_zoo_maps(model, corpus) -> list:
    """Cross-attention maps of a GRU zoo model, one per example (its own attention function,
    :func:`probe.analyses.paper.alignment.zoo_cross_maps`)."""
    from probe.analyses.paper.alignment import zoo_cross_maps

    return zoo_cross_maps(str(model), corpus.examples)


def _write_from_maps(
    out: Path,
    model: str,
    corpus: Any,
    sections: Optional[Sequence[str]],
    strict: bool,
    force: bool,
    source: str,
    limit: Optional[int],
    t_start: float,
) -> ReportData:
    """The report of a GRU zoo model's cross-attention maps (:func:`_rnn_zoo_maps`), computed
    without a live adapter (sections that need the model are skipped)."""
    maps = _rnn_zoo_maps(model, corpus)
    settings = {
        "model": str(model),
        "input": source,
        "limit": limit,
        "note": "no live transformer: interventions, importance and attributions are not tested",
    }
    from probe.app.registry.context import ReportState

    ctx = open_run(None, corpus, maps=maps, report=ReportState(settings=settings))
    data = analyse(ctx, sections=sections, strict=strict)
    write_report(data, out, force=force)
    data.seconds = time.perf_counter() - t_start
    return data
