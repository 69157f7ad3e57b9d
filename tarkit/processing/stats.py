"""The summary of a dataset (``tarkit stats``): from its manifest alone, or by reading its
shards, one after another or in worker processes.

Which shards a source names is resolved as :class:`~tarkit.ShardDataset` resolves them
(:func:`~tarkit.storage.resolve_shards`: shards, brace patterns, a manifest, a directory
with its ``manifest.json`` or its shards). Class names come from ``classes.json`` beside
the shards, else beside the manifest (:mod:`tarkit.format.classes`), or from the file
named. What is counted, and how: :mod:`tarkit.stream.summary`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..errors import TarkitError, UsageError
from ..format.classes import CLASSES_FILE, ClassNames
from ..format.samples import SkipLog
from ..sizes import check_parallel
from ..storage import StorageOptions, location, resolve_shards
from ..storage.classes import load_class_names
from ..stream.summary import DatasetStats, Tally, tally_shard

_TICK = 0.5  # seconds between looks at the workers


def dataset_stats(
    sources: Sequence[str],
    *,
    read: bool = True,
    workers: int = 1,
    classes: str | None = None,
    strict: bool = False,
    skips: SkipLog | None = None,
    storage_options: StorageOptions | None = None,
    on_shard: Callable[[Tally], object] | None = None,
) -> DatasetStats:
    """The :class:`~tarkit.stream.summary.DatasetStats` of the shards ``sources`` name (none,
    or ``-``: the one stream on stdin).

    With ``read``, every shard is read whole (``workers`` at a time, in worker processes
    when more than one), under the strict reader (``strict``: members without a field are
    errors, else counted in ``skips``); ``on_shard`` is called with each shard's tally as
    it is counted, in shard order. Without ``read``, only the manifest's figures: no shard
    is read. ``classes`` names the ``classes.json`` to use (default: the one beside the
    shards or the manifest, if any).

    Raises :class:`~tarkit.errors.TarkitError` for a source or shard that does not read
    cleanly, and :class:`~tarkit.errors.UsageError` without ``read`` when no manifest
    lists the shards.
    """
    check_parallel(workers)
    if not sources or list(sources) == ["-"]:
        if not read:
            raise UsageError("--no-read needs a manifest, and stdin has none")
        tally = tally_shard("-", strict=strict, skips=skips)
        if on_shard is not None:
            on_shard(tally)
        return tally.summary(_class_names(classes, [], storage_options))
    source: str | list[str] = sources[0] if len(sources) == 1 else list(sources)
    urls, infos = resolve_shards(source, None, storage_options, missing_ok=not read)
    if not read:  # no class histogram: no class names either
        if infos is None:
            raise UsageError(
                f"{urls[0]}: no manifest lists these shards, so their samples are known only "
                "by reading them (leave out --no-read, or name their manifest)"
            )
        return Tally.of_manifest(infos).summary()
    names = dataset_class_names(source, urls, classes, storage_options)
    tasks = [_ShardStats(i, url, strict, storage_options) for i, url in enumerate(urls)]
    tally = Tally()
    for part in _tallies(tasks, min(workers, len(tasks)), skips):
        if on_shard is not None:
            on_shard(part)
        tally.merge(part)
    return tally.summary(names)


def dataset_class_names(
    source: str | Sequence[str],
    urls: Sequence[str],
    classes: str | None = None,
    storage_options: StorageOptions | None = None,
) -> ClassNames | None:
    """The class names of the dataset ``source`` names, whose shards are ``urls``: those
    of the file ``classes`` names (which must exist), else of ``classes.json`` beside the
    shards (when they share one place), else beside the manifest ``source`` names; None
    when there is none. Raises :class:`~tarkit.errors.InputError` for a file that is not
    a list of names."""
    places = [location(url).sibling(CLASSES_FILE) for url in urls if _has_siblings(url)]
    beside = [places[0]] if places and len(set(places)) == 1 else []
    if isinstance(source, str) and source.endswith(".json"):
        beside.append(location(source).sibling(CLASSES_FILE))
    return _class_names(classes, beside, storage_options)


def _has_siblings(url: str) -> bool:
    """Whether a file beside ``url`` can be looked for: a path or URL, not a command."""
    where = location(url)
    return where.is_file or where.remote


def _class_names(
    named: str | None, beside: list[str], storage_options: StorageOptions | None
) -> ClassNames | None:
    """The class names of the file ``named`` (which must exist), else of the first of
    ``beside`` that exists; None when there is none."""
    if named is not None:
        return load_class_names(named, storage_options, required=True)
    for place in beside:
        names = load_class_names(place, storage_options)
        if names is not None:
            return names
    return None


@dataclass(frozen=True)
class _ShardStats:
    """An engine task: the tally of one shard (:class:`~tarkit.engines.base.Task`)."""

    index: int
    shard: str
    strict: bool
    storage_options: StorageOptions | None = None
    attempt: int = 1

    def run(self, shared: Any, inputs: Sequence[bytes], tell: object) -> tuple[_Counted, None]:
        skips = SkipLog()
        try:
            tally = tally_shard(self.shard, strict=self.strict, skips=skips,
                                storage_options=self.storage_options)  # fmt: skip
        except TarkitError as exc:
            return _Counted(None, exc, skips), None
        return _Counted(tally, None, skips), None

    def retried(self) -> _ShardStats:
        return replace(self, attempt=self.attempt + 1)

    def abandon(self) -> None:
        pass  # it writes nothing


@dataclass
class _Counted:
    """What a task sends back: the shard's tally, or the error that stopped it, and the
    members it skipped."""

    tally: Tally | None
    error: TarkitError | None
    skips: SkipLog


def _tallies(tasks: list[_ShardStats], workers: int, skips: SkipLog | None) -> Iterator[Tally]:
    """The tally of each task's shard, in shard order: here one after another, or
    ``workers`` at a time in worker processes."""
    if workers <= 1:
        for task in tasks:
            yield tally_shard(task.shard, strict=task.strict, skips=skips,
                              storage_options=task.storage_options)  # fmt: skip
        return
    from ..engines.local import LocalEngine  # here: the shell tools start faster without it
    from ..engines.running import DONE, TaskRunner

    runner = TaskRunner(LocalEngine(None, workers), 0, _judge)
    for task in tasks:
        runner.add(task)
    done: dict[int, Tally] = {}
    following = 0
    finished = False
    try:
        while runner.busy():
            for outcome in runner.poll(_TICK):
                counted: _Counted | None = outcome.result
                if counted is not None and skips is not None:
                    skips.merge(counted.skips)
                if outcome.event != DONE:
                    if counted is not None and counted.error is not None:
                        raise counted.error
                    raise TarkitError(f"{outcome.task.shard}: {outcome.reason}")
                assert counted is not None and counted.tally is not None
                done[outcome.task.index] = counted.tally
            while following in done:
                yield done.pop(following)
                following += 1
        finished = True
    finally:
        runner.close(cancel=not finished)


def _judge(result: _Counted) -> tuple[str, bool] | None:
    return None if result.error is None else (str(result.error), False)
