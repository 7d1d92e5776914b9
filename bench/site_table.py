"""The site × family table: every site of ``probe.trace`` checked by an identity on each
family's own forward, or refused with its reason.

Each family is a tiny random model built from its default config (the coverage sweep's
shrink: hidden 32, 2 layers, 4 heads, 2 key/value heads; no download), as a causal LM
where it has one, in float32. The identities (max |Δ| ≤ 1e-5 each, over every layer)::

    q, k          scores = q_h · k_{kv(h)} · scaling (soft-capped where the model caps), unmasked entries
    attn_scores   softmax(scores) = pattern
    pattern, v    z_h = pattern_h @ v_h
    z, proj_in    output projection(z) = the projection's own output
    result        Σ_h result_h + bias = the projection's own output
    attn_out, resid_mid, mlp_out, resid_post
                  sequential: resid_mid = resid_pre + attn_out, resid_post = resid_mid + mlp_out;
                  parallel: resid_post = resid_pre + attn_out + mlp_out;
                  post-norm (BERT, BART): resid_post = LN₂(mlp_out + LN₁(attn_out + resid_pre))
    mlp_in        the pre-MLP norm of resid_mid (of resid_pre in a parallel block) = mlp_in
    router        mlp_in @ router weightᵀ = router logits
    embed, pos_embed   resid_pre of layer 0 = embed (+ pos_embed)  (BERT, BART: their LayerNorm of the sum)
    ln_final      final norm(last resid_post) = ln_final; logits: unembedding(ln_final) = the logits
    edit          zeroing head 1's hook_result in layer 1 = zeroing its output-projection columns
    generate      each generated step's pattern (KV cache) = that row of one forward over the sequence
    padding       left-padded batch of 3 lengths: each text's patterns and logits = its own forward

Run ``python bench/site_table.py`` (prints the table), ``--write docs/sites.md`` to write
the docs page, ``--types llama,gpt2`` for a few.
"""

from __future__ import annotations

import argparse
import copy
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))

DECODERS = [
    "gpt2",
    "gpt_bigcode",
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "mixtral",
    "qwen2_moe",
    "qwen3_moe",
    "gemma",
    "gemma2",
    "gemma3_text",
    "olmo",
    "olmo2",
    "exaone4",
    "glm",
    "glm4",
    "phi",
    "phi3",
    "gpt_neox",
    "gptj",
    "codegen",
    "starcoder2",
    "stablelm",
    "persimmon",
    "helium",
    "smollm3",
    "ernie4_5",
    "arcee",
    "apertus",
    "opt",
]
OTHERS = ["bert", "t5", "bart"]
COLUMNS = [
    "embed",
    "pos_embed",
    "q",
    "k",
    "attn_scores",
    "pattern",
    "v",
    "z",
    "result",
    "attn_out",
    "resid_mid",
    "mlp_in",
    "mlp_out",
    "router",
    "resid_post",
    "ln_final",
    "logits",
    "edit",
    "generate",
    "padding",
]
TOL = 1e-5
TEXTS = ["The cat sat on the mat today.", "A dog barked.", "Birds sing in the tall green trees at dawn."]


def build(model_type: str, tokenizer):
    import transformers as T
    from coverage_sweep import model_class, tiny_config

    from probe.models import ModelAdapter
    from probe.models.architectures import family_for

    cfg = tiny_config(model_type, len(tokenizer))
    torch.manual_seed(0)
    if model_type in DECODERS:
        model = T.AutoModelForCausalLM.from_config(cfg)
    else:  # the base model (BERT, T5, BART: the identities are on their encoder stack)
        model = model_class(model_type)(cfg)
    with torch.no_grad():  # non-trivial norms, so that a site on the wrong side of one shows
        for name, p in model.named_parameters():
            if "norm" in name.lower() and p.dim() == 1 and "bias" not in name:
                p.uniform_(0.5, 1.5)
    return ModelAdapter(name=model_type, model=model.eval(), tokenizer=tokenizer, family=family_for(model_type))


def _err(a, b) -> float:
    return float((a.float() - b.float()).abs().max())


def check(adapter) -> dict:
    """column -> ``exact`` | ``Δ <value>`` | ``refused: <reason>`` | ``—: <why not checked>``."""
    from probe.tracing.edits import Zero
    from probe.models.block_parts import layout_of
    from probe.models.sites import SITE_KINDS, Site, kv_head_of, layer_modules
    from probe.tracing.site_keys import available_sites, ModuleSite, refusal
    from probe.tracing.trace import trace

    model_type = adapter.config.model_type
    have = set(available_sites(adapter))
    cells: dict = {}
    refused = {}
    for col in COLUMNS:
        if col in SITE_KINDS:
            site = Site(col, -1 if SITE_KINDS[col].module == "model" else 0, adapter.default_stack)
            if site.name(adapter.default_stack) not in have:
                refused[col] = "refused: " + (refusal(adapter, site) or "?").split(": ", 1)[-1]
    proj = adapter.head_output_modules()
    cache = trace(
        adapter, TEXTS[:2], read=sorted(have) + [ModuleSite(m, "output", f"proj.{i}") for i, m in enumerate(proj)]
    )
    L = adapter.n_layers
    layout = layout_of(adapter)
    blocks = layer_modules(adapter)
    errs: dict = {c: 0.0 for c in COLUMNS}
    mark: dict = {}

    def worst(col, value):
        errs[col] = max(errs[col], value)

    def get(kind, layer):
        return cache[f"blocks.{layer}.{kind}"]

    for layer in range(L):
        c = lambda k: f"blocks.{layer}.{k}"  # noqa: E731
        if c("attn.hook_attn_scores") in cache:
            scores, pattern = get("attn.hook_attn_scores", layer), get("attn.hook_pattern", layer)
            worst("attn_scores", _err(torch.softmax(scores.float(), -1), pattern))
            rot = "rot_" if c("attn.hook_rot_q") in cache else ""  # scores come from q and k after rotary
            if c(f"attn.hook_{rot}q") in cache:
                q, k = get(f"attn.hook_{rot}q", layer), get(f"attn.hook_{rot}k", layer)
                module = adapter.attention_modules()[layer]
                scale = getattr(module, "scaling", None) or q.shape[-1] ** -0.5
                if model_type == "opt":  # OPT scales its queries before the attention function (scaling=1.0 there)
                    scale = 1.0
                cap = getattr(module, "attn_logit_softcapping", None) or getattr(
                    adapter.config, "attn_logit_softcapping", None
                )
                if model_type == "t5":
                    mark["q"] = mark["k"] = "—: T5 adds a position bias to q·k"
                for h in range(q.shape[2]):
                    raw = torch.einsum("bqd,bkd->bqk", q[:, :, h], k[:, :, kv_head_of(adapter, h, k.shape[2])]) * scale
                    if cap:
                        raw = torch.tanh(raw / cap) * cap
                    live = scores[:, h] > -1e4
                    e = _err(raw[live], scores[:, h][live])
                    worst("q", e)
                    worst("k", e)
        if c("attn.hook_pattern") in cache and c("attn.hook_v") in cache and c("attn.hook_z") in cache:
            z = torch.einsum("bhqk,bkhd->bqhd", get("attn.hook_pattern", layer), get("attn.hook_v", layer))
            e = _err(z, get("attn.hook_z", layer))
            worst("pattern", e)
            worst("v", e)
        if c("attn.hook_z") in cache:
            zz = get("attn.hook_z", layer)
            with torch.no_grad():
                worst("z", _err(proj[layer](zz.flatten(2)), cache[f"proj.{layer}"]))
        if c("attn.hook_result") in cache:
            bias = getattr(proj[layer], "bias", None)
            s = get("attn.hook_result", layer).sum(2) + (bias if bias is not None else 0)
            worst("result", _err(s, cache[f"proj.{layer}"]))
        if layout is None or c("hook_attn_out") not in cache:
            continue
        pre, attn, mlp, post = (
            get(k, layer) for k in ("hook_resid_pre", "hook_attn_out", "hook_mlp_out", "hook_resid_post")
        )
        blk = blocks[layer]
        with torch.no_grad():
            if layout.sequential:
                mid = get("hook_resid_mid", layer)
                worst("attn_out", _err(mid, pre + attn))
                worst("resid_mid", _err(mid, pre + attn))
                worst("mlp_out", _err(post, mid + mlp))
                worst("resid_post", _err(post, mid + mlp))
                norm_in = mid
            elif layout.parallel:
                e = _err(post, pre + attn + mlp)
                for col in ("attn_out", "mlp_out", "resid_post"):
                    worst(col, e)
                norm_in = pre
            else:  # post-norm (BERT, BART)
                first_norm, second_norm = (blk.get_submodule(p) for p in layout.post_norms)
                mid = first_norm(attn + pre)
                e = _err(post, second_norm(mlp + mid))
                for col in ("attn_out", "mlp_out", "resid_post"):
                    worst(col, e)
                norm_in = mid
            if layout.mlp_norm is not None:
                worst("mlp_in", _err(blk.get_submodule(layout.mlp_norm)(norm_in), get("hook_mlp_in", layer)))
            else:
                worst("mlp_in", _err(norm_in, get("hook_mlp_in", layer)))
            if c("mlp.hook_router_logits") in cache:
                gate = blk.get_submodule(layout.parts["router"][0])
                worst("router", _err(get("hook_mlp_in", layer) @ gate.weight.T, get("mlp.hook_router_logits", layer)))
    with torch.no_grad():
        if "hook_embed" in cache:
            first = cache["hook_embed"] + (cache["hook_pos_embed"] if "hook_pos_embed" in cache else 0)
            if model_type == "bert":
                emb = adapter.model.embeddings
                first = emb.LayerNorm(first + emb.token_type_embeddings(torch.zeros_like(cache.inputs["input_ids"])))
            elif model_type == "bart":  # BART normalises the sum
                first = adapter.model.encoder.layernorm_embedding(first)
            e = _err(first, cache["blocks.0.hook_resid_pre"])
            worst("embed", e)
            worst("pos_embed", e)
        if "ln_final.hook_normalized" in cache:
            from probe.models.block_parts import model_part

            last = get("hook_resid_post", L - 1)
            worst("ln_final", _err(model_part(adapter, "ln_final")(last), cache["ln_final.hook_normalized"]))
            head = adapter.model.get_output_embeddings()
            logits = getattr(cache.output, "logits", None)
            if head is not None and logits is not None:
                mine = head(cache["ln_final.hook_normalized"])
                cap = getattr(adapter.config, "final_logit_softcapping", None)
                if cap:  # Gemma 2: the model's head soft-caps its logits
                    mine = torch.tanh(mine / cap) * cap
                worst("logits", _err(mine, logits))
            else:
                mark["logits"] = "—: no language-model head"
        else:
            mark["logits"] = "—: no final norm site"
    # an edit equals weight surgery
    if "blocks.1.attn.hook_result" in have:
        out = trace(adapter, TEXTS[:2], edit={"blocks.1.attn.hook_result": Zero(head=1)}).output
        twin = copy.deepcopy(adapter.model)
        p = twin.get_submodule(next(n for n, m in adapter.model.named_modules() if m is proj[1]))
        d = adapter.head_dim
        with torch.no_grad():
            if type(p).__name__ == "Conv1D":
                p.weight[d : 2 * d, :] = 0
            else:
                p.weight[:, d : 2 * d] = 0
            want = twin(**cache.inputs)
        errs["edit"] = _err(_main(out), _main(want))
    else:
        mark["edit"] = "—: no hook_result"
    errs.update(_generation(adapter, mark) or {})
    errs.update(_padding(adapter, mark) or {})
    for col in COLUMNS:
        if col in refused:
            cells[col] = refused[col]
        elif col in mark:
            cells[col] = mark[col]
        else:
            cells[col] = "exact" if errs[col] <= TOL else f"Δ {errs[col]:.1e}"
    return cells


def _main(out):
    for key in ("logits", "last_hidden_state"):
        v = getattr(out, key, None)
        if v is not None:
            return v
    return out[0]


def _generation(adapter, mark) -> dict:
    from probe.tracing.trace import trace
    from probe.tracing.generate import trace_generate

    if adapter.arch != "decoder" or adapter.model.get_output_embeddings() is None:
        mark["generate"] = "—: not a causal LM"
        return {}
    name = f"blocks.{adapter.n_layers - 1}.attn.hook_pattern"
    cache = trace_generate(adapter, TEXTS[:1], 3, read=[name], min_new_tokens=3)
    ids = cache.output
    full = trace(adapter, {"input_ids": ids[:, :-1]}, read=[name])[name]
    n = cache.inputs["input_ids"].shape[1]
    steps = cache.calls(name)
    e = _err(steps[0], full[:, :, :n, :n])
    for i, step in enumerate(steps[1:], start=1):
        e = max(e, _err(step, full[:, :, n + i - 1 : n + i, : n + i]))
    with torch.no_grad():
        own = adapter.model.generate(
            **adapter.inputs_of(TEXTS[:1]), max_new_tokens=3, min_new_tokens=3, do_sample=False, pad_token_id=0
        )
    if not torch.equal(own, ids):
        e = float("inf")
    return {"generate": e}


def _padding(adapter, mark) -> dict:
    from probe.inputs.padding import padded_inputs
    from probe.tracing.trace import trace

    if adapter.arch == "encoder-decoder":
        mark["padding"] = "—: encoder-decoder (not checked here)"
        return {}
    batch = padded_inputs(adapter, TEXTS, side="left")
    cache = trace(adapter, batch, read="pattern")
    e = 0.0
    for i, text in enumerate(TEXTS):
        alone = trace(adapter, [text], read="pattern")
        keep = batch["attention_mask"][i].bool()
        for name in alone:
            e = max(e, _err(cache[name][i][:, keep][:, :, keep], alone[name][0]))
        e = max(e, _err(_main(cache.output)[i][keep], _main(alone.output)[0]))
    return {"padding": e}


def markdown(rows: dict) -> str:
    short = {c: c.replace("_", "\\_") for c in COLUMNS}
    lines = [
        "| family | " + " | ".join(short[c] for c in COLUMNS) + " |",
        "|---|" + "---|" * len(COLUMNS),
    ]
    reasons: dict = {}
    for t, cells in rows.items():
        if "error" in cells:
            lines.append(f"| {t} | " + " | ".join(["error"] * len(COLUMNS)) + " |")
            reasons.setdefault(cells["error"], []).append(t)
            continue
        out = []
        for c in COLUMNS:
            v = cells[c]
            if v == "exact":
                out.append("✓")
            elif v.startswith(("refused", "—")):
                key = v
                reasons.setdefault(key, [])
                if t not in reasons[key]:
                    reasons[key].append(t)
                out.append(("✗" if v.startswith("refused") else "—") + f"{list(reasons).index(key) + 1}")
            else:
                out.append(v)
        lines.append(f"| {t} | " + " | ".join(out) + " |")
    lines += ["", "| note | reason | families |", "|---|---|---|"]
    for i, (reason, types) in enumerate(reasons.items(), start=1):
        text = reason.replace("|", "\\|")
        lines.append(f"| {i} | {text} | {', '.join(types)} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    warnings.filterwarnings("ignore")
    import transformers

    transformers.logging.set_verbosity_error()
    from coverage_sweep import _tokenizer

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--types", default=",".join(DECODERS + OTHERS))
    ap.add_argument("--debug", action="store_true", help="raise instead of writing an error row")
    ap.add_argument("--write", default=None, help="write the docs page here (e.g. docs/sites.md)")
    args = ap.parse_args(argv)
    tok = _tokenizer()
    rows: dict = {}
    for t in args.types.split(","):
        try:
            rows[t] = check(build(t, tok))
        except Exception as e:  # a row, not a crash: the table says what went wrong
            if args.debug:
                raise
            rows[t] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
        print(t, rows[t] if "error" in rows[t] else sum(v == "exact" for v in rows[t].values()), file=sys.stderr)
    table = markdown(rows)
    print(table)
    if args.write:
        page = Path(args.write)
        head = page.read_text().split("<!-- table -->")[0] if page.exists() else ""
        page.write_text(head + "<!-- table -->\n\n" + table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
