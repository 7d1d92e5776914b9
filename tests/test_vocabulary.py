"""One vocabulary: ``probe roles`` and the pattern claim describe a head the same way."""

from __future__ import annotations


def test_roles_and_pattern_claim_name_heads_alike(minilm):
    from probe.analyses.claims.pattern import pattern_claims
    from probe.analyses.patterns.roles import ROLES, head_roles
    from probe.app.report.bundled import sample_corpus
    from probe.runs.capture import capture

    corpus = sample_corpus(limit=12)
    maps = capture(minilm, list(corpus.texts), word_spans=list(corpus.word_spans))
    roles = head_roles(maps)
    claims, _ = pattern_claims(maps)
    assert "mixed/unclear" not in set(roles["role"]) and "mixed/unclear" not in ROLES
    named = profiled = 0
    for r in roles.itertuples():
        c = claims[(int(r.layer), int(r.head))]
        assert c.status in ("holds", "does not hold")
        if c.holds:  # a rule cleared: the same role name, no "attends to [CLS]" beside "special-token"
            assert str(r.role) == c.statement, (r.layer, r.head)
            named += 1
        else:  # no rule: the same two largest components
            assert str(r.role) == f"attends {c.statement}", (r.layer, r.head)
            profiled += 1
    assert named and profiled  # both kinds occur on MiniLM
    specials = {(int(r.layer), int(r.head)) for r in roles.itertuples() if r.role == "special-token"}
    assert specials and all(claims[k].statement == "special-token" for k in specials)


def test_choose_rule_largest_margin_and_chance():
    from probe.analyses.patterns.vocabulary import choose_rule, nearest_rule

    t = {"positional": 0.9, "special": 0.5, "punctuation": 0.5}
    # both clear: previous-token's margin (0.95−0.9)/0.1 = 0.5 beats special-token's (0.6−0.5)/0.5 = 0.2
    assert choose_rule({"argmax_prev": 0.95, "to_special": 0.6}, t)[0] == "previous-token"
    assert choose_rule({"argmax_prev": 0.91, "to_special": 0.9}, t)[0] == "special-token"
    # punctuation must be twice what a random head gets: a corpus that is 40% punctuation needs 80%
    assert choose_rule({"to_punct": 0.7, "punct_chance": 0.4}, t) is None
    assert nearest_rule({"to_punct": 0.7, "punct_chance": 0.4}, t)[2] == 0.8
    assert choose_rule({"to_punct": 0.7, "punct_chance": 0.1}, t)[0] == "punctuation"
    assert choose_rule({"max_attention": 0.08}, t, broad_max_attention=0.1)[0] == "broad"
