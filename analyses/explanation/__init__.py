"""Is attention an explanation: attributions, agreement, permutations, ground truth (Jain & Wallace 2019)."""
