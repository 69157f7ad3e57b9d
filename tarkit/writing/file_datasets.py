"""Map-style datasets over files on disk, for :func:`tarkit.shard_dataset`.

- :class:`ImageFolder`: ``root/<class>/…/<name>.<ext>``, as torchvision reads it. Classes
  are the subdirectories in sorted order; each image is a sample with the image (its
  extension lowercased, ``jpeg`` as ``jpg``), ``cls`` (the class index) and
  ``class.txt`` (the class name). The key is the path without extension, dots in the
  file name replaced by ``_`` (``cat/img.v2.jpg`` → ``cat/img_v2``).
- :class:`FileTree`: every file of a tree, grouped by key (the path up to the first dot
  of the file name), in sorted key order: ``a/x.jpg`` and ``a/x.seg.png`` form sample
  ``a/x`` with fields ``jpg`` and ``seg.png``.
- :class:`PlanDataset`: the rows of a CSV/TSV plan (:mod:`tarkit.writing.plan`).

Listing happens when the dataset is built (errors then name the path); reading, and
re-encoding images with an :class:`~tarkit.format.encoding.ImageTransform`, happens per item, in
the DataLoader workers. Items are sample dicts of bytes; every dataset is picklable.
Hidden files (``.name``) are ignored; other files a layout cannot use are listed in
``skipped``. :func:`detect_layout` chooses between the two directory layouts, and refuses
to guess when both could be meant.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from ..errors import InputError, SourceError
from ..format.encoding import IMAGE_FORMATS, ImageTransform, extension
from ..format.samples import split_name
from .plan import PlanRow, read_plan

IMAGE_EXTENSIONS = frozenset(IMAGE_FORMATS)


def _walk(root: str) -> list[str]:
    """Paths of the regular files below ``root``, relative, with ``/``, sorted; no hidden ones."""
    if not os.path.isdir(root):
        what = "no such directory" if not os.path.exists(root) else "not a directory"
        raise SourceError(f"{root}: {what}")
    found: list[str] = []

    def fail(exc: OSError) -> None:
        raise SourceError(f"{exc.filename}: cannot list: {exc.strerror}")

    for directory, dirs, files in os.walk(root, onerror=fail):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        relative = os.path.relpath(directory, root)
        for name in files:
            if name.startswith("."):
                continue
            path = name if relative == "." else os.path.join(relative, name)
            if os.path.isfile(os.path.join(root, path)):
                found.append(path.replace(os.sep, "/"))
    return sorted(found)


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise SourceError(f"{path}: cannot read: {exc.strerror}") from None


def _transform(
    sample: dict[str, object], transform: ImageTransform | None, source: str
) -> dict[str, object]:
    """Apply ``transform`` to the image fields of a sample of bytes."""
    if transform is None or not transform.active:
        return sample
    return transform.sample(sample, source)


def _in_a_class(path: str) -> bool:
    """Whether ``path`` is an image below a class directory (what ImageFolder takes)."""
    class_name, _, rest = path.partition("/")
    name = rest[rest.rfind("/") + 1 :]
    return bool(rest) and "." in name and extension(name) in IMAGE_EXTENSIONS


def detect_layout(root: str) -> str:
    """``"imagefolder"`` or ``"tree"``: how ``--layout auto`` reads the directory ``root``.

    ImageFolder when every file is an image in a class directory (``root/<class>/…``); a
    plain tree when no class directory holds an image, or when every other file belongs to
    the sample of an image (``cat/1.jpg`` with ``cat/1.json``). Anything else — class
    directories of images with a stray file such as ``cat/Thumbs.db`` or a top-level
    ``labels.csv`` — could be either, and raises :class:`InputError` naming the first
    stray file: ``--layout`` decides.
    """
    files = _walk(root)
    images = [f for f in files if _in_a_class(f)]
    if not images:
        return "tree"
    others = [f for f in files if not _in_a_class(f)]
    if not others:
        return "imagefolder"
    image_keys = {split_name(f)[0] for f in images}  # type: ignore[index]
    strays = [f for f in others if (split_name(f) or ("",))[0] not in image_keys]
    if not strays:
        return "tree"
    more = f" (and {len(strays) - 1} more such files)" if len(strays) > 1 else ""
    raise InputError(
        f"ambiguous layout: class directories of images, but {strays[0]} is not an image "
        f"in a class directory{more}: --layout imagefolder skips such files, --layout tree "
        "shards every file grouped by key",
        source=root,
    )


class ImageFolder:
    """Images in ``root/<class>/…``: samples of the image, ``cls`` and ``class.txt``."""

    def __init__(self, root: str, transform: ImageTransform | None = None) -> None:
        self.root = root
        self.transform = transform
        self.classes = sorted(
            e for e in os.listdir(root)
            if not e.startswith(".") and os.path.isdir(os.path.join(root, e))
        )  # fmt: skip
        if not self.classes:
            raise InputError("no class subdirectories (ImageFolder layout: root/<class>/<image>)",
                             source=root)  # fmt: skip
        self.items: list[tuple[str, str, int]] = []  # (key, relative path, class index)
        self.skipped: list[str] = []
        keys: dict[str, str] = {}
        index_of = {name: i for i, name in enumerate(self.classes)}
        for path in _walk(root):
            if not _in_a_class(path):
                self.skipped.append(path)
                continue
            class_name = path.partition("/")[0]
            stem = path[: path.rfind(".")]
            head, _, name = stem.rpartition("/")
            key = f"{head}/{name.replace('.', '_')}"
            if key in keys:
                raise InputError(
                    f"{keys[key]} and {path} would both be sample {key!r}: rename one",
                    source=root,
                )
            keys[key] = path
            self.items.append((key, path, index_of[class_name]))
        if not self.items:
            raise InputError("no images below the class subdirectories", source=root)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, object]:
        key, path, label = self.items[index]
        ext = extension(path)
        field = "jpg" if ext == "jpeg" else ext
        full = os.path.join(self.root, path)
        sample: dict[str, object] = {
            "__key__": key,
            field: _read(full),
            "cls": label,
            "class.txt": self.classes[label],
        }
        return _transform(sample, self.transform, full)


class FileTree:
    """Every file of a tree, grouped into samples by key, in sorted key order."""

    def __init__(self, root: str, transform: ImageTransform | None = None) -> None:
        self.root = root
        self.transform = transform
        self.skipped: list[str] = []
        groups: dict[str, list[tuple[str, str]]] = {}
        for path in _walk(root):
            parts = split_name(path)
            if parts is None:
                self.skipped.append(path)
                continue
            key, field = parts
            fields = groups.setdefault(key, [])
            for other, other_path in fields:
                if other.lower() == field.lower():
                    raise InputError(
                        f"{other_path} and {path} are both field {field!r} of sample {key!r}",
                        source=root,
                    )
            fields.append((field, path))
        self.items = sorted((key, sorted(fields)) for key, fields in groups.items())
        if not self.items:
            raise InputError("no files with a field (name.ext) in the tree", source=root)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, object]:
        key, fields = self.items[index]
        sample: dict[str, object] = {"__key__": key}
        for field, path in fields:
            sample[field] = _read(os.path.join(self.root, path))
        return _transform(sample, self.transform, os.path.join(self.root, key))


class PlanDataset:
    """The rows of a plan (checked when built), loaded per item; ``key_format`` makes
    the keys as in :func:`~tarkit.writing.plan.read_plan`."""

    def __init__(
        self,
        plan: str | Sequence[PlanRow],
        transform: ImageTransform | None = None,
        delimiter: str | None = None,
        *,
        key_format: str | None = None,
    ) -> None:
        if isinstance(plan, str):
            self.rows = read_plan(plan, delimiter, key_format=key_format)
        else:
            self.rows = list(plan)
        self.transform = transform
        self.source = plan if isinstance(plan, str) else "plan"
        self.skipped: list[str] = []

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, object]:
        row = self.rows[index]
        return _transform(row.load(), self.transform, f"{self.source}: line {row.line}")
