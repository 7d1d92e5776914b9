"""Head-level interventions built on the trace: head gates and ablation sweeps, path
patching's sites and mixers, and attention reweighting."""
