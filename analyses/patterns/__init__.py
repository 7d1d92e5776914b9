"""What a head attends to: per-head features, roles and behavioural clusters (Clark et al. 2019; Voita et al. 2019)."""
