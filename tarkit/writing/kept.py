"""The shards a resumed run keeps, and the check that its input still holds them.

``mode="resume"`` keeps the complete shards of an interrupted run and skips the samples
they hold in the input, which must therefore be the input of that run. Each kept shard
is read whole (:func:`kept_shards`): its count, its first and last key and a digest of
all its keys in order. :func:`skip_kept` compares the samples it skips with them, shard
by shard, and raises :class:`~tarkit.errors.UsageError` naming the first shard that
differs and how (an input shorter than the kept shards, other keys), before a single
sample is written. :func:`check_kept_items` does the same for a dataset's items from
the keys of each kept shard's first and last samples, without loading the other items:
where those samples lie in the item order (a :data:`Span` of points: an item may give
several samples, or none) comes from counting (:func:`counted_spans`, for shards whose
items each gave one sample) or from the shard's record
(:mod:`tarkit.writing.shard_records`).

>>> keys_digest(["a", "b"]) == keys_digest(["a", "b"]), keys_digest(["a", "b"]) == keys_digest(["ab"])
(True, False)
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from ..errors import SourceError, UsageError
from ..format.manifest import ShardInfo
from ..format.samples import Sample
from ..storage import StorageOptions
from .items import Point
from .patterns import ShardPattern
from .sample_encoder import key_of

S = TypeVar("S", bound="Sample | Mapping[str, Any]")
Span = tuple[Point, Point]  # where a shard's first and last samples lie in the item order


@dataclass(frozen=True)
class KeptShard:
    """A complete shard a resumed run keeps: its manifest entry (``info``), the keys of
    its first and last samples (None when it has none) and the digest of all its keys
    (None when they were taken from the shard's record, not read)."""

    info: ShardInfo
    first_key: str | None
    last_key: str | None
    keys: str | None


def keys_digest(keys: Iterable[str]) -> str:
    """The digest of ``keys`` in order (each key ends with a NUL, which no key holds)."""
    digest = hashlib.sha256()
    for key in keys:
        digest.update(key.encode("utf-8", "surrogateescape") + b"\0")
    return digest.hexdigest()


def kept_shards(
    pattern: str | ShardPattern, start: int = 0, storage_options: StorageOptions | None = None,
    indexes: bool = False,
) -> list[KeptShard]:  # fmt: skip
    """The complete shards present from number ``start`` on, up to the first missing one.

    Each is read whole (:func:`~tarkit.writing.index.read_shard`) to count its samples,
    hash its bytes and take its keys, and with ``indexes`` to make its index, which is
    put beside it unless the one there has those bytes
    (:func:`~tarkit.writing.indexes.settle_index`); a shard that does not read cleanly
    raises :class:`~tarkit.errors.InputError` (shards appear only when complete, so that
    means something else wrote it).
    """
    names = ShardPattern.of(pattern)
    found: list[KeptShard] = []
    number = start
    while True:
        try:
            found.append(read_kept(names.name(number), storage_options, indexes))
        except SourceError as exc:
            if exc.reason == SourceError.MISSING:
                break
            raise
        number += 1
    return found


def read_kept(
    path: str, storage_options: StorageOptions | None = None, indexes: bool = False
) -> KeptShard:
    """The complete shard at ``path``, read whole (:func:`kept_shards`; with ``indexes``,
    its index settled beside it from the same read); raises
    :class:`~tarkit.errors.SourceError` (reason ``MISSING``) when there is none."""
    from .index import index_shard, read_shard
    from .indexes import index_name, settle_index

    if indexes:
        info, index = read_shard(path, keys=True, strict=True, storage_options=storage_options)
        if index is not None:
            settle_index(path, index_name(path), index, None, storage_options)
    else:
        info = index_shard(path, keys=True, strict=True, storage_options=storage_options)
    keys = info.keys or []
    first, last = (keys[0], keys[-1]) if keys else (None, None)
    return KeptShard(replace(info, keys=None, offsets=None), first, last, keys_digest(keys))


def skip_kept(samples: Iterable[S], kept: list[KeptShard]) -> Iterator[S]:
    """The samples after those the ``kept`` shards hold, once the skipped ones are found
    to be theirs: the same count and keys, shard by shard. Raises
    :class:`~tarkit.errors.UsageError` for the first kept shard they do not match."""
    iterator = iter(samples)
    position = 0
    for shard in kept:
        keys = [str(key_of(sample)) for sample in itertools.islice(iterator, shard.info.samples)]
        if len(keys) < shard.info.samples:
            raise _mismatch(shard, f"the input ends after {position + len(keys)} samples")
        ends = [keys[0], keys[-1]] if keys else [None, None]
        # (a shard known from its record has no digest of its keys: its ends are checked)
        if ends != [shard.first_key, shard.last_key] or shard.keys not in (None, keys_digest(keys)):
            span = f"the input's samples {position} to {position + len(keys) - 1}"
            raise _mismatch(shard, _other_keys(shard, span, keys[0], keys[-1]))
        position += len(keys)
    yield from iterator


def counted_spans(kept: Iterable[KeptShard], positions: Iterable[int]) -> list[Span | None]:
    """Where the samples of ``kept`` shards lie when each of their items gave one sample:
    each shard takes as many of ``positions`` (those of the items not left out, in
    order) as it holds samples. None for a shard the positions run out before.

    >>> counted_spans([], [0, 1, 3])
    []
    """
    walk = iter(positions)
    spans: list[Span | None] = []
    for shard in kept:
        taken = list(itertools.islice(walk, shard.info.samples))
        whole = taken and len(taken) == shard.info.samples
        spans.append(((taken[0], 0), (taken[-1], 0)) if whole else None)
    return spans


def check_kept_items(
    kept: Iterable[KeptShard], spans: Iterable[Span | None],
    key_at: Callable[[Point], str | None], items: int | None,
) -> None:  # fmt: skip
    """Check a dataset's items against the ``kept`` shards by the keys of their first
    and last samples: ``spans`` gives, for each, where those lie in the item order (None:
    the items run out before them); ``key_at(point)`` is the key of the sample there
    (None when its item fails now, or gives fewer samples); ``items`` how many the
    dataset has (None: at least every point's). Raises
    :class:`~tarkit.errors.UsageError` for the first kept shard they do not match."""
    for shard, span in zip(kept, spans, strict=True):
        if span is None and not shard.info.samples:
            continue  # a shard without samples (not one tarkit writes)
        if span is None or (items is not None and span[1][0] >= items):
            raise _mismatch(shard, f"the dataset has only {items} items")
        first, last = key_at(span[0]), key_at(span[1])
        if [first, last] != [shard.first_key, shard.last_key]:
            raise _mismatch(shard, _other_keys(shard, _where(span), first, last))


def _where(span: Span) -> str:
    """Where the samples of ``span`` lie, said for the user.

    >>> _where(((3, 0), (5, 0)))
    "the dataset's items at positions 3 to 5 of its order"
    >>> _where(((3, 2), (5, 0)))
    "the dataset's samples at positions 3 (its sample 2) to 5 (its sample 0) of its order"
    """
    (first, k), (last, j) = span
    if not k and not j:
        return f"the dataset's items at positions {first} to {last} of its order"
    return (f"the dataset's samples at positions {first} (its sample {k}) to {last} (its "
            f"sample {j}) of its order")  # fmt: skip


def _other_keys(shard: KeptShard, span: str, first: str | None, last: str | None) -> str:
    """What differs in the keys of ``span``, whose first and last are ``first``, ``last``."""
    if [first, last] == [shard.first_key, shard.last_key]:
        return f"{span} have the same first and last keys but other keys between"
    shown = " to ".join("an item that fails" if key is None else repr(key) for key in (first, last))
    return f"{span} are {shown}"


def _mismatch(shard: KeptShard, given: str) -> UsageError:
    """The error of a kept shard its input does not match (``given`` says how)."""
    info = shard.info
    held = f"holds {info.samples} sample{'s' * (info.samples != 1)}"
    if shard.first_key is not None:
        held += f", keys {shard.first_key!r} to {shard.last_key!r}"
    return UsageError(
        f"{info.url}: the input is not the one this kept shard was written from: it {held}, "
        f"{given}. --resume (mode='resume') continues a run with the same input; pass "
        "--overwrite (mode='overwrite') to write the set anew from this input"
    )
