"""Does the model need a head: ablation, importance, pruning, patching and groups (Michel et al. 2019)."""
