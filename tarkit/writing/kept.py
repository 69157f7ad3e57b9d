"""The shards a resumed run keeps, and the check that its input still holds them.

``mode="resume"`` keeps the complete shards of an interrupted run and skips the samples
they hold in the input, which must therefore be the input of that run. Each kept shard
is read whole (:func:`kept_shards`): its count, its first and last key and a digest of
all its keys in order. :func:`skip_kept` compares the samples it skips with them, shard
by shard, and raises :class:`~tarkit.errors.UsageError` naming the first shard that
differs and how (an input shorter than the kept shards, other keys), before a single
sample is written. :func:`check_kept_items` does the same for a dataset's items from
their keys alone (the first and last item of each kept shard), without loading the others.

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
from .patterns import shard_name
from .sample_encoder import key_of

S = TypeVar("S", bound="Sample | Mapping[str, Any]")


@dataclass(frozen=True)
class KeptShard:
    """A complete shard a resumed run keeps: its manifest entry (``info``), the keys of
    its first and last samples (None when it has none) and the digest of all its keys."""

    info: ShardInfo
    first_key: str | None
    last_key: str | None
    keys: str


def keys_digest(keys: Iterable[str]) -> str:
    """The digest of ``keys`` in order (each key ends with a NUL, which no key holds)."""
    digest = hashlib.sha256()
    for key in keys:
        digest.update(key.encode("utf-8", "surrogateescape") + b"\0")
    return digest.hexdigest()


def kept_shards(
    pattern: str, start: int = 0, storage_options: StorageOptions | None = None,
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
    from .index import index_shard, read_shard
    from .indexes import index_name, settle_index

    found: list[KeptShard] = []
    number = start
    while True:
        path = shard_name(pattern, number)
        try:
            if indexes:
                info, index = read_shard(path, keys=True, strict=True,
                                         storage_options=storage_options)  # fmt: skip
            else:
                info, index = index_shard(path, keys=True, strict=True,
                                          storage_options=storage_options), None  # fmt: skip
        except SourceError as exc:
            if exc.reason == SourceError.MISSING:
                break
            raise
        if index is not None:
            settle_index(path, index_name(path), index, None, storage_options)
        keys = info.keys or []
        first, last = (keys[0], keys[-1]) if keys else (None, None)
        found.append(KeptShard(replace(info, keys=None, offsets=None), first, last,
                               keys_digest(keys)))  # fmt: skip
        number += 1
    return found


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
        if keys_digest(keys) != shard.keys:
            span = f"the input's samples {position} to {position + len(keys) - 1}"
            raise _mismatch(shard, _other_keys(shard, span, keys[0], keys[-1]))
        position += len(keys)
    yield from iterator


def check_kept_items(
    kept: list[KeptShard], positions: Iterable[int], key_at: Callable[[int], str | None],
    items: int | None,
) -> None:  # fmt: skip
    """Check a dataset's items against the ``kept`` shards by their first and last keys:
    ``positions`` are those of the kept samples in the item order, in order;
    ``key_at(position)`` is the key of the item there (None when it fails now);
    ``items`` how many the dataset has (None: at least every position). Raises
    :class:`~tarkit.errors.UsageError` for the first kept shard they do not match."""
    walk = iter(positions)
    for shard in kept:
        taken = list(itertools.islice(walk, shard.info.samples))
        if not taken and not shard.info.samples:
            continue  # a shard without samples (not one tarkit writes)
        if len(taken) < shard.info.samples or (items is not None and taken[-1] >= items):
            raise _mismatch(shard, f"the dataset has only {items} items")
        first, last = key_at(taken[0]), key_at(taken[-1])
        if [first, last] != [shard.first_key, shard.last_key]:
            span = f"the dataset's items at positions {taken[0]} to {taken[-1]} of its order"
            raise _mismatch(shard, _other_keys(shard, span, first, last))


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
