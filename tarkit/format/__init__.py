"""What a shard is, with no I/O: the strict tar reader (``tar.py``) and writer
(``tar_writer.py``), samples, field encodings, compression, the manifest (versions 1 and 2,
held as a ``ShardTable``) and the shard index. Nothing here opens a file or a URL: callers
hand in streams and buffers."""
