"""What a head writes: direct logit attribution, the logit lens, OV/QK token circuits and the claim that a head writes the answer (Elhage et al. 2021; nostalgebraist 2020)."""
