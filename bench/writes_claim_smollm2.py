"""The 'writes the answer' claim on SmolLM2 and on its re-initialised copy (EWT dev, first N sentences).

    python bench/writes_claim_smollm2.py N [model|null|both]

``model``: SmolLM2 against its re-initialised null (seed 0), with the causal check of the held
heads and the five largest writers; ``null``: the re-initialised copy (seed 0) against another
seed's null (seed 1); ``both`` (the default) one after the other. The two parts are
independent and can run as two processes.
"""

import logging
import sys
import time

import probe
from probe.analyses.claims.null_model import null_adapter
from probe.analyses.writes.claim import writes_answer_claims
from probe.inputs.readers import read_conllu

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
part = sys.argv[2] if len(sys.argv) > 2 else "both"
sents = read_conllu("/work/shared/data/ud-english-ewt/en_ewt-ud-dev.conllu", limit=4 * n)
texts = [s.text for s in sents if len(s.text.split()) >= 5][:n]  # a sentence of 1-4 words has few next tokens
a = probe.load_model("smollm2")
if part in ("model", "both"):
    t0 = time.time()
    c = writes_answer_claims(a, texts, n_boot=1000, check=5)
    t = c.table
    print(
        f"SmolLM2: {len(texts)} EWT dev sentences, null: {c.null_source}; {len(c.held())} of {len(t)} heads hold "
        f"({time.time() - t0:.0f}s)"
    )
    print(t.sort_values("effect", ascending=False).head(10).round(4).to_string())
    print("held:", " ".join(f"L{l}H{h}" for l, h in c.held()))
    comp = t[t["compensated"] == True]  # noqa: E712  (None where not checked)
    print(
        "compensated (mean-ablation drop under half the DLA):",
        " ".join(f"L{l}H{h}" for l, h in zip(comp["layer"], comp["head"])) or "none",
    )
    print(t[t["ablation_drop"].notna()].round(4).to_string())
if part in ("null", "both"):
    null = null_adapter(a, 0)
    t0 = time.time()
    c2 = writes_answer_claims(null, texts, null=null_adapter(a, 1), n_boot=1000, check=0)
    print(
        f"re-initialised SmolLM2 (seed 0) against seed 1's null: {len(c2.held())} of {len(c2.table)} heads hold "
        f"({time.time() - t0:.0f}s)"
    )
    print(c2.table.sort_values("effect", ascending=False).head(5).round(4).to_string())
