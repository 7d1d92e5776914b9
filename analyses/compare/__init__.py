"""Heads across checkpoints of one architecture on the same inputs: what changed, and when.

* :mod:`.divergence` — how far a head's pattern moved: the Jensen–Shannon divergence of
  its attention rows on the same inputs (Lin 1991), per example.
* :mod:`.changes` — the change of every per-head measure between two checkpoints with a
  paired bootstrap interval by example (Efron 1979), a paired signed-rank test (Wilcoxon
  1945) and Benjamini–Hochberg FDR across heads (1995).
* :mod:`.measure` — one checkpoint's per-example measurements on a corpus: role scores and
  detectors (:mod:`probe.analyses.patterns.role_features`), necessity (ablation),
  the maps, and the in-context-learning score of a causal LM.
* :mod:`.dynamics` — a training run's scores against the step, and where they change
  (the induction-head phase change, Olsson et al. 2022).
* :mod:`.attribution` — fine-tune attribution: each head's output patched from one
  checkpoint into the other, the objective measured (activation patching, Meng et al. 2022).
"""
