"""One vocabulary: ``probe roles`` and the pattern claim describe a head the same way."""

from __future__ import annotations


def test_roles_and_pattern_claim_name_heads_alike(minilm):
    from probe.analyses.claims.pattern import pattern_claims
    from probe.analyses.patterns.roles import ROLES, head_roles
    from probe.app.report.bundled import sample_corpus
    from probe.capture import capture

    corpus = sample_corpus(limit=12)
    maps = capture(minilm, list(corpus.texts), word_spans=list(corpus.word_spans))
    roles = head_roles(maps)
    claims, _ = pattern_claims(maps)
    assert "mixed/unclear" not in set(roles["role"]) and "mixed/unclear" not in ROLES
    same = 0
    for r in roles.itertuples():
        c = claims[(int(r.layer), int(r.head))]
        if str(r.role).startswith("attends ") and c.status == "does not hold":
            same += str(r.role) == f"attends {c.statement}"
    unlabelled = [r for r in roles["role"] if str(r).startswith("attends ")]
    assert unlabelled and same == len(unlabelled)  # rule-cleared heads: role names (special-token ...)
