"""Directory trees as samples: the one walker, for ``tarcreate --dir`` and ``tarkit shard``.

:func:`tree_files` walks a tree in name order (a directory's files before its
subdirectories) and leaves out, by the same rules for every caller, what a reader would
skip or misread:

- hidden files and directories (name starting with ``.``) are ignored silently, as
  ``ls`` does;
- a symlink, a FIFO, socket or device, and anything webdataset's readers take for
  metadata (below a top-level ``__name__`` directory, see
  :func:`~tarkit.format.samples.is_metadata`) is skipped. With ``dereference``, a
  symlink to a regular file is read as that file; symlinks to directories are never
  followed, so without it nothing outside the tree comes in.

A skipped file is counted in ``skips`` (a :class:`~tarkit.format.samples.SkipLog`, whose
callback warns once per reason) under its reason; with ``strict`` it raises
:class:`~tarkit.errors.InputError` naming the path. Every layout on top of the walker
skips the files it cannot use the same way:

- :func:`list_tree` and :class:`FileTree`: files grouped into samples by WebDataset's key
  rule — the key is the path up to the first dot of the file name (``a/x.seg.png`` →
  sample ``a/x``, field ``seg.png``) — in the order of the keys' UTF-8 bytes (as
  ``tarsort`` orders them). A file without a field is skipped; two files that would be
  the same field of one sample (``x.jpg``, ``x.JPG``) raise ``InputError`` naming both.
- :class:`ImageFolder`: ``root/<class>/…/<name>.<ext>``, as torchvision reads it. Classes
  are the subdirectories in sorted order; each image is a sample of the image (its
  extension lowercased, ``jpeg`` as ``jpg``), ``cls`` (the class index) and
  ``class.txt`` (the class name). The key is the path without extension, dots in the
  file name replaced by ``_`` (``cat/img.v2.jpg`` → ``cat/img_v2``). Files that are not
  images in a class directory are skipped.
- :func:`detect_layout` chooses between the two, and refuses to guess when both could be
  meant (:func:`tarkit.writing.from_files.open_files` asks it).

The datasets list when they are built (errors then name the path) and read, and re-encode
images with an :class:`~tarkit.format.encoding.ImageTransform`, per item, in the
DataLoader workers; items are sample dicts of bytes, and every dataset is picklable.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ..errors import InputError, SourceError
from ..format.encoding import IMAGE_FORMATS, ImageTransform, extension
from ..format.samples import SkipLog, is_metadata, split_name
from ..storage import StorageOptions, files_below, location, read_bytes

NO_FIELD_FILE = "file without a field (no dot in the file name)"
METADATA_FILE = "file below a webdataset metadata directory (__name__), which readers skip"
NOT_AN_IMAGE = "stray file (not an image in a class directory)"
IMAGE_EXTENSIONS = frozenset(IMAGE_FORMATS)
# Top-level directories with these names (any case), in this order, that hold class
# directories of images are a dataset's splits, not its classes.
SPLIT_NAMES = ("train", "training", "val", "valid", "validation", "dev", "test", "testing")


def tree_files(
    root: str, *, strict: bool = False, skips: SkipLog | None = None, dereference: bool = False,
    storage_options: StorageOptions | None = None,
) -> Iterator[str]:  # fmt: skip
    """The paths (relative, with ``/``) of the regular files a layout may use, in walk
    order; what the walker leaves out is skipped as the module docstring says. A root in
    an object store (``s3://bucket/train/``) is listed whole, once, with
    ``storage_options``: its objects are all files.

    Raises :class:`SourceError` when ``root`` is not a directory or a directory cannot
    be listed or an entry cannot be examined, and :class:`InputError` for a skipped
    file under ``strict``.
    """
    if location(root).remote:
        yield from _remote_tree_files(root, strict, skips, storage_options)
        return
    if not os.path.isdir(root):
        what = "no such directory" if not os.path.exists(root) else "not a directory"
        raise SourceError(f"{root}: {what}")
    pending = [""]
    while pending:
        relative = pending.pop()
        subdirectories = []
        for entry in _listing(os.path.join(root, relative) if relative else root):
            path = f"{relative}/{entry.name}" if relative else entry.name
            if entry.is_dir(follow_symlinks=False):
                subdirectories.append(path)
                continue
            kind = _kind(entry, dereference)
            if kind != "file":
                skip_file(root, path, kind, strict, skips)
            elif is_metadata(path):
                skip_file(root, path, METADATA_FILE, strict, skips)
            else:
                yield path
        pending.extend(reversed(subdirectories))


def _remote_tree_files(
    root: str, strict: bool, skips: SkipLog | None, storage_options: StorageOptions | None
) -> Iterator[str]:
    """:func:`tree_files` of an object store's "directory", in the local walker's order."""
    paths = files_below(root, storage_options)
    if not paths:
        raise SourceError(f"{root}: no such directory (no objects below it)")
    visible = [p for p in paths if not any(part.startswith(".") for part in p.split("/"))]
    for path in sorted(visible, key=_walk_order):
        if is_metadata(path):
            skip_file(root, path, METADATA_FILE, strict, skips)
        else:
            yield path


def _walk_order(path: str) -> list[tuple[int, str]]:
    """The walker's order: in a directory its files by name, then its subdirectories.

    >>> sorted(["b/x", "a.txt", "a/y", "c.txt"], key=_walk_order)
    ['a.txt', 'c.txt', 'a/y', 'b/x']
    """
    *directories, name = path.split("/")
    return [(1, d) for d in directories] + [(0, name)]


def skip_file(root: str, path: str, reason: str, strict: bool, skips: SkipLog | None) -> None:
    """Count ``path`` in ``skips`` under ``reason``; with ``strict``, raise InputError."""
    if strict:
        raise InputError(f"{reason} is not allowed with --strict", source=os.path.join(root, path))
    if skips is not None:
        skips.add(reason, root, path)


def _listing(directory: str) -> list[os.DirEntry[str]]:
    """The entries of ``directory`` that are not hidden, in name order."""
    try:
        with os.scandir(directory) as entries:
            return sorted((e for e in entries if not e.name.startswith(".")), key=lambda e: e.name)
    except OSError as exc:
        raise SourceError(f"{directory}: cannot list: {exc.strerror}") from None


def _kind(entry: os.DirEntry[str], dereference: bool) -> str:
    """``file`` for a regular file (or, with ``dereference``, a symlink to one), else what it is."""
    try:
        mode = entry.stat(follow_symlinks=False).st_mode
    except OSError as exc:
        raise SourceError(f"{entry.path}: cannot stat: {exc.strerror}") from None
    if stat.S_ISLNK(mode) and dereference:
        try:
            if stat.S_ISREG(entry.stat(follow_symlinks=True).st_mode):
                return "file"
        except OSError:
            return "broken symlink"
    for test, kind in _KINDS:
        if test(mode):
            return kind
    return "special file"


_KINDS = (
    (stat.S_ISREG, "file"),
    (stat.S_ISLNK, "symlink"),
    (stat.S_ISFIFO, "fifo"),
    (stat.S_ISSOCK, "socket"),
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
)


def read_file(path: str, storage_options: StorageOptions | None = None) -> bytes:
    """The bytes of ``path`` (or of an object store's object, read with
    ``storage_options``, reconnecting as :mod:`tarkit.storage.retrying` says);
    :class:`SourceError` naming it when it cannot be read."""
    if location(path).remote:
        data = read_bytes(path, storage_options)
        if data is None:
            raise SourceError(f"{path}: no such file", reason=SourceError.MISSING)
        return data
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise SourceError(f"{path}: cannot read: {exc.strerror}") from None


@dataclass(frozen=True)
class TreeSample:
    """A sample of a tree: its key and (field, path) pairs sorted by field."""

    key: str
    files: tuple[tuple[str, str], ...]


def list_tree(
    root: str, *, strict: bool = False, skips: SkipLog | None = None, dereference: bool = False,
    storage_options: StorageOptions | None = None,
) -> list[TreeSample]:  # fmt: skip
    """The samples of the tree ``root``, sorted by key (see the module docstring).

    Raises :class:`SourceError` as :func:`tree_files` does, and :class:`InputError` for
    a field that appears twice and for a skipped file under ``strict``.
    """
    groups: dict[str, dict[str, tuple[str, str]]] = {}
    files = tree_files(root, strict=strict, skips=skips, dereference=dereference,
                       storage_options=storage_options)  # fmt: skip
    for path in files:
        parts = split_name(path)
        if parts is None:
            skip_file(root, path, NO_FIELD_FILE, strict, skips)
            continue
        key, field = parts
        fields = groups.setdefault(key, {})
        other = fields.get(field.lower())
        if other is not None:
            raise InputError(
                f"{other[1]} and {path} would both be field {field!r} of sample {key!r} "
                "(fields are compared case-insensitively, as webdataset does)",
                source=root,
            )
        fields[field.lower()] = (field, path)
    return [
        TreeSample(key, tuple(sorted(groups[key].values())))
        for key in sorted(groups, key=lambda k: k.encode("utf-8", "surrogateescape"))
    ]


def tree_members(root: str, samples: Iterable[TreeSample]) -> Iterator[tuple[str, bytes]]:
    """(member name, data) for every file of ``samples``, read from below ``root``."""
    for sample in samples:
        for field, path in sample.files:
            yield f"{sample.key}.{field}", read_file(os.path.join(root, path))


class FileTree:
    """Every file of a tree, grouped into samples by key (:func:`list_tree`)."""

    def __init__(self, root: str, transform: ImageTransform | None = None, *,
                 strict: bool = False, skips: SkipLog | None = None,
                 storage_options: StorageOptions | None = None) -> None:  # fmt: skip
        self.root = root
        self.transform = transform or ImageTransform()
        self.storage_options = dict(storage_options) if storage_options else None
        self.samples = list_tree(root, strict=strict, skips=skips,
                                 storage_options=storage_options)  # fmt: skip
        if not self.samples:
            raise InputError("no files with a field (name.ext) in the tree", source=root)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> dict[str, object]:
        sample = self.samples[index]
        item: dict[str, object] = {"__key__": sample.key}
        for field, path in sample.files:
            item[field] = read_file(os.path.join(self.root, path), self.storage_options)
        return self.transform.sample(item, self.item_source(index))

    def item_source(self, index: int) -> str:
        """Where item ``index`` comes from: its key's path below the root."""
        return os.path.join(self.root, self.samples[index].key)


def _in_a_class(path: str) -> bool:
    """Whether ``path`` is an image below a class directory (what ImageFolder takes)."""
    class_name, _, rest = path.partition("/")
    name = rest[rest.rfind("/") + 1 :]
    return bool(rest) and "." in name and extension(name) in IMAGE_EXTENSIONS


class ImageFolder:
    """Images in ``root/<class>/…``: samples of the image, ``cls`` and ``class.txt``.
    In an object store, the classes are the "directories" that hold objects."""

    def __init__(self, root: str, transform: ImageTransform | None = None, *,
                 strict: bool = False, skips: SkipLog | None = None,
                 storage_options: StorageOptions | None = None) -> None:  # fmt: skip
        self.root = root
        self.transform = transform or ImageTransform()
        self.storage_options = dict(storage_options) if storage_options else None
        paths = list(tree_files(root, strict=strict, skips=skips, storage_options=storage_options))
        # The directories the walker entered, but for webdataset metadata.
        if location(root).remote:
            entered = sorted({p.split("/", 1)[0] for p in paths if "/" in p})
        else:
            entered = [e.name for e in _listing(root) if e.is_dir(follow_symlinks=False)]
        self.classes = [name for name in entered if not is_metadata(name)]
        if not self.classes:
            raise InputError("no class subdirectories (ImageFolder layout: root/<class>/<image>)",
                             source=root)  # fmt: skip
        self.items: list[tuple[str, str, int]] = []  # (key, relative path, class index)
        keys: dict[str, str] = {}
        index_of = {name: i for i, name in enumerate(self.classes)}
        for path in sorted(paths):
            if not _in_a_class(path):
                skip_file(root, path, NOT_AN_IMAGE, strict, skips)
                continue
            stem = path[: path.rfind(".")]
            head, _, name = stem.rpartition("/")
            key = f"{head}/{name.replace('.', '_')}"
            if key in keys:
                raise InputError(
                    f"{keys[key]} and {path} would both be sample {key!r}: rename one",
                    source=root,
                )
            keys[key] = path
            self.items.append((key, path, index_of[path.partition("/")[0]]))
        if not self.items:
            raise InputError("no images below the class subdirectories", source=root)

    def __len__(self) -> int:
        return len(self.items)

    def item_source(self, index: int) -> str:
        """Where item ``index`` comes from: the image's path."""
        return os.path.join(self.root, self.items[index][1])

    def __getitem__(self, index: int) -> dict[str, object]:
        key, path, label = self.items[index]
        ext = extension(path)
        full = self.item_source(index)
        sample: dict[str, object] = {
            "__key__": key,
            "jpg" if ext == "jpeg" else ext: read_file(full, self.storage_options),
            "cls": label,
            "class.txt": self.classes[label],
        }
        return self.transform.sample(sample, full)


def detect_layout(root: str, storage_options: StorageOptions | None = None) -> str:
    """``"imagefolder"`` or ``"tree"``: how ``--layout auto`` reads the directory ``root``.

    Only the files the walker keeps count. ImageFolder when every file is an image in a
    class directory (``root/<class>/…``); a plain tree when no class directory holds an
    image, or when every other file belongs to the sample of an image (``cat/1.jpg`` with
    ``cat/1.json``). Anything else — class directories of images with a stray file such
    as ``cat/Thumbs.db`` or a top-level ``labels.csv`` — could be either, and raises
    :class:`InputError` naming the first stray file: ``--layout`` decides.

    A root that holds splits (:func:`split_directories`: ``train/cat/…``, ``val/cat/…``;
    or, read as a tree, two split directories or more holding files: ``train/a.wav``,
    ``val/b.wav``) raises :class:`InputError` saying to shard each split on its own: read
    as ImageFolder, its splits would be two classes, and as a tree one set of shards
    mixing them.
    """
    files = sorted(tree_files(root, storage_options=storage_options))
    images = [f for f in files if _in_a_class(f)]
    splits = split_directories(images)
    if splits:
        raise _splits_error(root, splits)
    tree_splits = split_directories(files, in_classes=False)
    if not images:
        return _tree(root, tree_splits)
    others = [f for f in files if not _in_a_class(f)]
    if not others:
        return "imagefolder"
    image_keys = {split_name(f)[0] for f in images}  # type: ignore[index]
    strays = [f for f in others if (split_name(f) or ("",))[0] not in image_keys]
    if not strays:
        return _tree(root, tree_splits)
    more = f" (and {len(strays) - 1} more such files)" if len(strays) > 1 else ""
    raise InputError(
        f"ambiguous layout: class directories of images, but {strays[0]} is not an image "
        f"in a class directory{more}: --layout imagefolder skips such files, --layout tree "
        "shards every file grouped by key",
        source=root,
    )


def split_directories(paths: Iterable[str], in_classes: bool = True) -> list[str]:
    """The top-level directories that look like a dataset's splits, train first: named
    like one (:data:`SPLIT_NAMES`) and holding the images ``paths`` in class directories
    below them (``in_classes=False``: holding any of the files ``paths``).

    >>> split_directories(["val/dog/2.jpg", "train/cat/1.jpg", "test/3.jpg", "cat/4.jpg"])
    ['train', 'val']
    >>> split_directories(["val/b.wav", "train/a.wav", "notes/c.txt"], in_classes=False)
    ['train', 'val']
    """
    found = set()
    for path in paths:
        top, _, rest = path.partition("/")
        if top.lower() in SPLIT_NAMES and ("/" in rest if in_classes else rest):
            found.add(top)
    return sorted(found, key=lambda name: (SPLIT_NAMES.index(name.lower()), name))


def _tree(root: str, splits: list[str]) -> str:
    """``"tree"``, unless two split directories or more hold the files: one set of shards
    would mix the splits (raises :class:`InputError`, as :func:`_splits_error` says)."""
    if len(splits) > 1:
        raise _splits_error(root, splits, tree=True)
    return "tree"


def _splits_error(root: str, splits: list[str], tree: bool = False) -> InputError:
    """The refusal of a root that holds splits (of images in classes; or of any files,
    ``tree``), with the command that shards one."""
    names = [f"{name}/" for name in splits]
    named = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    verb = "looks" if len(names) == 1 else "look"
    first = splits[0]
    what, flag = (
        (" (they hold its files)", "--layout tree shards them together")
        if tree
        else (", not its classes (they hold class directories of images)",
              "--layout imagefolder takes them as classes")
    )  # fmt: skip
    return InputError(
        f"{named} {verb} like a dataset's splits{what}: shard each split on its own, as in "
        f"tarkit shard {root.rstrip('/')}/{first} -o '{first}-%06d.tar' ({flag})",
        source=root,
    )
