"""Per-head claims, each with its evidence, effect size, uncertainty, count and null.

One module per kind of claim (:mod:`.pattern`, :mod:`.structure`, :mod:`.necessity`,
:mod:`.redundancy`, :mod:`.attribution`); the thresholds and tests they use are named,
with their sources, in :mod:`.thresholds`; :mod:`.statistics` holds the tests
(Benjamini–Hochberg, bootstrap, Wilcoxon); :mod:`.heads` assembles them per head.
"""
