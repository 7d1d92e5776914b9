"""The bundled sample corpus of ``probe report``: 24 sentences written for the project
with hand-made Universal Dependencies annotation (``sample/sample.conllu``), the first
two being the sentences of the attention figures of Vaswani et al. (2017), appendix."""

from __future__ import annotations

from typing import Any

from pathlib import Path
from typing import Optional

from probe.errors import InputError

SAMPLE_CONLLU = Path(__file__).with_name("sample") / "sample.conllu"


def sample_corpus(limit: Optional[int] = None) -> Any:
    """The bundled sample as a :class:`probe.inputs.corpus.Corpus` (with treebank words); its
    ``source`` is the file's path, so analyses that re-read the treebank find it.

    Raises:
        ValueError: a non-positive ``limit``; the sample missing from the installation.
    """
    from probe.inputs.corpus import load_corpus

    if not SAMPLE_CONLLU.exists():
        raise InputError(f"the bundled sample {SAMPLE_CONLLU} is missing: reinstall attention-probe")
    return load_corpus(conllu=str(SAMPLE_CONLLU), limit=limit)
