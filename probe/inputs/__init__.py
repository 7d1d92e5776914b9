"""What a run reads: corpora from text or files, CoNLL-U treebanks, long inputs cut into
windows, padded batches, and the memory budget that sizes them."""
