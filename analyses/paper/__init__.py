"""The Transformer paper measured: complexity (Vaswani et al. 2017, Table 1), appendix heads, alignment."""
