"""shard_dataset: turn a map-style Dataset (or any iterable) into shards, in parallel.

The per-item work — loading, transforming, encoding every field to bytes and building the
tar members — runs in ``DataLoader`` worker processes (``num_workers``,
:mod:`tarkit.writing.workers`); the main process only appends finished samples to a
:class:`~tarkit.writing.shard_writer.ShardWriter` (:mod:`tarkit.writing.local_run`), or
the work runs on an engine (:mod:`tarkit.writing.cluster`). An item may give several samples (or
none). The output order is the index order (or a seeded permutation with
``shuffle=True``), then the order of an item's samples, whatever the number of workers,
and encoding is deterministic, so the shards are byte-identical for 0, 1 or 8 workers
and from one run to the next. ``mode="resume"`` continues an interrupted run
after its last complete shard and ends with the bytes an uninterrupted run writes.
Hugging Face datasets are converted feature by feature (:mod:`tarkit.writing.huggingface`);
``on_error="skip"`` leaves out the items that fail, listed in a rejects file
(:mod:`tarkit.writing.rejects`).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..engines import check_engine
from ..errors import UsageError
from ..format.classes import CLASSES_FILE, class_names_json
from ..format.encoding import DEFAULT_QUALITY, ImageTransform
from ..format.manifest import Manifest, ShardInfo
from ..format.tar_writer import default_mtime
from ..sizes import check_on_error, parse_size
from ..storage import location, publish
from .cluster import Tally, shard_on_engine
from .huggingface import FieldNames, hf_rows, hf_samples, is_hf_dataset, refuse_splits
from .items import DatasetFactory, ItemEncoder, ToSample, default_sample
from .local_run import write_here
from .patterns import CREATE, ShardPattern
from .rejects import ON_ERROR, Rejected, default_rejects, save_rejects
from .shard_writer import DEFAULT_MAXCOUNT, DEFAULT_MAXSIZE, DEFAULT_PATTERN


@dataclass(frozen=True)
class ShardProgress:
    """Handed to :func:`shard_dataset`'s ``progress`` callback after every sample written,
    and once more with ``finished`` when the last shard is complete.

    ``samples`` counts the samples in the shards so far, the ``resumed`` ones found in
    the complete shards of an interrupted run included; ``total`` is the dataset's length
    in items (None for an iterable; a ``to_sample`` that gives several samples per item
    makes more samples than that); ``shards`` counts the complete shards; ``rejected``
    the items left out under ``on_error="skip"``; ``empty`` the items whose ``to_sample``
    gave no sample. On a cluster, ``samples`` counts the samples encoded so far,
    ``retries`` the tasks tried again, and ``message`` says why, once, in the report
    that follows each retry.
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
    empty: int = 0

    @property
    def samples_per_second(self) -> float:
        """The rate of this run (resumed samples left out)."""
        return (self.samples - self.resumed) / self.seconds if self.seconds > 0 else 0.0


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
    encoded by extension, see :mod:`tarkit.format.encoding`), or into several: a list of
    them or a generator, each sample with a key of its own (none, ``[]``, is allowed and
    counted in :attr:`ShardProgress.empty`); it runs in the workers, and the samples
    follow the item order, then the order ``to_sample`` gives them in. An item's samples
    are held in memory together until they are written: split a very large expansion
    (thousands of samples, or gigabytes, from one item) into several items. Two samples
    of one item with one key, or an item whose first sample has the key of the sample
    before it, fail that item (readers would merge the two); without ``to_sample``,
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
    an uninterrupted run writes; where items give several samples, or none, the shards
    keep records beside them saying where they end in the item order:
    :mod:`tarkit.writing.shard_records`). With ``on_error="skip"`` it is left out instead,
    all its samples or none (a generator that raises part-way leaves none of its samples):
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
    shard_pattern = ShardPattern.parse(pattern)  # (parsed once: every writer below takes it)
    skipping = on_error == "skip"
    rejects = rejects or (default_rejects(shard_pattern) if skipping else None)
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

    def tally(state: Tally) -> None:
        report(ShardProgress(state.samples, total, state.shards, state.resumed,
                             time.monotonic() - started, False, state.rejected, state.retries,
                             state.message, state.empty))  # fmt: skip

    if cluster:
        if retries < 0:
            raise UsageError(f"retries must not be negative (got {retries})")
        written = shard_on_engine(
            encoder, order or [], shard_pattern, engine=engine, workers=num_workers or None,
            address=address, num_cpus=num_cpus, retries=retries, manifest=manifest,
            maxcount=maxcount, maxsize=parse_size(maxsize, "maxsize"), skipping=skipping,
            rejects=rejects, report=tally, **common,
        )  # fmt: skip
    else:
        written = write_here(encoder, order, num_workers, shard_pattern, maxcount, maxsize,
                             manifest, skipping, rejects, tally, **common)  # fmt: skip
    result, rejected = written
    if rejects is not None:
        save_rejects(rejected, rejects, storage_options)
    if class_names is not None:
        publish(classes or location(pattern).sibling(CLASSES_FILE), class_names_json(class_names),
                storage_options)  # fmt: skip
    final = replace(last[0], seconds=time.monotonic() - started, finished=True,
                    rejected=len(rejected), shards=len(result.shards), message=None)  # fmt: skip
    if progress is not None:
        progress(final)
    return result


def _class_names(dataset: object) -> list[str] | None:
    """The ``classes`` list of names a dataset declares (ImageFolder, torchvision), if any."""
    names = getattr(dataset, "classes", None)
    if isinstance(names, list) and names and all(isinstance(n, str) for n in names):
        return names
    return None


__all__ = [
    "ShardProgress", "default_sample", "is_map_style", "sample_order", "shard_dataset"
]  # fmt: skip
