"""Does a head follow structure: dependency relations, trees, coreference and probes (Clark et al. 2019)."""
