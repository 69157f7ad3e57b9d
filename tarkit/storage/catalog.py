"""Which indexed shards a random-access dataset reads, and where their indexes are.

A :class:`Catalog` is what random access (:mod:`~tarkit.storage.indexed_shards`: the
shell tools and ``tarkit.IndexedDataset``) keeps of its source whatever its size: the
shard names (a pattern when they are one), the cumulative sample counts (8 bytes a shard:
a position's shard by bisection), where each shard's index lies, and, for the shard cache
only, each shard's size and SHA-256 from the manifest. Made once by :func:`open_catalog`:

- a manifest (version 1 or 2, ``.json``) or a directory holding ``manifest.json``: its
  table, read in bounded memory; the indexes where its ``"index"`` pattern says, else
  beside each shard (``<shard>.idx``, the writers' convention);
- a brace pattern or a list of shard URLs: the indexes beside them, each one's
  64-byte header read now for its sample count.

:func:`indexed_catalog` is the second form for shards that may have no index: None when
one has none, so that a caller reads them whole instead.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Sequence
from itertools import accumulate

from ..errors import SourceError, UsageError
from ..format.compression import compression_for
from ..format.index import HEADER_SIZE, MAGIC, SUFFIX, index_header
from ..format.shard_names import ShardNames
from ..format.shard_table import ShardTable
from .filesystems import StorageOptions
from .locations import expand_inputs, location, resolve_url
from .manifests import load_table
from .ranges import open_ranges
from .shards import BUILD_INDEX, dataset_manifest


class Catalog:
    """The shards of a random-access dataset (see the module docstring).

    ``names`` as a manifest gives them (resolved against ``base``, its location, or as
    given when None); ``starts`` the cumulative sample counts (S + 1 numbers);
    ``index_pattern`` the manifest's pattern of index files (formatted with a shard's
    number), None for ``<shard>.idx``; ``table`` the manifest's, for the sizes and
    digests the shard cache checks (None without a manifest, or when dropped to pickle
    lightly: :meth:`light`).
    """

    def __init__(
        self,
        names: ShardNames,
        starts: array,
        *,
        base: str | None = None,
        index_pattern: str | None = None,
        table: ShardTable | None = None,
    ) -> None:
        self.names = names
        self.starts = starts
        self.base = base
        self.index_pattern = index_pattern
        self.table = table

    def __len__(self) -> int:
        return len(self.names)

    @property
    def samples(self) -> int:
        return int(self.starts[-1])

    def shard_samples(self, shard: int) -> int:
        return int(self.starts[shard + 1] - self.starts[shard])

    def locate(self, position: int) -> tuple[int, int]:
        """(shard, position in it) of dataset position ``position`` (0 ≤ it < samples)."""
        shard = bisect_right(self.starts, position) - 1
        return shard, position - self.starts[shard]

    def url(self, shard: int) -> str:
        """Where shard ``shard`` is."""
        return resolve_url(self.base, self.names[shard], f"shard {shard}")

    def index_url(self, shard: int) -> str:
        """Where the index of shard ``shard`` is."""
        if self.index_pattern is None:
            return self.url(shard) + SUFFIX
        named = self.index_pattern % self.names.number(shard)
        return resolve_url(self.base, named, f"the index of shard {shard}")

    def expected(self, shard: int) -> tuple[int | None, str | None]:
        """The manifest's size and SHA-256 (hex) of shard ``shard``, None when unknown."""
        if self.table is None:
            return None, None
        return self.table.shard_bytes(shard), self.table.shard_sha256(shard)

    def light(self) -> Catalog:
        """This catalog without the manifest's table (what a worker that does not cache
        shards needs: the counts and names only)."""
        return Catalog(self.names, self.starts, base=self.base, index_pattern=self.index_pattern)


def open_catalog(
    source: str | Sequence[str], storage_options: StorageOptions | None = None
) -> Catalog:
    """The catalog of ``source`` (see the module docstring).

    Raises :class:`~tarkit.errors.UsageError` for a source that names no shard, a
    compressed shard, or a listed shard without its index (naming the command that
    builds one); :class:`~tarkit.errors.InputError` and
    :class:`~tarkit.errors.SourceError` for a manifest or index that cannot be read.
    """
    if isinstance(source, str):
        manifest = dataset_manifest(source)
        if manifest is not None:
            return _from_manifest(manifest, storage_options)
        urls = expand_inputs([source])
    else:
        urls = expand_inputs(list(source))
    if not urls or urls == ["-"]:
        raise UsageError("random access needs shard URLs, a manifest or its directory")
    for url in urls:
        refuse_compressed(url)
    counts = [_index_samples(url, storage_options) for url in urls]
    return Catalog(ShardNames.of(urls), array("q", accumulate(counts, initial=0)))


def indexed_catalog(
    urls: Sequence[str], storage_options: StorageOptions | None = None
) -> Catalog | None:
    """The catalog of the shards ``urls`` (brace patterns expanded) when every one can be
    read by random access: a file or a URL, uncompressed by its name, with a tarkit index
    beside it (``<shard>.idx``, its header read now); None as soon as one cannot (no
    index, or a file there that is not a tarkit index, as DALI's ``wds2idx`` writes), so
    that the caller reads them whole. Raises as :func:`open_catalog` for a tarkit index
    that is there but malformed or of another version.
    """
    counts = []
    expanded = expand_inputs(list(urls))
    for url in expanded:
        where = location(url)
        if not (where.is_file or where.remote) or compression_for(url) is not None:
            return None
        header = _index_header(url, storage_options)
        if header is None or not header.startswith(MAGIC):
            return None
        counts.append(index_header(header, url + SUFFIX)[0])
    if not counts:
        return None
    return Catalog(ShardNames.of(expanded), array("q", accumulate(counts, initial=0)))


def _from_manifest(manifest: str, storage_options: StorageOptions | None) -> Catalog:
    table = load_table(manifest, storage_options)
    if not len(table):
        raise UsageError(f"{manifest}: the manifest lists no shards")
    if table.names.pattern is not None:
        refuse_compressed(table.names.pattern)
    return Catalog(table.names, table.starts, base=manifest, index_pattern=table.index,
                   table=table)  # fmt: skip


def refuse_compressed(url: str) -> None:
    """Raise :class:`~tarkit.errors.UsageError` naming a compressed shard."""
    kind = compression_for(url)
    if kind is not None:
        raise UsageError(
            f"{url}: random access into {kind} is not possible: a compressed shard is read "
            "from its start only (keep random-access shards uncompressed: tarcat it to a "
            ".tar and index that)"
        )


def missing_index(url: str, index: str) -> UsageError:
    """The refusal of a shard without its index."""
    return UsageError(
        f"{url}: no shard index ({index} does not exist): random access needs one; "
        f"build the indexes with {BUILD_INDEX}"
    )


def _index_samples(url: str, storage_options: StorageOptions | None) -> int:
    """The sample count in the header of the index beside the listed shard ``url``."""
    header = _index_header(url, storage_options)
    if header is None:
        raise missing_index(url, url + SUFFIX)
    return index_header(header, url + SUFFIX)[0]


def _index_header(url: str, storage_options: StorageOptions | None) -> bytes | None:
    """The first bytes of the index beside ``url`` (its header when it is one); None
    when there is no such file."""
    try:
        source = open_ranges(url + SUFFIX, storage_options)
        try:
            return source.read(0, HEADER_SIZE)
        finally:
            source.close()
    except SourceError as exc:
        if exc.reason == SourceError.MISSING:
            return None
        raise
