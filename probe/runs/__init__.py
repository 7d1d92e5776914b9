"""Captures over a corpus: attention, values and gradients per example, blocks of a corpus
and where they run, layer-by-layer streaming, and the capture-to-store pipeline."""
