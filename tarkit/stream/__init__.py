"""stream: what the shell tools compose over one stream of samples.

Reading many inputs, combining them (in order, round robin, mixed by weight), filtering,
slicing, shuffling, sorting, picking by key or position, previews, TSV, summaries, and
writing one archive: every stage takes an iterator of samples and returns one. Nothing
here parses a location (``storage/`` does), cuts shards (``writing/``) or imports torch.
"""
