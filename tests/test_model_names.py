"""A model found the way a user names it (models/model_names.py): a directory without ``hf:``,
a ``.gguf`` file without ``gguf:``, a hub id already in the local Hugging Face cache; an
unknown name answered with the closest known names."""

from __future__ import annotations

import shutil

import pytest
import torch

from probe.errors import InputError
from probe.models import load_model
from probe.models.registry import minilm_path


def _same_weights(a, b) -> bool:
    sa, sb = a.model.state_dict(), b.model.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_a_directory_loads_as_hf_does(tmp_path, monkeypatch):
    folder = tmp_path / "my model"
    shutil.copytree(minilm_path(), folder)
    bare, prefixed = load_model(str(folder)), load_model(f"hf:{folder}")
    assert bare.name == prefixed.name == f"hf:{folder}"
    assert _same_weights(bare, prefixed)
    monkeypatch.chdir(tmp_path)  # relative, as typed in a shell
    assert _same_weights(load_model("my model"), prefixed)


def _fake_hub_cache(root, repo_id: str, source) -> None:
    """A Hugging Face hub cache holding ``repo_id`` at one snapshot (the layout huggingface_hub reads)."""
    repo = root / f"models--{repo_id.replace('/', '--')}"
    snap = repo / "snapshots" / ("0" * 40)
    shutil.copytree(source, snap)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)


def test_a_hub_id_in_the_local_cache_loads_as_hf_does(tmp_path, monkeypatch):
    import huggingface_hub.constants as hub

    _fake_hub_cache(tmp_path, "someone/mini", minilm_path())
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path))
    bare = load_model("someone/mini")
    assert bare.name == "hf:someone/mini" and bare.n_layers == 6
    assert _same_weights(bare, load_model("minilm"))
    with pytest.raises(InputError, match=r"unknown model 'someone/other' \(not a local directory, and not in the"):
        load_model("someone/other")


@pytest.mark.parametrize(
    "typed, meant",
    [
        ("smollm", "smollm2"),
        ("minilm2", "minilm"),
        ("MiniLM", "minilm"),
        ("hff:x/y", "hf:x/y"),
        ("zoo-induction", "zoo:induction"),
    ],
)
def test_an_unknown_name_says_did_you_mean_the_closest(typed, meant):
    with pytest.raises(InputError) as err:
        load_model(typed)
    message = str(err.value)
    assert message.startswith(f"unknown model {typed!r}") and f"did you mean {meant}" in message, message
    assert "\n" not in message and "smollm2" in message and "gguf:<…>" in message


def test_a_name_like_nothing_lists_what_is_known():
    with pytest.raises(InputError, match=r"^unknown model 'qqqqqq' \(known: minilm, smollm2,") as err:
        load_model("qqqqqq")
    assert "did you mean" not in str(err.value)


def test_compare_refuses_an_unknown_bare_name_before_loading():
    from probe.models.checkpoints import resolve_checkpoints

    with pytest.raises(InputError, match="did you mean smollm2"):
        resolve_checkpoints(["minilm", "smolm2"])
    assert [c.spec for c in resolve_checkpoints(["minilm", "smollm2", "zoo:induction"])] == [
        "minilm",
        "smollm2",
        "zoo:induction",
    ]
