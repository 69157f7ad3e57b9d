"""Picking samples by key or position: read alone where the input is indexed, else found
in the stream. The shell side of random access (``tarcat --keys``, ``tarfirst --key``,
``tarshow --position``/``--key``).

Which inputs are read by random access (:func:`open_picking`):

- **a dataset**, named alone: a manifest (``.json``) or a directory holding
  ``manifest.json``. It is always read by its indexes: a shard without an index is a
  :class:`~tarkit.errors.UsageError` naming the command that builds them (a request for a
  few samples never turns into a read of the whole set), and keys listed that no sample
  has are an error (:func:`listed_samples`);
- **archives** named as files or URLs, each with a tarkit index beside it
  (``<shard>.idx``): read by their indexes with exactly a stream's behaviour (the same
  samples, byte for byte; keys no sample has left out). Archives without indexes, stdin
  and ``pipe:`` are streams, read from their start.

Samples come in the inputs' order whatever the order asked in, as a stream filter gives
them, so that ``tarcat --keys`` over an indexed dataset writes the bytes ``tarcat`` of
every shard piped through the filter would. A sample read by its index is checked against
it (:mod:`~tarkit.storage.indexed_shard`): a shard changed since it was indexed is an
:class:`~tarkit.errors.InputError` with reason ``STALE``, never another sample's bytes.
Damage outside the samples read is not seen (``tarkit verify`` reads shards whole).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, NamedTuple

from ..errors import NotFound, UsageError
from ..format.samples import Sample, SkipLog
from ..storage import StorageOptions, dataset_manifest, display_name, expand_inputs
from .stages import close_iterator, slice_samples

if TYPE_CHECKING:  # imported when inputs are indexed: a start-up cost of every tool else
    from ..storage.indexed_shards import IndexedShards


class Picking(NamedTuple):
    """Inputs read by their indexes: the shards, how messages name them, and whether they
    were named as a dataset (then a shard without an index, or a key listed in vain, is
    an error) or as archives (then the stream's behaviour is kept)."""

    shards: IndexedShards
    name: str
    dataset: bool


def named_dataset(inputs: Sequence[str]) -> str | None:
    """The dataset ``inputs`` name (a manifest, or a directory holding one, named alone:
    :func:`~tarkit.storage.dataset_manifest`), None for archives. Raises
    :class:`~tarkit.errors.UsageError` for a dataset named among other inputs and for a
    directory without ``manifest.json``."""
    datasets = [spec for spec in inputs if dataset_manifest(spec) is not None]
    if not datasets:
        return None
    if len(inputs) > 1:
        raise UsageError(
            f"{datasets[0]}: a dataset (a manifest or its directory) is read alone, not "
            "with other inputs"
        )
    return datasets[0]


def open_picking(
    inputs: Sequence[str],
    *,
    archives: bool = True,
    whole: Sequence[str] = (),
    storage_options: StorageOptions | None = None,
) -> Picking | None:
    """``inputs`` opened for random access (see the module docstring), or None when they
    are read as a stream: archives without indexes, stdin, ``pipe:``, and any archives
    when not ``archives`` (a caller that reads them from their start anyway) or when
    options that read archives whole are given (``whole``: their names, for messages).

    Raises :class:`~tarkit.errors.UsageError` as :func:`named_dataset` does, for a
    dataset with ``whole`` options, and for one that cannot be read by random access
    (compressed shards, no shard listed); and what reading the manifest and the
    indexes' headers raises.
    """
    dataset = named_dataset(inputs)
    if dataset is None and (not archives or whole or not inputs):
        return None
    from ..storage.catalog import indexed_catalog
    from ..storage.indexed_shards import IndexedShards, open_indexed

    if dataset is not None:
        if whole:
            verb = "reads" if len(whole) == 1 else "read"
            raise UsageError(
                f"{' and '.join(whole)} {verb} archives whole, not a dataset by its index "
                f"({dataset})"
            )
        shards = open_indexed(dataset, storage_options=storage_options)
        return Picking(shards, display_name(dataset), dataset=True)
    catalog = indexed_catalog(inputs, storage_options)
    if catalog is None:
        return None
    shards = IndexedShards(catalog, storage_options=storage_options)
    return Picking(shards, describe_inputs(inputs), dataset=False)


def whole_archive_options(**given: bool) -> list[str]:
    """The names of the options given (``ignore_zeros=True`` is ``--ignore-zeros``), for
    :func:`open_picking`'s ``whole``.

    >>> whole_archive_options(ignore_zeros=True, allow_empty=False, mix=True)
    ['--ignore-zeros', '--mix']
    """
    return ["--" + name.replace("_", "-") for name, value in given.items() if value]


def describe_inputs(inputs: Sequence[str]) -> str:
    """How a message names the inputs read: each, or the first and the last of more
    than three.

    >>> describe_inputs(["a.tar", "b.tar"]), describe_inputs(["d-{0..9}.tar"])
    ('a.tar, b.tar', 'd-0.tar … d-9.tar (10 inputs)')
    """
    names = [display_name(spec) for spec in expand_inputs(inputs)]
    if len(names) > 3:
        names = [f"{names[0]} … {names[-1]} ({len(names)} inputs)"]
    return ", ".join(names)


def listed_samples(
    picking: Picking,
    keys: Sequence[str],
    *,
    missing_ok: bool = False,
    skips: SkipLog | None = None,
    strict: bool = False,
) -> Iterator[Sample]:
    """The samples whose key is one of ``keys``, in the inputs' order, each read alone.

    The indexes are looked through first, so that for a dataset keys that no sample
    has raise :class:`~tarkit.errors.NotFound` (naming the first of them in ``keys``'
    order, and how many) before any sample is read, unless ``missing_ok``; archives
    leave them out, as a stream filter does. Skipped members and ``strict`` as
    :meth:`~tarkit.storage.indexed_shard.IndexedShard.sample` says.
    """
    shards = picking.shards
    positions = list(shards.positions(keys))
    if picking.dataset and not missing_ok:
        found = {shards.key(position) for position in positions}
        missing = [key for key in keys if key not in found]
        if missing:
            which = f"({missing[0]!r})" if len(missing) == 1 else f"(the first: {missing[0]!r})"
            raise NotFound(
                f"{picking.name}: no sample has {len(missing)} of the {len(keys)} keys listed "
                f"{which}; --allow-missing leaves such keys out"
            )
    return shards.samples(positions, skips=skips, strict=strict)


def sample_with_key(
    picking: Picking, key: str, *, skips: SkipLog | None = None, strict: bool = False
) -> Sample:
    """The first sample with ``key``: its shards' indexes looked through in order up to
    it, then it alone read. Raises :class:`~tarkit.errors.NotFound` when none has it."""
    shards = picking.shards
    position = next(shards.positions((key,)), None)
    if position is None:
        raise NotFound(
            f"{picking.name}: no sample has the key {key!r} ({len(shards)} samples, looked "
            "up in their indexes)"
        )
    return shards.read(position, skips=skips, strict=strict)[0]


def sample_at(
    picking: Picking, position: int, *, skips: SkipLog | None = None, strict: bool = False
) -> Sample:
    """Sample ``position`` (negative from the end), read alone. Raises
    :class:`~tarkit.errors.NotFound` when there is no such sample."""
    shards = picking.shards
    try:
        position = shards.position(position)
    except IndexError:
        raise NotFound(f"{picking.name}: no sample {position} ({len(shards)} samples)") from None
    return shards.read(position, skips=skips, strict=strict)[0]


def pick_from_stream(
    samples: Iterator[Sample], name: str, *, position: int | None = None, key: str | None = None
) -> Sample:
    """Sample ``position`` (negative from the end: the stream is then read to its end,
    holding that many samples) or the first with ``key``, found in the stream ``samples``
    named ``name``; reading stops there. Raises :class:`~tarkit.errors.NotFound` when the
    stream ends without it, and what reading raises.
    """
    count = 0

    def counted() -> Iterator[Sample]:
        nonlocal count
        for sample in samples:
            count += 1
            yield sample

    if position is not None:
        picked = slice_samples(counted(), slice(position, None if position == -1 else position + 1))
    else:
        picked = (sample for sample in counted() if sample.key == key)
    try:
        found = next(picked, None)
    finally:
        close_iterator(picked)
        close_iterator(samples)
    if found is None:
        noun = "sample" if count == 1 else "samples"
        what = f"no sample {position}" if key is None else f"no sample has the key {key!r}"
        raise NotFound(f"{name}: {what} ({count} {noun} read)")
    return found
