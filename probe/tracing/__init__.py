"""Read and edit any site of a live model: the trace (one place that hooks it), its edits,
its cache, generation, and the attention-interface and layer-call plumbing under them."""
