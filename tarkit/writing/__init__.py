"""writing: making shards.

:class:`~tarkit.writing.shard_writer.ShardWriter`, :func:`~tarkit.shard_dataset` (on this
machine or on an engine), ``tarcreate``'s and ``tarkit shard``'s directory walker and
CSV/TSV plans, the shard indexes and records written beside the shards, the checks of a resumed
run, and ``tarkit verify``. Shards are published through ``storage/``'s atomic publish and
commit; nothing here reads shards for training (``loading/``) or maps them
(``processing/``).
"""
