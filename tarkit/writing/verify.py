"""Verifying shards: each one read to its end and checked against its manifest entry.

:func:`verify_shards` resolves its sources as ``ShardDataset`` does
(:func:`~tarkit.storage.resolve_shards`: shards, brace patterns, manifests, directories),
reads every shard whole with :func:`~tarkit.writing.index.index_shard` (the strict
reader; the shard's samples, bytes and sha256) and compares what it found with the
shard's manifest entry; a local shard that is part of a set whose commit was stopped
midway (:func:`~tarkit.storage.local_problems`) is bad without being read: the set is a
mix of two runs. A shard that fails is reported and the next one is checked: the
result is one :class:`ShardCheck` per shard, in the order given, however many shards are
read at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from ..errors import InputError, SourceError, TarkitError, UsageError
from ..format.manifest import ShardInfo
from ..format.samples import Sample, SkipLog
from ..sizes import check_parallel
from ..storage import (
    STDIO,
    StorageOptions,
    local_problems,
    location,
    names_shard_set,
    resolve_shards,
)
from .index import index_shard

# Problem.reason: what is wrong with a shard, for code that tells cases apart.
MISSING = "missing"  # no such file or object
UNREADABLE = "unreadable"  # it cannot be opened or read to its end (HTTP error, command…)
TRUNCATED = "truncated"  # it ends too early
CORRUPT = "corrupt"  # it is not a valid stream of samples
KEYS = "keys"  # a sample's key is not the manifest's
SAMPLES = "samples"  # more or fewer samples than the manifest says
OFFSETS = "offsets"  # a sample starts at another byte than the manifest says
BYTES = "bytes"  # another size than the manifest says
SHA256 = "sha256"  # other bytes than the manifest's sha256 says
UNFINISHED = "unfinished"  # part of a set whose commit was stopped midway: a mix of two runs


@dataclass(frozen=True)
class Problem:
    """What is wrong with a shard (``reason``, one of this module's constants), in words
    (``what``), and where: the byte offset in the (uncompressed) tar stream, the member
    and the sample's position in the shard, when known."""

    reason: str
    what: str
    offset: int | None = None
    member: str | None = None
    sample: int | None = None

    def where(self) -> str:
        """``byte 512, member x.jpg, sample 3``: the places known, or ``""``.

        >>> Problem(KEYS, "…", offset=1024, sample=2).where()
        'byte 1024, sample 2'
        """
        places = []
        if self.offset is not None:
            places.append(f"byte {self.offset}")
        if self.member is not None:
            places.append(f"member {self.member}")
        if self.sample is not None:
            places.append(f"sample {self.sample}")
        return ", ".join(places)


@dataclass(frozen=True)
class ShardCheck:
    """What verifying one shard found.

    ``expected`` is its manifest entry (None without a manifest), ``found`` what reading
    it whole gave (None when it could not be read to its end), ``problem`` the first
    thing wrong (None: the shard is good), ``samples_read`` how many samples were read
    whole (before the problem, when reading failed), ``skips`` the members the reader
    left out (as the loader does).
    """

    url: str
    expected: ShardInfo | None
    found: ShardInfo | None
    problem: Problem | None
    samples_read: int
    seconds: float
    skips: SkipLog = field(default_factory=SkipLog, compare=False, repr=False)

    @property
    def ok(self) -> bool:
        return self.problem is None

    def to_json(self) -> dict[str, object]:
        """The check as a JSON object (``tarkit verify --json``): what was found, what
        the manifest says, and the problem with its place."""
        found, expected, problem = self.found, self.expected, self.problem
        entry: dict[str, object] = {
            "url": self.url,
            "ok": self.ok,
            "samples": found.samples if found is not None else None,
            "bytes": found.bytes if found is not None else None,
            "sha256": found.sha256 if found is not None else None,
            "samples_read": self.samples_read,
            "seconds": round(self.seconds, 6),
        }
        if expected is not None:
            entry["expected"] = {
                "samples": expected.samples, "bytes": expected.bytes, "sha256": expected.sha256,
            }  # fmt: skip
        if problem is not None:
            entry["problem"] = {
                "reason": problem.reason, "what": problem.what, "offset": problem.offset,
                "member": problem.member, "sample": problem.sample,
            }  # fmt: skip
        return entry


@dataclass
class Summary:
    """The figures of a verification so far: shards checked, good and bad, the samples
    and bytes of the shards read to their end, and the time since it began."""

    shards: int = 0
    good: int = 0
    bad: int = 0
    samples: int = 0
    bytes: int = 0
    seconds: float = 0.0
    with_manifest: int = 0

    def add(self, check: ShardCheck) -> None:
        self.shards += 1
        self.good += check.ok
        self.bad += not check.ok
        self.with_manifest += check.expected is not None
        if check.found is not None:
            self.samples += check.found.samples
            self.bytes += check.found.bytes

    def to_json(self) -> dict[str, object]:
        return {
            "shards": self.shards, "good": self.good, "bad": self.bad,
            "samples": self.samples, "bytes": self.bytes, "seconds": round(self.seconds, 6),
            "with_manifest": self.with_manifest,
        }  # fmt: skip


class Verification:
    """The shards to check (``shards``: URL and manifest entry, resolved already) and, as
    it is iterated, one :class:`ShardCheck` each, in order; ``summary`` counts them."""

    def __init__(
        self,
        shards: list[tuple[str, ShardInfo | None]],
        *,
        parallel: int = 1,
        strict: bool = False,
        storage_options: StorageOptions | None = None,
    ) -> None:
        self.shards = shards
        self.parallel = check_parallel(parallel)
        self.strict = strict
        self.storage_options = storage_options
        self.summary = Summary()
        problems = local_problems([url for url, _ in shards]).values()
        self.unfinished = {p.spec: p.text() for p in problems if p.what == UNFINISHED}

    def __len__(self) -> int:
        return len(self.shards)

    def __iter__(self) -> Iterator[ShardCheck]:
        started = time.perf_counter()

        def check(shard: tuple[str, ShardInfo | None]) -> ShardCheck:
            url, expected = shard
            if url in self.unfinished:
                return ShardCheck(url, expected, None, Problem(UNFINISHED, self.unfinished[url]),
                                  0, 0.0)  # fmt: skip
            return check_shard(url, expected, strict=self.strict,
                               storage_options=self.storage_options)  # fmt: skip

        for result in in_order(check, self.shards, self.parallel):
            self.summary.add(result)
            self.summary.seconds = time.perf_counter() - started
            yield result


def verify_shards(
    sources: Sequence[str],
    *,
    manifest: str | None = None,
    parallel: int = 1,
    strict: bool = False,
    storage_options: StorageOptions | None = None,
) -> Verification:
    """The :class:`Verification` of the shards ``sources`` name, resolved now.

    Each source is shards (paths, URLs, brace patterns), a manifest or a directory, as
    for ``ShardDataset``; a manifest beside shards that lists exactly them is used, and
    ``manifest`` names one for the shards given (each must be in it). Shards that do not
    exist are not an error here: each is reported as :data:`MISSING` when checked (and
    each of a set whose commit was stopped midway as :data:`UNFINISHED`).
    Raises :class:`~tarkit.errors.UsageError` when nothing is named (or stdin) and
    :class:`~tarkit.errors.InputError` for a malformed manifest. ``parallel`` shards are
    read at once (threads: hashing and reading run outside the GIL).
    """
    if not sources:
        raise UsageError("verify needs shards, a manifest or a directory")
    if any(location(source).kind == STDIO for source in sources):
        raise UsageError("verify needs shard paths or URLs, not stdin")
    shards: list[tuple[str, ShardInfo | None]] = []
    if manifest is not None:
        shards += _resolved(list(sources), manifest, storage_options)
    else:
        run: list[str] = []  # shards named one by one, resolved together (manifest beside)
        for source in [*sources, None]:
            if source is not None and not names_shard_set(source):
                run.append(source)
                continue
            if run:
                shards += _resolved(run, None, storage_options)
                run = []
            if source is not None:
                shards += _resolved(source, None, storage_options)
    return Verification(shards, parallel=parallel, strict=strict, storage_options=storage_options)


def _resolved(
    urls: str | list[str], manifest: str | None, storage_options: StorageOptions | None
) -> list[tuple[str, ShardInfo | None]]:
    found, infos = resolve_shards(urls, manifest, storage_options, missing_ok=True)
    if infos is None:
        return [(url, None) for url in found]
    return list(zip(found, infos, strict=True))


def check_shard(
    url: str,
    expected: ShardInfo | None,
    *,
    strict: bool = False,
    storage_options: StorageOptions | None = None,
) -> ShardCheck:
    """Read shard ``url`` to its end and compare it with ``expected`` (its manifest
    entry, or None). Never raises for a bad or missing shard: the problem is in the
    result."""
    started = time.perf_counter()
    skips = SkipLog()
    read = 0

    def count(sample: Sample) -> None:
        nonlocal read
        read += 1

    listed = expected is not None and (expected.keys is not None or expected.offsets is not None)
    found: ShardInfo | None = None
    problem: Problem | None = None
    try:
        found = index_shard(url, offsets=listed, strict=strict, skips=skips,
                            storage_options=storage_options, on_sample=count)  # fmt: skip
    except InputError as exc:
        reason = TRUNCATED if exc.reason == InputError.TRUNCATED else CORRUPT
        problem = Problem(reason, exc.what, exc.offset, exc.member)
    except SourceError as exc:
        reason = MISSING if exc.reason == SourceError.MISSING else UNREADABLE
        problem = Problem(reason, _unnamed(str(exc), url))
    except TarkitError as exc:
        problem = Problem(UNREADABLE, _unnamed(str(exc), url))
    except OSError as exc:
        problem = Problem(UNREADABLE, f"read failed: {exc.strerror or exc}")
    if found is not None and expected is not None:
        problem = next((p for c in COMPARISONS if (p := c(found, expected)) is not None), None)
    # Issue 23: the shard's index (format/index.py), when there is one, is checked here
    # too: each sample's offset, key and the crc32 of its span against the index's rows,
    # which names the sample whose bytes changed when only the sha256 differs.
    return ShardCheck(url, expected, found, problem, read, time.perf_counter() - started, skips)


def _unnamed(message: str, url: str) -> str:
    """A source error's message without the shard's name in front (the report names it)."""
    return message.removeprefix(f"{url}: ")


def _keys(found: ShardInfo, expected: ShardInfo) -> Problem | None:
    if expected.keys is None or found.keys is None:
        return None
    for position, (key, listed) in enumerate(zip(found.keys, expected.keys, strict=False)):
        if key != listed:
            return Problem(KEYS, f"sample {position} is {key!r}, the manifest says {listed!r}",
                           offset=_offset(found, position), sample=position)  # fmt: skip
    return None


def _samples(found: ShardInfo, expected: ShardInfo) -> Problem | None:
    if found.samples == expected.samples:
        return None
    what = f"the shard has {found.samples} samples, the manifest says {expected.samples}"
    if found.samples > expected.samples:  # where the first sample the manifest lacks is
        position = expected.samples
        return Problem(SAMPLES, what, offset=_offset(found, position), sample=position)
    return Problem(SAMPLES, what)


def _offsets(found: ShardInfo, expected: ShardInfo) -> Problem | None:
    if expected.offsets is None or found.offsets is None:
        return None
    for position, (start, listed) in enumerate(zip(found.offsets, expected.offsets, strict=False)):
        if start != listed:
            return Problem(OFFSETS, f"the sample starts at byte {start}, the manifest says {listed}",
                           offset=start, sample=position)  # fmt: skip
    return None


def _bytes(found: ShardInfo, expected: ShardInfo) -> Problem | None:
    if found.bytes == expected.bytes:
        return None
    return Problem(BYTES, f"the shard is {found.bytes} bytes, the manifest says {expected.bytes}")


def _sha256(found: ShardInfo, expected: ShardInfo) -> Problem | None:
    if expected.sha256 is None or found.sha256 == expected.sha256:
        return None
    # Compared last: the size and the samples are as listed, so bytes changed in place.
    digest = found.sha256 or ""
    return Problem(SHA256, f"sha256 {digest[:16]}… differs from the manifest's "
                           f"{expected.sha256[:16]}… (bytes changed in place)")  # fmt: skip


def _offset(found: ShardInfo, position: int) -> int | None:
    return found.offsets[position] if found.offsets is not None else None


# In this order: the first that finds a problem names it. Keys and offsets first, which
# say where; the sha256 last, which cannot.
COMPARISONS: tuple[Callable[[ShardInfo, ShardInfo], Problem | None], ...] = (
    _keys, _samples, _offsets, _bytes, _sha256,
)  # fmt: skip

T = TypeVar("T")
R = TypeVar("R")


def in_order(function: Callable[[T], R], items: Sequence[T], parallel: int) -> Iterator[R]:
    """``function(item)`` of each item, in order, with up to ``parallel`` running at once
    in threads, at most ``4 × parallel`` results ahead of the consumer. An exception is
    raised when the consumer reaches its item; closing the iterator stops the threads
    from taking more items (one running finishes in the background: they are daemons).
    """
    if parallel == 1 or len(items) < 2:
        yield from map(function, items)
        return
    results: dict[int, tuple[bool, object]] = {}
    ready = threading.Condition()
    taken = given = 0
    stopped = False
    ahead = 4 * parallel

    def work() -> None:
        nonlocal taken
        while True:
            with ready:
                while not stopped and taken < len(items) and taken - given >= ahead:
                    ready.wait()
                if stopped or taken >= len(items):
                    return
                index, taken = taken, taken + 1
            try:
                outcome: tuple[bool, object] = (True, function(items[index]))
            except BaseException as exc:  # raised in the consumer, where it belongs
                outcome = (False, exc)
            with ready:
                results[index] = outcome
                ready.notify_all()

    for number in range(min(parallel, len(items))):
        threading.Thread(target=work, name=f"verify {number}", daemon=True).start()
    try:
        for index in range(len(items)):
            with ready:
                while index not in results:
                    ready.wait()
                done, value = results.pop(index)
                given = index + 1
                ready.notify_all()
            if not done:
                raise value  # type: ignore[misc]
            yield value  # type: ignore[misc]
    finally:
        with ready:
            stopped = True
            ready.notify_all()
