"""shard_files: a directory tree or a CSV/TSV plan into shards (``tarkit shard SOURCE``).

:func:`open_files` picks the dataset for a source — :class:`~tarkit.writing.files.ImageFolder`
or :class:`~tarkit.writing.files.FileTree` for a directory (by ``layout``, see
:func:`~tarkit.writing.files.detect_layout`), :class:`~tarkit.writing.plan.PlanDataset`
for a plan — and :func:`shard_files` shards it with :func:`~tarkit.shard_dataset`, in a
seeded random order unless told otherwise (a loader shuffles within a buffer of a few
thousand samples, so shards written class after class would give batches of one or two
classes), saving an ImageFolder's class list beside the shards.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ..errors import SourceError, UsageError
from ..format.encoding import DEFAULT_QUALITY, ImageTransform
from ..format.manifest import Manifest
from ..format.samples import SkipLog
from ..storage import StorageOptions, is_directory, location
from .files import FileTree, ImageFolder, detect_layout
from .from_dataset import shard_dataset
from .plan import PlanDataset
from .shard_writer import DEFAULT_PATTERN

LAYOUTS = ("auto", "imagefolder", "tree")


def open_files(
    source: str,
    layout: str = "auto",
    transform: ImageTransform | None = None,
    *,
    delimiter: str | None = None,
    key_format: str | None = None,
    strict: bool = False,
    skips: SkipLog | None = None,
    warn: Callable[[str], object] | None = None,
    storage_options: StorageOptions | None = None,
) -> FileTree | ImageFolder | PlanDataset:
    """The dataset for ``source``: a directory read by ``layout`` (``auto``,
    ``imagefolder`` or ``tree``), else a CSV/TSV plan (``delimiter``, ``key_format`` and
    ``warn`` as :func:`~tarkit.writing.plan.read_plan` takes them). Either may be in an
    object store (``s3://bucket/train/``, ``s3://bucket/plan.csv``), listed or read with
    ``storage_options`` here, its files read by whoever loads the items.

    Files a layout cannot use are skipped into ``skips`` (or raise under ``strict``), as
    :mod:`tarkit.writing.files` says. Raises :class:`UsageError` for an unknown layout
    and for ``key_format`` with a directory, :class:`SourceError` when ``source`` does
    not exist.
    """
    if layout not in LAYOUTS:
        raise UsageError(f"--layout {layout!r}: expected one of {', '.join(LAYOUTS)}")
    options = storage_options
    if is_directory(source, options):
        if key_format is not None:
            raise UsageError("--key makes the keys of plan rows: it takes a .csv/.tsv SOURCE")
        if layout == "auto":
            layout = detect_layout(source, options)
        if layout == "imagefolder":
            return ImageFolder(
                source, transform, strict=strict, skips=skips, storage_options=options
            )
        return FileTree(source, transform, strict=strict, skips=skips, storage_options=options)
    if not location(source).remote and not os.path.exists(source):
        raise SourceError(f"{source}: no such file or directory")
    return PlanDataset(source, transform, delimiter, key_format=key_format, warn=warn,
                       storage_options=options)  # fmt: skip


def shard_files(
    source: str,
    pattern: str = DEFAULT_PATTERN,
    *,
    layout: str = "auto",
    delimiter: str | None = None,
    key_format: str | None = None,
    resize: str | None = None,
    image_format: str | None = None,
    quality: int = DEFAULT_QUALITY,
    verify: bool = False,
    shuffle: bool = True,
    strict: bool = False,
    skips: SkipLog | None = None,
    warn: Callable[[str], object] | None = None,
    **options: Any,
) -> Manifest:
    """Shard the dataset :func:`open_files` makes of ``source``; return the manifest.

    The items are written in a permutation seeded by ``seed`` (default 0) unless
    ``shuffle=False``, which keeps the source's order. ``resize``, ``image_format`` and
    ``quality`` re-encode the images as the files are read, and ``verify`` decodes every
    image (see :class:`~tarkit.format.encoding.ImageTransform`); ``options`` are
    :func:`~tarkit.shard_dataset`'s (``num_workers``, ``seed``, ``maxcount``, ``mode``,
    ``manifest``, ``on_error``, ``progress``…). An ImageFolder's class names, in index
    order, are saved as JSON at ``classes`` (default: ``classes.json`` beside the shards).
    """
    transform = ImageTransform(resize, image_format, quality, verify=verify)
    if options.get("engine", "local") != "local":
        source = location(source).identity()  # the workers' cwd is not this one
    dataset = open_files(source, layout, transform, delimiter=delimiter, key_format=key_format,
                         strict=strict, skips=skips, warn=warn,
                         storage_options=options.get("storage_options"))  # fmt: skip
    return shard_dataset(dataset, pattern, quality=quality, shuffle=shuffle, **options)
