"""Summaries of shards: samples, bytes, fields and their sizes, classes, image sizes, keys.

A :class:`Tally` counts what the samples of a shard show (:func:`tally_shard` reads one)
or what a manifest says of its shards (:meth:`Tally.of_manifest`, reading none). Tallies
merge in shard order, so that shards can be read in other processes; :meth:`Tally.summary`
gives a :class:`DatasetStats`, the plain data that ``tarkit stats`` prints, writes as
JSON (:meth:`DatasetStats.to_json`) and that a viewer can show.

What each figure is:

- a **field** is counted in the samples that have it; its sizes are its bytes' lengths;
- a **class field** is one whose extension is ``cls`` (``cls``, ``label.cls``): its values
  as text are counted, with names from ``classes.json`` when given;
- an **image field** is one whose extension is an image format (``jpg``, ``seg.png``…):
  its width and height come from the image's header (:mod:`tarkit.format.images`),
  without decoding it;
- **duplicate keys** are keys found in more than one shard (inside one shard, a key that
  comes back is an error of the shard, as for every reader).

Per sample the work is small: sizes and class values are read where the reader left the
bytes (:meth:`~tarkit.format.samples.Sample.extents`), and sizes are gathered in lists
that are counted in bulk. Memory is bounded: distributions as
:mod:`~tarkit.stream.distribution` says, a class field's values up to
:data:`LABEL_LIMIT` distinct ones of :data:`LABEL_BYTES` bytes at most, and keys up to
:data:`KEY_LIMIT` (and :data:`KEY_BYTES` characters) for the duplicate check.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

from ..format.archives import archive_members
from ..format.classes import ClassNames, names_for
from ..format.encoding import IMAGE_FORMATS, extension
from ..format.images import image_size
from ..format.manifest import ShardInfo
from ..format.samples import Sample, SkipLog, group_samples
from ..storage import CountingReader, StorageOptions, open_source
from .distribution import Distribution, Spread

LABEL_LIMIT = 100_000  # distinct values a class field may have
LABEL_BYTES = 256  # bytes a class value may have
KEY_LIMIT = 20_000_000  # keys held for the duplicate check
KEY_BYTES = 1 << 30  # characters of the keys held
EXAMPLES = 5  # duplicate keys named
_FOLD = 1 << 16  # samples whose sizes wait in lists before they are counted


@dataclass
class ImageSizes:
    """The sizes of an image field's images: ``images`` whose header gave a size (their
    ``width`` and ``height``), ``unread`` whose did not (a format not read here, such as
    TIFF, or a header that is cut short or malformed)."""

    images: int
    unread: int
    width: Spread | None
    height: Spread | None

    def to_json(self) -> dict[str, object]:
        return {
            "images": self.images,
            "unread": self.unread,
            "width": None if self.width is None else self.width.to_json(),
            "height": None if self.height is None else self.height.to_json(),
        }


@dataclass
class FieldStats:
    """One field: how many samples have it, its sizes in bytes, and for an image field the
    images' sizes."""

    name: str
    samples: int
    size: Spread
    images: ImageSizes | None = None

    def to_json(self) -> dict[str, object]:
        entry: dict[str, object] = {"samples": self.samples, "size": self.size.to_json()}
        if self.images is not None:
            entry["images"] = self.images.to_json()
        return entry


@dataclass
class ClassCount:
    """A value of a class field, its name (from ``classes.json``) and its samples."""

    label: str
    name: str | None
    samples: int


@dataclass
class ClassHistogram:
    """The values of a class field, in label order (numeric when all are integers).
    ``counts`` is empty and ``distinct`` None when it had more than :data:`LABEL_LIMIT`
    distinct values, or one longer than :data:`LABEL_BYTES` (not a class field, then)."""

    field: str
    counts: list[ClassCount]
    distinct: int | None

    def to_json(self) -> dict[str, object]:
        return {
            "distinct": self.distinct,
            "labels": [{"label": c.label, "name": c.name, "samples": c.samples}
                       for c in self.counts],
        }  # fmt: skip


@dataclass
class DatasetStats:
    """The summary of a dataset. ``read`` says whether its shards were read; when not
    (a manifest's figures alone), ``fields`` and ``classes`` are empty, and
    ``duplicate_keys`` is None unless the manifest lists keys. ``keys_checked`` keys went
    into the duplicate check (fewer than ``samples`` past :data:`KEY_LIMIT`)."""

    shards: int
    samples: int
    bytes: int
    read: bool
    samples_per_shard: Spread | None
    bytes_per_shard: Spread | None
    fields: list[FieldStats] = field(default_factory=list)
    classes: list[ClassHistogram] = field(default_factory=list)
    duplicate_keys: int | None = None
    keys_checked: int = 0
    duplicate_examples: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        """The summary as JSON types (what ``tarkit stats --json`` writes)."""

        def spread(value: Spread | None) -> object:
            return None if value is None else value.to_json()

        return {
            "shards": self.shards,
            "samples": self.samples,
            "bytes": self.bytes,
            "read": self.read,
            "samples_per_shard": spread(self.samples_per_shard),
            "bytes_per_shard": spread(self.bytes_per_shard),
            "fields": {f.name: f.to_json() for f in self.fields},
            "classes": {h.field: h.to_json() for h in self.classes},
            "keys": {
                "checked": self.keys_checked,
                "duplicates": self.duplicate_keys,
                "examples": self.duplicate_examples,
            },
        }


class Tally:
    """What shards hold, counted; merges with the tally of the shards after. Picklable."""

    def __init__(self, read: bool = True) -> None:
        self.read = read  # False: a manifest's figures, no shard read
        self.shards = 0
        self.samples = 0
        self.bytes = 0
        self.shard_samples = Distribution()
        self.shard_bytes = Distribution()
        self.field_samples: dict[str, int] = {}
        self.sizes: dict[str, Distribution] = {}
        # a class field's values and their counts (None: too many, or one too long)
        self.labels: dict[str, dict[bytes | None, int] | None] = {}
        self.widths: dict[str, Distribution] = {}
        self.heights: dict[str, Distribution] = {}
        self.unread: dict[str, int] = {}
        self.keys: set[str] | None = set()  # None: not known, or past KEY_LIMIT
        self.keys_checked = 0
        self.key_bytes = 0  # characters of the keys held
        self.duplicates = 0
        self.examples: list[str] = []

    @classmethod
    def of_manifest(cls, shards: Sequence[ShardInfo]) -> Tally:
        """What a manifest says of ``shards``, none read: counts and bytes, and keys when
        it lists them."""
        tally = cls(read=False)
        tally.shards = len(shards)
        tally.samples = sum(info.samples for info in shards)
        tally.bytes = sum(info.bytes for info in shards)
        tally.shard_samples.add_all([info.samples for info in shards])
        tally.shard_bytes.add_all([info.bytes for info in shards])
        for info in shards:
            # Issue 23's per-shard index, when the manifest names one, gives the keys here
            # (and the samples' spans) for a shard whose entry lists none.
            if info.keys is None:
                tally.keys = None  # not known: no duplicate check
                break
            tally.check_keys(info.keys)
        return tally

    def count_shard(self, samples: int, size: int) -> None:
        """Count a shard of ``samples`` samples and ``size`` stored bytes."""
        self.shards += 1
        self.samples += samples
        self.bytes += size
        self.shard_samples.add_all([samples])
        self.shard_bytes.add_all([size])

    def add_samples(self, samples: Iterable[Sample]) -> int:
        """Count the fields, classes, images and keys of ``samples`` (one shard's: their
        keys are not checked against each other); return how many there were."""
        layouts: dict[tuple[str, ...], _Layout] = {}
        last: list[str] | None = None
        sizes: list[list[int]] = []
        labels: list[tuple[int, dict[bytes | None, int]]] = []
        images: list[tuple[int, list[int], list[int]]] = []
        keys: list[str] = []
        size_of = image_size
        count = 0
        # The loop runs once per sample: what it needs is kept in locals.
        for sample in samples:
            fields = sample.fields
            if fields != last:
                layout = layouts.get(tuple(fields)) or self._layout(fields, layouts)
                sizes, labels, images, last = layout.sizes, layout.labels, layout.images, fields
            extents = sample.extents()
            # As long as each other, by the layout's making (strict= costs here).
            for column, extent in zip(sizes, extents, strict=False):
                column.append(extent[2] - extent[1])
            for index, counts in labels:
                buffer, start, stop = extents[index]
                label = buffer[start:stop] if stop - start <= LABEL_BYTES else None
                counts[label] = counts.get(label, 0) + 1
            for index, widths, heights in images:
                buffer, start, stop = extents[index]
                size = size_of(buffer, start, stop)
                if size is None:
                    widths.append(-1)
                else:
                    widths.append(size[0])
                    heights.append(size[1])
            keys.append(sample.key)
            count += 1
            if count % _FOLD == 0:
                self._fold(layouts)
                self.add_keys(keys)
                keys.clear()
                last = None  # a class field may have been dropped from the layouts
        self._fold(layouts)
        self.add_keys(keys)
        return count

    def add_keys(self, keys: Collection[str]) -> None:
        """Hold ``keys`` (of one shard: not checked against each other) for the duplicate
        check, up to :data:`KEY_LIMIT` keys."""
        if self.keys is None:
            return
        self.keys_checked += len(keys)  # checked against the keys held before them
        self.key_bytes += sum(map(len, keys))
        if len(self.keys) + len(keys) > KEY_LIMIT or self.key_bytes > KEY_BYTES:
            self.keys = None  # the check stops here: keys_checked says how far it got
            return
        self.keys.update(keys)

    def _layout(self, fields: list[str], layouts: dict[tuple[str, ...], _Layout]) -> _Layout:
        layout = layouts[tuple(fields)] = _Layout(fields)
        for index, name in enumerate(fields):
            kind = extension(name)
            if kind == "cls":
                counts = self.labels.setdefault(name, {})
                if counts is not None:
                    layout.labels.append((index, counts))
            elif kind in IMAGE_FORMATS:
                layout.images.append((index, [], []))
        return layout

    def _fold(self, layouts: dict[tuple[str, ...], _Layout]) -> None:
        """Count the sizes waiting in ``layouts``' lists, and empty them."""
        for layout in layouts.values():
            for name, column in zip(layout.fields, layout.sizes, strict=True):
                if column:
                    self.field_samples[name] = self.field_samples.get(name, 0) + len(column)
                    self.sizes.setdefault(name, Distribution()).add_all(column)
                    column.clear()
            for index, widths, heights in layout.images:
                name = layout.fields[index]
                unread = widths.count(-1)
                if unread:
                    self.unread[name] = self.unread.get(name, 0) + unread
                    widths[:] = [w for w in widths if w >= 0]
                self.widths.setdefault(name, Distribution()).add_all(widths)
                self.heights.setdefault(name, Distribution()).add_all(heights)
                widths.clear()
                heights.clear()
            for index, counts in layout.labels:
                if len(counts) > LABEL_LIMIT or None in counts:
                    self.labels[layout.fields[index]] = None
            layout.labels = [(i, c) for i, c in layout.labels
                             if self.labels[layout.fields[i]] is not None]  # fmt: skip

    def merge(self, other: Tally) -> None:
        """Add ``other``, the tally of the shards after these."""
        self.read = self.read and other.read
        self.shards += other.shards
        self.samples += other.samples
        self.bytes += other.bytes
        self.shard_samples.merge(other.shard_samples)
        self.shard_bytes.merge(other.shard_bytes)
        for name, n in other.field_samples.items():
            self.field_samples[name] = self.field_samples.get(name, 0) + n
        for mine, theirs in ((self.sizes, other.sizes), (self.widths, other.widths),
                             (self.heights, other.heights)):  # fmt: skip
            for name, distribution in theirs.items():
                mine.setdefault(name, Distribution()).merge(distribution)
        for name, n in other.unread.items():
            self.unread[name] = self.unread.get(name, 0) + n
        for name, counts in other.labels.items():
            self._merge_labels(name, counts)
        self._merge_keys(other)

    def _merge_labels(self, name: str, counts: dict[bytes | None, int] | None) -> None:
        mine = self.labels.setdefault(name, {})
        if mine is None:
            return
        if counts is not None:
            for label, n in counts.items():
                mine[label] = mine.get(label, 0) + n
        if counts is None or len(mine) > LABEL_LIMIT or None in mine:
            self.labels[name] = None

    def _merge_keys(self, other: Tally) -> None:
        if other.keys is None:  # keys not known, or not held: the check stops here
            if self.keys is not None and not self.keys:
                self.keys_checked += other.keys_checked  # nothing before them to check
            self.keys = None
        else:
            self.check_keys(other.keys)

    def check_keys(self, keys: Collection[str]) -> None:
        """Count the keys of ``keys`` (another shard's) already held as duplicates, then
        hold them too (:meth:`add_keys`)."""
        if self.keys is None:
            return
        common = self.keys.intersection(keys)
        if common:
            self.duplicates += len(common)
            room = EXAMPLES - len(self.examples)
            self.examples += sorted(common)[:room] if room > 0 else []
        self.add_keys(keys)

    def summary(self, class_names: ClassNames | None = None) -> DatasetStats:
        """The :class:`DatasetStats` of what was counted; ``class_names`` (what
        ``classes.json`` holds: :mod:`tarkit.format.classes`) names the class values that
        are indices."""
        fields = []
        for name, n in self.field_samples.items():
            size = self.sizes[name].spread()
            assert size is not None
            images = None
            if name in self.widths:
                width, height = self.widths[name].spread(), self.heights[name].spread()
                images = ImageSizes(width.count if width else 0, self.unread.get(name, 0),
                                    width, height)  # fmt: skip
            fields.append(FieldStats(name, n, size, images))
        known = self.read or self.keys_checked > 0
        return DatasetStats(
            shards=self.shards,
            samples=self.samples,
            bytes=self.bytes,
            read=self.read,
            samples_per_shard=self.shard_samples.spread(),
            bytes_per_shard=self.shard_bytes.spread(),
            fields=fields,
            classes=[
                _histogram(name, counts, names_for(name, class_names))
                for name, counts in self.labels.items()
            ],  # fmt: skip
            duplicate_keys=self.duplicates if known else None,
            keys_checked=self.keys_checked,
            duplicate_examples=list(self.examples),
        )


class _Layout:
    """What is counted of the samples with one list of fields: a list of sizes per field
    (counted in bulk by :meth:`Tally._fold`), the class fields' counts, and the image
    fields' widths and heights (-1: no size in the header)."""

    __slots__ = ("fields", "sizes", "labels", "images")

    def __init__(self, fields: list[str]) -> None:
        self.fields = list(fields)
        self.sizes: list[list[int]] = [[] for _ in fields]
        self.labels: list[tuple[int, dict[bytes | None, int]]] = []
        self.images: list[tuple[int, list[int], list[int]]] = []


def _histogram(
    name: str, counts: dict[bytes | None, int] | None, names: list[str] | None
) -> ClassHistogram:
    if counts is None:
        return ClassHistogram(name, [], None)
    merged: dict[str, int] = {}
    for raw, n in counts.items():
        label = (raw or b"").decode("utf-8", "surrogateescape").strip()
        merged[label] = merged.get(label, 0) + n
    try:
        order, numeric = sorted(merged, key=int), True
    except ValueError:
        order, numeric = sorted(merged), False
    result = []
    for label in order:
        index = int(label) if numeric else -1
        known = names is not None and 0 <= index < len(names)
        result.append(ClassCount(label, names[index] if known else None, merged[label]))  # type: ignore[index]
    return ClassHistogram(name, result, len(result))


def tally_shard(
    spec: str,
    *,
    strict: bool = False,
    skips: SkipLog | None = None,
    storage_options: StorageOptions | None = None,
) -> Tally:
    """Read shard ``spec`` (a path, URL, ``pipe:``, or ``-`` for stdin) whole into a
    :class:`Tally`; its bytes are those stored (compressed, for a compressed shard).

    Raises :class:`~tarkit.errors.TarkitError` for a shard that does not read cleanly.
    """
    tally = Tally()
    with open_source(spec, storage_options) as source:
        counted = CountingReader(source.stream)
        members = archive_members(counted, source.name)  # type: ignore[arg-type]
        samples = tally.add_samples(group_samples(members, source.name, strict=strict, skips=skips))
        counted.drain()
    tally.count_shard(samples, counted.size)
    return tally
