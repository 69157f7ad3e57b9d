"""processing: running work over samples and shards.

``tarproc``'s per-sample command contract and the supervisor that runs the commands;
:func:`~tarkit.map_shards`' shard tasks, mappers, records and driver; and
``dataset_stats``. Where the tasks run is ``engines/``'s business and how shards are
written ``writing/``'s; nothing here imports torch.
"""
