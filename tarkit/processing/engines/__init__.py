"""Where the shard tasks of :func:`tarkit.map_shards` run: local processes or a Ray cluster.

Both engines implement :class:`~tarkit.processing.engines.base.Engine`, driven by
:mod:`tarkit.processing.driver`: ``room()`` (how many more tasks may be submitted now),
``submit(task)``, ``wait(timeout)`` (the tasks that ended: each with its ``ShardResult``,
or a string saying how its worker died), ``running()``, ``samples_read()`` (input samples
read so far by the tasks still running, for the progress display) and ``close(cancel)``.

- :mod:`.local`: :class:`LocalEngine`, worker processes of this machine, started with
  ``forkserver`` (``spawn`` where there is none), one task at a time each. A worker that
  dies (killed, out of memory) costs only its own task, which is reported; the worker is
  replaced.
- :mod:`.ray`: :class:`RayEngine`, one Ray task per shard (``num_cpus`` each), on the
  cluster at ``address`` or ``RAY_ADDRESS``, else a local Ray started for the job. Ray's
  own task retries are off: the driver retries, the same way for both engines.

A new engine is one module here with a class that has those six methods.
"""
