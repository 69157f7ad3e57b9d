"""shard_dataset: turn a map-style Dataset (or any iterable) into shards, in parallel.

The per-item work — loading, transforming, encoding every field to bytes and building the
tar members — runs in ``DataLoader`` worker processes (``num_workers``); the main process
only appends finished samples to a :class:`~tarkit.writing.shard_writer.ShardWriter`. The output order
is the index order (or a seeded permutation with ``shuffle=True``) whatever the number of
workers, and encoding is deterministic, so the shards are byte-identical for 0, 1 or 8
workers and from one run to the next. ``mode="resume"`` continues an interrupted run
after its last complete shard and ends with the bytes an uninterrupted run writes.
Hugging Face datasets are converted feature by feature (:mod:`tarkit.writing.huggingface`);
``on_error="skip"`` leaves out the items that fail, listed in a rejects file
(:mod:`tarkit.writing.rejects`).

torch is imported only when ``num_workers > 0`` for a map-style dataset.
"""

from __future__ import annotations

import itertools
import json
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..engines import check_engine
from ..errors import UsageError
from ..format.encoding import DEFAULT_QUALITY, ImageTransform
from ..format.manifest import Manifest, ShardInfo
from ..format.tar import default_mtime
from ..sizes import check_on_error, parse_size
from ..storage import location, publish
from .cluster import Tally, shard_on_engine
from .huggingface import FieldNames, hf_rows, hf_samples, is_hf_dataset, refuse_splits
from .items import DatasetFactory, ItemEncoder, ItemFailure, ToSample, default_sample
from .kept import KeptShard, check_kept_items
from .patterns import CREATE, OVERWRITE, RESUME
from .rejects import ON_ERROR, Rejected, default_rejects, load_rejects, save_rejects
from .shard_writer import DEFAULT_MAXCOUNT, DEFAULT_MAXSIZE, DEFAULT_PATTERN, ShardWriter

CHUNK = 8  # items per worker task: fewer, larger messages between processes
CLASSES_FILE = "classes.json"


@dataclass(frozen=True)
class ShardProgress:
    """Handed to :func:`shard_dataset`'s ``progress`` callback after every sample written,
    and once more with ``finished`` when the last shard is complete.

    ``samples`` counts the samples in the shards so far, the ``resumed`` ones found in
    the complete shards of an interrupted run included; ``total`` is the dataset's length
    (None for an iterable); ``shards`` counts the complete shards; ``rejected`` the
    items left out under ``on_error="skip"``. On a cluster, ``samples`` counts the items
    encoded so far, ``retries`` the tasks tried again, and ``message`` says why, once,
    in the report that follows each retry.
    """

    samples: int
    total: int | None
    shards: int
    resumed: int
    seconds: float
    finished: bool = False
    rejected: int = 0
    retries: int = 0
    message: str | None = None

    @property
    def samples_per_second(self) -> float:
        """The rate of this run (resumed samples left out)."""
        return (self.samples - self.resumed) / self.seconds if self.seconds > 0 else 0.0


class _Chunks:
    """A map-style dataset over chunks of indices, for the DataLoader."""

    def __init__(self, encoder: ItemEncoder) -> None:
        self.encoder = encoder

    def __getitem__(self, indices: Sequence[int]) -> list[bytes | ItemFailure]:
        return self.encoder(indices)


def _identity(batch: Any) -> Any:
    return batch


def is_map_style(dataset: object) -> bool:
    """Whether ``dataset`` is read by index (``__len__`` and ``__getitem__``), not iterated.

    >>> is_map_style([1, 2]), is_map_style(iter([1, 2]))
    (True, False)
    """
    if any(c.__name__ == "IterableDataset" for c in type(dataset).__mro__):
        return False
    if isinstance(dataset, (str, bytes, Mapping)):
        return False
    return hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")


def sample_order(length: int, shuffle: bool, seed: int) -> list[int]:
    """The indices in output order: 0…length-1, or their permutation seeded by ``seed``.

    >>> sample_order(5, False, 0)
    [0, 1, 2, 3, 4]
    >>> sample_order(5, True, 1) == sample_order(5, True, 1) != sample_order(5, False, 1)
    True
    """
    order = list(range(length))
    if shuffle:
        random.Random(seed).shuffle(order)
    return order


def shard_dataset(
    dataset: Any,
    pattern: str = DEFAULT_PATTERN,
    *,
    num_workers: int = 0,
    to_sample: ToSample | None = None,
    fields: FieldNames | None = None,
    shuffle: bool = False,
    seed: int = 0,
    maxcount: int = DEFAULT_MAXCOUNT,
    maxsize: int | str = DEFAULT_MAXSIZE,
    mode: str = CREATE,
    start: int = 0,
    manifest: str | None = None,
    classes: str | None = None,
    post: str | Callable[[str], object] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    quality: int = DEFAULT_QUALITY,
    image_ext: str = "png",
    resize: str | None = None,
    image_format: str | None = None,
    verify: bool = False,
    on_error: str = "fail",
    rejects: str | None = None,
    on_reject: Callable[[Rejected], object] | None = None,
    progress: Callable[[ShardProgress], object] | None = None,
    on_shard: Callable[[ShardInfo], object] | None = None,
    engine: str = "local",
    address: str | None = None,
    num_cpus: float = 1,
    retries: int = 2,
) -> Manifest:
    """Write every item of ``dataset`` into shards named by ``pattern``; return the manifest.

    ``to_sample(item, index)`` turns an item into a sample dict (``__key__`` and fields
    encoded by extension, see :mod:`tarkit.format.encoding`); without it,
    :func:`default_sample` is used, and a Hugging Face dataset is converted feature by
    feature (:mod:`tarkit.writing.huggingface`). ``fields`` renames the entries of dict
    items and the columns of a Hugging Face dataset (``{"image": "jpg"}``; None leaves
    one out). For a map-style dataset the items are loaded and encoded in
    ``num_workers`` DataLoader worker processes (0: in this process); an iterable is read
    in this process, and ``to_sample`` and encoding run in ``num_workers`` processes.
    ``shuffle=True`` writes a map-style dataset in a permutation seeded by ``seed``. The
    other options are :class:`ShardWriter`'s (``mode``: ``create``, ``overwrite`` or
    ``resume``, see :mod:`tarkit.writing.patterns`); ``quality`` is the JPEG/WebP quality
    for images encoded by extension. ``progress`` is called with a :class:`ShardProgress`
    after every sample (on a cluster: as tasks end) and at the end.

    ``engine="ray"`` runs the work on the Ray cluster at ``address`` (or ``RAY_ADDRESS``,
    else a local Ray), in tasks of ``num_cpus`` CPUs (``num_workers``, when not 0, limits
    the tasks in flight), and writes the same shards, byte for byte, with the same
    manifest (:mod:`tarkit.writing.cluster`): the dataset must be map-style and reach
    every node (pickled, or a :class:`~tarkit.writing.items.DatasetFactory` that each
    node calls), and so must ``to_sample``; a task whose worker dies is tried
    ``retries`` more times.

    ``resize`` (``"256x256:crop"``, see :func:`~tarkit.format.encoding.parse_resize`) and
    ``image_format`` (``"jpg"``, ``"png"``, ``"webp"``…) apply to every image field of
    every sample, after ``to_sample``: PIL images and encoded image bytes alike, as
    ``tarkit shard --resize/--format`` do; a new format renames the field (``seg.png`` →
    ``seg.jpg``). ``image_format`` is also the field of the image in an ``(x, label)``
    pair (else ``image_ext``). ``verify`` decodes every encoded image even when nothing
    changes it.

    Without ``to_sample``, the class names of the dataset (a ``classes`` list of names,
    as tarkit's and torchvision's ImageFolder have, or a Hugging Face ``ClassLabel``) are
    saved as JSON at ``classes`` (default: ``classes.json`` beside the shards).

    An item that fails raises its error (a tarkit error as it is, anything else as
    :class:`~tarkit.errors.InputError` naming the item index); complete shards stay, the
    unfinished one is removed, and ``mode="resume"`` continues (the result is the bytes
    an uninterrupted run writes). With ``on_error="skip"`` it is left out instead:
    ``on_reject`` is called with its :class:`~tarkit.writing.rejects.Rejected`, and the
    rejects file (``rejects``, default beside the shards:
    :func:`~tarkit.writing.rejects.default_rejects`) lists it.
    """
    if num_workers < 0:
        raise UsageError(f"num_workers must not be negative (got {num_workers})")
    check_on_error(on_error, ON_ERROR)
    cluster = check_engine(engine) != "local"
    made = dataset.dataset if isinstance(dataset, DatasetFactory) else dataset
    refuse_splits(made)
    if to_sample is None and is_hf_dataset(made):
        converted, to_sample = hf_samples(made, fields)
        class_names = to_sample.classes
        dataset = dataset.then(hf_rows) if isinstance(dataset, DatasetFactory) else converted
        made = converted
    else:
        class_names = _class_names(made) if to_sample is None else None
    map_style = is_map_style(made)
    if shuffle and not map_style:
        raise UsageError("shuffle=True needs a map-style dataset (with __len__ and __getitem__)")
    if cluster and not map_style:
        raise UsageError(f"engine={engine!r} needs a map-style dataset (with __len__ and "
                         "__getitem__): each task reads its own items by index")  # fmt: skip
    transform = ImageTransform(resize, image_format, quality, verify=verify)
    skipping = on_error == "skip"
    rejects = rejects or (default_rejects(pattern) if skipping else None)
    started = time.monotonic()
    total = len(made) if map_style else None
    last = [ShardProgress(0, total, 0, 0, 0.0)]

    def report(state: ShardProgress) -> None:
        last[0] = state
        if progress is not None:
            progress(state)

    encoder = ItemEncoder(dataset, to_sample, default_mtime(), quality,
                          transform.format or image_ext, transform, fields)  # fmt: skip
    order = sample_order(len(made), shuffle, seed) if map_style else None
    written: tuple[Manifest, list[Rejected]]
    common: dict[str, Any] = dict(mode=mode, start=start, storage_options=storage_options, post=post,
                  on_shard=on_shard, on_reject=on_reject)  # fmt: skip
    if cluster:
        if retries < 0:
            raise UsageError(f"retries must not be negative (got {retries})")

        def tally(state: Tally) -> None:
            report(ShardProgress(state.samples, total, state.shards, state.resumed,
                                 time.monotonic() - started, False, 0, state.retries,
                                 state.message))  # fmt: skip

        written = shard_on_engine(
            encoder, order or [], pattern, engine=engine, workers=num_workers or None,
            address=address, num_cpus=num_cpus, retries=retries, manifest=manifest,
            maxcount=maxcount, maxsize=parse_size(maxsize, "maxsize"), skipping=skipping,
            rejects=rejects, report=tally, **common,
        )  # fmt: skip
    else:
        written = _write_here(encoder, order, num_workers, pattern, maxcount, maxsize,
                              manifest, skipping, rejects, report, started, total, **common)  # fmt: skip
    result, rejected = written
    if rejects is not None:
        save_rejects(rejected, rejects, storage_options)
    if class_names is not None:
        names = json.dumps(class_names, ensure_ascii=False, indent=1) + "\n"
        publish(classes or location(pattern).sibling(CLASSES_FILE), names.encode("utf-8"),
                storage_options)  # fmt: skip
    final = replace(last[0], seconds=time.monotonic() - started, finished=True,
                    rejected=len(rejected), shards=len(result.shards), message=None)  # fmt: skip
    if progress is not None:
        progress(final)
    return result


def _write_here(
    encoder: ItemEncoder, order: list[int] | None, num_workers: int, pattern: str,
    maxcount: int, maxsize: int | str, manifest: str | None, skipping: bool,
    rejects: str | None, report: Callable[[ShardProgress], object], started: float,
    total: int | None, *, mode: str, start: int, storage_options: Mapping[str, Any] | None,
    post: str | Callable[[str], object] | None, on_shard: Callable[[ShardInfo], object] | None,
    on_reject: Callable[[Rejected], object] | None,
) -> tuple[Manifest, list[Rejected]]:  # fmt: skip
    """The local engine: workers of this machine encode, this process writes."""
    rejected: list[Rejected] = []
    published: list[int | None] = [None]  # how many rejects the rejects file lists

    def shard_done(info: ShardInfo) -> None:
        # The rejects file keeps up with the complete shards, for mode="resume".
        if rejects is not None and mode != OVERWRITE and published[0] != len(rejected):
            save_rejects(rejected, rejects, storage_options)
            published[0] = len(rejected)
        if on_shard is not None:
            on_shard(info)

    writer = ShardWriter(
        pattern, maxcount=maxcount, maxsize=maxsize, start=start, post=post,
        manifest=manifest, on_shard=shard_done, storage_options=storage_options, mode=mode,
        mtime=encoder.mtime,
        # the rejects file must keep step with the shards in place: one at a time
        overlap=rejects is None,
    )  # fmt: skip
    if rejects is not None and mode == RESUME and writer.shards:
        rejected = load_rejects(rejects, storage_options)
        published[0] = len(rejected)
    resumed = writer.samples_done
    done = resumed + len(rejected)  # the items the complete shards stand for
    left_out = {reject.index for reject in rejected}
    if order is not None:
        if writer.kept:
            positions = (p for p in range(min(done, len(order))) if order[p] not in left_out)
            check_kept_items(writer.kept, positions,
                             lambda p: _item_key(encoder((order[p],))[0]), len(order))  # fmt: skip
        results = _map_results(encoder, order[done:], num_workers)
    else:
        items = enumerate(encoder.dataset)
        if writer.kept:  # (else no item is done)
            _check_kept_iterable(writer.kept, encoder, items, done, left_out)
        results = _iterable_results(encoder, items, num_workers)
    with writer:
        try:
            for result in results:
                if isinstance(result, bytes):
                    writer.write_raw(result)
                elif skipping:
                    reject = Rejected(result.index, result.source, str(result.exception()))
                    rejected.append(reject)
                    if on_reject is not None:
                        on_reject(reject)
                else:
                    raise result.exception()
                report(ShardProgress(writer.samples, total, len(writer.shards), resumed,
                                     time.monotonic() - started, False, len(rejected)))  # fmt: skip
        finally:
            _close(results)
    return writer.manifest_of(), rejected


def _item_key(encoded: bytes | ItemFailure) -> str | None:
    """The key of an encoded item (None for one that failed)."""
    if isinstance(encoded, ItemFailure):
        return None
    import io

    from ..format.samples import group_samples
    from ..format.tar import END_OF_ARCHIVE, read_members

    return next(group_samples(read_members(io.BytesIO(encoded + END_OF_ARCHIVE)))).key


def _check_kept_iterable(
    kept: list[KeptShard], encoder: ItemEncoder, items: Iterator[tuple[int, Any]], done: int,
    left_out: set[int],
) -> None:  # fmt: skip
    """Read the first ``done`` of ``items`` (an iterable dataset's, from the first) and
    check them against the ``kept`` shards (:func:`~tarkit.writing.kept.check_kept_items`):
    only the first and last item of each shard are encoded."""

    def positions() -> Iterator[int]:
        return (p for p in range(done) if p not in left_out)

    ends: set[int] = set()
    walk = positions()
    for shard in kept:
        taken = list(itertools.islice(walk, shard.info.samples))
        ends.update(taken[:1] + taken[-1:])
    keys: dict[int, str | None] = {}
    read = 0
    for position, item in itertools.islice(items, done):
        read += 1
        if position in ends:
            keys[position] = _item_key(encoder.encode(position, item))
    check_kept_items(kept, positions(), keys.get, read if read < done else None)


def _class_names(dataset: object) -> list[str] | None:
    """The ``classes`` list of names a dataset declares (ImageFolder, torchvision), if any."""
    names = getattr(dataset, "classes", None)
    if isinstance(names, list) and names and all(isinstance(n, str) for n in names):
        return names
    return None


def _close(results: Iterator[Any]) -> None:
    close = getattr(results, "close", None)
    if close is not None:
        close()


def _chunks(order: Sequence[int], size: int) -> list[list[int]]:
    return [list(order[i : i + size]) for i in range(0, len(order), size)]


def _map_results(
    encoder: ItemEncoder, order: Sequence[int], num_workers: int
) -> Iterator[bytes | ItemFailure]:
    """Encoded samples of a map-style dataset, in ``order``."""
    if num_workers == 0:
        for index in order:
            yield from encoder((index,))
        return
    try:
        from torch.utils.data import DataLoader
    except ImportError:
        raise UsageError(
            "num_workers > 0 runs DataLoader workers and needs torch (pip install 'tarkit[torch]')"
        ) from None
    loader: Any = DataLoader(
        _Chunks(encoder),  # type: ignore[arg-type]
        batch_size=None,
        sampler=_chunks(order, CHUNK),  # type: ignore[arg-type]
        num_workers=num_workers,
        collate_fn=_identity,
        prefetch_factor=4,
    )
    iterator = iter(loader)
    try:
        for chunk in iterator:
            yield from chunk
    finally:
        shutdown = getattr(iterator, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()


_ITERABLE_ENCODER: ItemEncoder | None = None


def _encode_in_worker(pair: tuple[int, Any]) -> bytes | ItemFailure:
    assert _ITERABLE_ENCODER is not None
    return _ITERABLE_ENCODER.encode(*pair)


def _iterable_results(
    encoder: ItemEncoder, items: Iterable[tuple[int, Any]], num_workers: int
) -> Iterator[bytes | ItemFailure]:
    """Encoded samples of an iterable's (index, item) pairs, in order.

    Workers are forked processes that inherit the encoder (so ``to_sample`` need not be
    picklable; the items must be). Items are handed out a window at a time, so memory
    stays bounded however long the iterable is.
    """
    if num_workers == 0:
        for index, item in items:
            yield encoder.encode(index, item)
        return
    import multiprocessing

    global _ITERABLE_ENCODER
    _ITERABLE_ENCODER = encoder
    window = num_workers * CHUNK * 4
    try:
        pool = multiprocessing.get_context("fork").Pool(num_workers)
    finally:
        _ITERABLE_ENCODER = None
    iterator = iter(items)
    try:
        while True:
            batch = list(itertools.islice(iterator, window))
            if not batch:
                break
            yield from pool.imap(_encode_in_worker, batch, chunksize=CHUNK)
        pool.close()
    finally:
        pool.terminate()
        pool.join()


__all__ = [
    "ShardProgress", "default_sample", "is_map_style", "sample_order", "shard_dataset"
]  # fmt: skip
