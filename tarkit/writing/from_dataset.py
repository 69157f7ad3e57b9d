"""shard_dataset: turn a map-style Dataset (or any iterable) into shards, in parallel.

The per-item work — loading, transforming, encoding every field to bytes and building the
tar members — runs in ``DataLoader`` worker processes (``num_workers``); the main process
only appends finished samples to a :class:`~tarkit.writing.shard_writer.ShardWriter`. The output order
is the index order (or a seeded permutation with ``shuffle=True``) whatever the number of
workers, and encoding is deterministic, so the shards are byte-identical for 0, 1 or 8
workers and from one run to the next. ``resume=True`` continues an interrupted run after
its last complete shard and ends with the bytes an uninterrupted run writes.

torch is imported only when ``num_workers > 0`` for a map-style dataset.
"""

from __future__ import annotations

import itertools
import random
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InputError, SampleError, TarkitError, UsageError
from ..format.encoding import DEFAULT_QUALITY, ImageTransform, encode_sample
from ..format.manifest import Manifest, ShardInfo
from .shard_writer import DEFAULT_MAXCOUNT, DEFAULT_MAXSIZE, DEFAULT_PATTERN, ShardWriter

ToSample = Callable[[Any, int], Mapping[str, Any]]
CHUNK = 8  # items per worker task: fewer, larger messages between processes


@dataclass(frozen=True)
class ShardProgress:
    """Handed to :func:`shard_dataset`'s ``progress`` callback after every sample written,
    and once more with ``finished`` when the last shard is complete.

    ``samples`` counts the samples in the shards so far, the ``resumed`` ones found in
    the complete shards of an interrupted run included; ``total`` is the dataset's length
    (None for an iterable); ``shards`` counts the complete shards.
    """

    samples: int
    total: int | None
    shards: int
    resumed: int
    seconds: float
    finished: bool = False

    @property
    def samples_per_second(self) -> float:
        """The rate of this run (resumed samples left out)."""
        return (self.samples - self.resumed) / self.seconds if self.seconds > 0 else 0.0


def default_sample(item: Any, index: int, *, image_ext: str = "png") -> dict[str, Any]:
    """The sample dict for a dataset item when no ``to_sample`` is given.

    A dict is used as it is (``__key__`` defaults to the index as ``%09d``). A pair
    ``(x, label)``, as torchvision datasets return, becomes ``x`` under a field chosen by
    its type (a PIL image: ``image_ext``, lossless PNG by default; a numpy array: ``npy``;
    a tensor: ``pth``; str: ``txt``; bytes: ``bin``; dict or list: ``json``) and the
    label under ``cls`` (an int) or by the same rule.

    >>> default_sample(("hello", 3), 7)
    {'__key__': '000000007', 'txt': 'hello', 'cls': 3}
    """
    key = f"{index:09d}"
    if isinstance(item, Mapping):
        sample = dict(item)
        sample.setdefault("__key__", key)
        return sample
    if isinstance(item, (tuple, list)) and len(item) == 2:
        value, label = item
        value_field = _field_for(value, image_ext)
        label_field = "cls" if _is_int(label) else _field_for(label, image_ext)
        if value_field is not None and label_field is not None and value_field != label_field:
            return {"__key__": key, value_field: value, label_field: label}
    raise SampleError(
        f"item {index} is a {type(item).__name__}: give a dict, an (x, label) pair, "
        "or a to_sample function that returns a dict of fields",
        source="dataset",
    )


def _is_int(value: object) -> bool:
    import numbers

    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _field_for(value: object, image_ext: str) -> str | None:
    module = type(value).__module__
    if module.startswith("PIL."):
        return image_ext
    if module == "numpy":
        return "npy"
    if module.startswith("torch"):
        return "pth"
    if isinstance(value, str):
        return "txt"
    if isinstance(value, (bytes, bytearray)):
        return "bin"
    if isinstance(value, (dict, list)):
        return "json"
    if _is_int(value):
        return "cls"
    return None


class _Failure:
    """An error raised by one item, carried back from a worker process intact."""

    def __init__(self, index: int, exc: BaseException) -> None:
        self.index = index
        self.tarkit = isinstance(exc, TarkitError)
        # A tarkit error is rebuilt as it was; anything else travels as text.
        self.type = type(exc) if self.tarkit else None
        self.state = dict(exc.__dict__) if self.tarkit else {}
        self.args = exc.args if self.tarkit else ()
        self.text = f"{type(exc).__name__}: {exc}"
        self.traceback = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))

    def exception(self) -> BaseException:
        cause = RuntimeError(f"in the worker:\n{self.traceback}")
        if self.type is not None:
            exc = self.type.__new__(self.type)
            exc.args = self.args
            exc.__dict__.update(self.state)
        else:
            exc = InputError(f"item {self.index}: {self.text}", source="dataset")
        exc.__cause__ = cause
        return exc


class _Encoder:
    """The per-item work: item → sample dict → raw tar members. Runs in the workers."""

    def __init__(self, dataset: Any, to_sample: ToSample | None, mtime: int, quality: int,
                 image_ext: str, transform: ImageTransform) -> None:  # fmt: skip
        self.dataset = dataset
        self.to_sample = to_sample
        self.mtime = mtime
        self.quality = quality
        self.image_ext = image_ext
        self.transform = transform

    def encode(self, index: int, item: Any) -> bytes | _Failure:
        try:
            if self.to_sample is not None:
                sample = self.to_sample(item, index)
            else:
                sample = default_sample(item, index, image_ext=self.image_ext)
            if self.transform.active:
                sample = self.transform.sample(sample, f"item {index}")
            return encode_sample(sample, mtime=self.mtime, quality=self.quality)
        except Exception as exc:
            return _Failure(index, exc)

    def __call__(self, indices: Sequence[int]) -> list[bytes | _Failure]:
        """Load and encode the items at ``indices`` of a map-style dataset."""
        results: list[bytes | _Failure] = []
        for index in indices:
            try:
                item = self.dataset[index]
            except Exception as exc:
                results.append(_Failure(index, exc))
                continue
            results.append(self.encode(index, item))
        return results


class _Chunks:
    """A map-style dataset over chunks of indices, for the DataLoader."""

    def __init__(self, encoder: _Encoder) -> None:
        self.encoder = encoder

    def __getitem__(self, indices: Sequence[int]) -> list[bytes | _Failure]:
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
    shuffle: bool = False,
    seed: int = 0,
    maxcount: int = DEFAULT_MAXCOUNT,
    maxsize: int | str = DEFAULT_MAXSIZE,
    resume: bool = False,
    start: int = 0,
    manifest: str | None = None,
    post: str | Callable[[str], object] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    quality: int = DEFAULT_QUALITY,
    image_ext: str = "png",
    resize: str | None = None,
    image_format: str | None = None,
    progress: Callable[[ShardProgress], object] | None = None,
    on_shard: Callable[[ShardInfo], object] | None = None,
) -> Manifest:
    """Write every item of ``dataset`` into shards named by ``pattern``; return the manifest.

    ``to_sample(item, index)`` turns an item into a sample dict (``__key__`` and fields
    encoded by extension, see :mod:`tarkit.format.encoding`); without it,
    :func:`default_sample` is used. For a map-style dataset the items are loaded and
    encoded in ``num_workers`` DataLoader worker processes (0: in this process); an
    iterable is read in this process, and ``to_sample`` and encoding run in
    ``num_workers`` processes. ``shuffle=True`` writes a map-style dataset in a
    permutation seeded by ``seed``. The other options are :class:`ShardWriter`'s;
    ``quality`` is the JPEG/WebP quality for images encoded by extension. ``progress``
    is called with a :class:`ShardProgress` after every sample and at the end.

    ``resize`` (``"256x256^"``, see :func:`~tarkit.format.encoding.parse_resize`) and
    ``image_format`` (``"jpg"``, ``"png"``, ``"webp"``…) apply to every image field of
    every sample, after ``to_sample``: PIL images and encoded image bytes alike, as
    ``tarkit shard --resize/--format`` do; a new format renames the field (``seg.png`` →
    ``seg.jpg``). ``image_format`` is also the field of the image in an ``(x, label)``
    pair (else ``image_ext``).

    ``resume=True`` keeps the complete shards of an interrupted run with the same
    arguments, skips the items they hold, and continues: the result is the bytes an
    uninterrupted run writes. An item that fails raises its error (a tarkit error as it
    is, anything else as :class:`~tarkit.errors.InputError` naming the item index);
    complete shards stay, the unfinished one is removed.
    """
    if num_workers < 0:
        raise UsageError(f"num_workers must not be negative (got {num_workers})")
    map_style = is_map_style(dataset)
    if shuffle and not map_style:
        raise UsageError("shuffle=True needs a map-style dataset (with __len__ and __getitem__)")
    transform = ImageTransform(resize, image_format, quality)
    if transform.format is not None:
        image_ext = transform.format
    writer = ShardWriter(
        pattern, maxcount=maxcount, maxsize=maxsize, start=start, post=post,
        manifest=manifest, on_shard=on_shard, storage_options=storage_options, resume=resume,
    )  # fmt: skip
    encoder = _Encoder(dataset, to_sample, writer.mtime, quality, image_ext, transform)
    done = writer.samples_done
    if map_style:
        order = sample_order(len(dataset), shuffle, seed)
        total: int | None = len(order)
        results = _map_results(encoder, order[done:], num_workers)
    else:
        total = None
        items = itertools.islice(enumerate(dataset), done, None)
        results = _iterable_results(encoder, items, num_workers)
    started = time.monotonic()

    def report(finished: bool = False) -> None:
        if progress is not None:
            seconds = time.monotonic() - started
            progress(ShardProgress(writer.samples, total, len(writer.shards), done, seconds,
                                   finished))  # fmt: skip

    with writer:
        try:
            for result in results:
                if isinstance(result, _Failure):
                    raise result.exception()
                writer.write_raw(result)
                report()
        finally:
            _close(results)
    report(finished=True)
    return writer.manifest_of()


def _close(results: Iterator[Any]) -> None:
    close = getattr(results, "close", None)
    if close is not None:
        close()


def _chunks(order: Sequence[int], size: int) -> list[list[int]]:
    return [list(order[i : i + size]) for i in range(0, len(order), size)]


def _map_results(
    encoder: _Encoder, order: Sequence[int], num_workers: int
) -> Iterator[bytes | _Failure]:
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


_ITERABLE_ENCODER: _Encoder | None = None


def _encode_in_worker(pair: tuple[int, Any]) -> bytes | _Failure:
    assert _ITERABLE_ENCODER is not None
    return _ITERABLE_ENCODER.encode(*pair)


def _iterable_results(
    encoder: _Encoder, items: Iterable[tuple[int, Any]], num_workers: int
) -> Iterator[bytes | _Failure]:
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
