"""The loader's state: a small dict of JSON types that a checkpoint can hold.

One format serves a whole rank (:meth:`ShardLoader.state_dict`, all its DataLoader
workers) and a single worker (:meth:`ShardDataset.state_dict` inside a worker, as
torchdata's ``StatefulDataLoader`` asks for it)::

    {"format": "tarkit-loader-state", "version": 1,
     "dataset": {"fingerprint": "…", "shards": 200, "samples": 100000},
     "settings": {"seed": 0, "shuffle": 1000},   # and "mixture", "split" when set
     "epoch": 3,
     "history": [<generation>, …],   # earlier topologies of this epoch (elastic resumes)
     "generation": {"topology": {"world": 2, "workers": 4, "batch_size": 64, …},
                    "delivered": 120, "rank": 0, "last_worker": 3,
                    "covers": [0, 1, 2, 3],
                    "workers": [[taken, read, items, ended, lost], …]}}

Its size does not grow with the shuffle buffer (a buffer's contents are recomputed from
positions) nor with the number of samples; it grows by one generation per elastic
resume within an epoch. A state may come from anyone, so :meth:`LoaderState.from_json`
checks every part's type and range (the bounds below) before any loop's length comes from
it, and :meth:`LoaderState.check` refuses a state that belongs to another dataset or
settings; both with a :class:`~tarkit.errors.UsageError` naming the part or the setting.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, NoReturn

from ..errors import UsageError
from ..format.manifest import ShardInfo
from ..format.shard_names import numbered_names
from ..format.shard_table import ShardEntries
from ..sizes import MAX_COUNT
from ..storage import location
from ..storage.manifests import ShardUrls
from .epoch_layout import Generation, Topology, WorkerPosition

FORMAT = "tarkit-loader-state"
VERSION = 1

# Bounds on a loaded state, far above any real job's: a state may come from anywhere (a
# checkpoint someone shared), and a resume loops over the ranks and workers of each of
# its generations, so none of those counts is taken unchecked.
MAX_WORLD = 1 << 16  # ranks
MAX_WORKERS = 1 << 10  # DataLoader workers per rank
MAX_SPLITS = 1 << 16  # ranks x workers, summed over the generations of a state
MIXED_SPLITS = 1 << 12  # the same for a mixture: each split draws a schedule (ms each)
MAX_GENERATIONS = 64  # elastic resumes within one epoch
MAX_SPANS = 1 << 20  # spans of samples lost to bad shards, per worker


def fingerprint(
    sources: Sequence[tuple[str, Sequence[str], Sequence[ShardInfo] | None]],
) -> str:
    """What identifies a dataset's shards, wherever they are: for each source (one, unless
    mixed) its name, its shards' names in order, and their sample counts when known
    (moving the shards keeps it; renaming one does not). The SHA-256 of
    ``[[name, [basename, …], [samples, …] or null], …]`` as JSON, hashed a few thousand
    shards at a time (a million shards' names and counts are never all made at once).

    >>> fingerprint([("", ["/d/a.tar", "/e/b.tar"], None)])
    '4d55ac51abf3e06f3f296a87d3ec829a'
    """
    digest = hashlib.sha256(b"[")
    for number, (name, urls, infos) in enumerate(sources):
        digest.update(f"{', ' if number else ''}[{json.dumps(name)}, ".encode("ascii"))
        _hash_list(digest, _basenames(urls))
        digest.update(b", ")
        if infos is None:
            digest.update(b"null")
        else:
            counts = infos.table.samples_column() if isinstance(infos, ShardEntries) else None
            _hash_list(digest, iter(counts) if counts is not None else (i.samples for i in infos))
        digest.update(b"]")
    digest.update(b"]")
    return digest.hexdigest()[:32]


def _basenames(urls: Sequence[str]) -> Iterator[str]:
    """The file names of ``urls`` in order (made from their pattern, when they are one)."""
    if isinstance(urls, ShardUrls) and (pattern := urls.pattern) is not None:
        tail, first = pattern.rpartition("/")[2], urls.names.first
        if not set("?#") & set(tail) and location(urls[0]).basename == tail % first:
            return (
                name
                for start in range(first, first + len(urls), _HASHED)
                for name in numbered_names(tail, start, min(start + _HASHED, first + len(urls)))
            )
    return (location(u).basename for u in urls)


_HASHED = 4096  # items of a list made and hashed at a time


def _hash_list(digest: Any, items: Iterator[Any]) -> None:
    """Update ``digest`` with the JSON list of ``items``, a few thousand at a time."""
    digest.update(b"[")
    separator = ""
    while chunk := list(islice(items, _HASHED)):
        digest.update((separator + json.dumps(chunk, ensure_ascii=True)[1:-1]).encode("ascii"))
        separator = ", "
    digest.update(b"]")


def count_bound(samples: int | None, epoch_samples: int | None = None) -> int:
    """The most samples or items any count in a state of a dataset of ``samples`` samples
    (None: not known) and ``epoch_samples`` (a mixture's epoch) may say: an epoch, plus
    one per split for what rounding and equal batches add.

    >>> count_bound(100), count_bound(None) == MAX_COUNT
    (65636, True)
    """
    if samples is None and epoch_samples is None:
        return MAX_COUNT
    return max(samples or 0, epoch_samples or 0) + MAX_SPLITS


@dataclass
class LoaderState:
    """A parsed state: which epoch, its earlier generations, and the current one."""

    fingerprint: str
    shards: int
    samples: int | None
    seed: int
    shuffle: int
    epoch: int
    history: list[Generation] = field(default_factory=list)
    generation: Generation | None = None
    covers: list[int] = field(default_factory=list)
    mixture: dict[str, Any] | None = None  # {"weights": {name: w}, "epoch_samples": n}
    split: dict[str, Any] | None = None  # KeySplit.to_json(): fraction, seed, invert

    def to_json(self) -> dict[str, Any]:
        """The state as a dict of plain JSON types."""
        current: dict[str, Any] | None = None
        if self.generation is not None:
            current = self.generation.to_json()
            current["covers"] = list(self.covers)
        return {
            "format": FORMAT,
            "version": VERSION,
            "dataset": {
                "fingerprint": self.fingerprint,
                "shards": self.shards,
                "samples": self.samples,
            },
            "settings": {"seed": self.seed, "shuffle": self.shuffle}
            | ({"mixture": self.mixture} if self.mixture is not None else {})
            | ({"split": self.split} if self.split is not None else {}),
            "epoch": self.epoch,
            "history": [g.to_json() for g in self.history],
            "generation": current,
        }

    @classmethod
    def from_json(cls, data: object, like: LoaderState | None = None) -> LoaderState:
        """Parse and check a state for a dataset whose fresh state is ``like``; UsageError
        naming what is wrong when it is not a tarkit loader state, or holds a value out of
        its bounds: a count of samples or items beyond what the dataset can hold
        (:func:`count_bound`), generations whose ranks x workers add up to more than
        :data:`MAX_SPLITS` (:data:`MIXED_SPLITS` for a mixture), more ranks, workers or
        generations than the bounds of this module allow."""
        mixture = like.mixture if like is not None else None
        most = (
            count_bound(like.samples, (mixture or {}).get("epoch_samples")) if like else MAX_COUNT
        )
        splits = MAX_SPLITS if mixture is None else MIXED_SPLITS
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise UsageError("not a tarkit loader state (no 'format': 'tarkit-loader-state')")
        if data.get("version") != VERSION:
            raise UsageError(f"unsupported loader state version {data.get('version')!r}")
        read = _Reader(most)
        dataset, settings = read.mapping(data, "dataset"), read.mapping(data, "settings")
        samples = dataset.get("samples")
        history = read.sequence(data.get("history") or [], "history", MAX_GENERATIONS)
        generations = [read.generation(g, f"history[{i}]") for i, g in enumerate(history)]
        current = data.get("generation")
        generation, covers = None, []
        if current is not None:
            generation = read.generation(current, "generation")
            covers = read.covers(current.get("covers"), generation)
        ways = sum(g.topology.world * g.topology.workers
                   for g in [*generations, *([generation] if generation else [])])  # fmt: skip
        if ways > splits:
            read.refuse(f"its generations split the epoch {ways} ways (ranks x workers), "
                        f"more than {splits}")  # fmt: skip
        mixture = settings.get("mixture")
        if mixture is not None and not isinstance(mixture, dict):
            read.refuse("settings.mixture is not a dict")
        split = settings.get("split")
        if split is not None and not isinstance(split, dict):
            read.refuse("settings.split is not a dict")
        return cls(
            fingerprint=str(read.field(dataset, "fingerprint", "dataset")),
            shards=read.whole(read.field(dataset, "shards", "dataset"), "dataset.shards"),
            samples=None if samples is None else read.whole(samples, "dataset.samples"),
            seed=read.integer(read.field(settings, "seed", "settings"), "settings.seed"),
            shuffle=read.whole(read.field(settings, "shuffle", "settings"), "settings.shuffle"),
            epoch=read.whole(read.field(data, "epoch", ""), "epoch"),
            history=generations,
            generation=generation,
            covers=covers,
            mixture=mixture,
            split=split,
        )

    def check(self, expected: LoaderState) -> None:
        """Refuse a state of another dataset or of other settings than ``expected`` (the
        state a fresh pass of the dataset would have), naming what differs."""
        shards, fingerprint = expected.shards, expected.fingerprint
        if self.shards != shards or self.fingerprint != fingerprint:
            raise UsageError(
                f"the loader state belongs to another dataset: it was taken over {self.shards} "
                f"shards with fingerprint {self.fingerprint}, this dataset has {shards} shards "
                f"with fingerprint {fingerprint} (the shards' names or sample counts differ)"
            )
        for name, was, now in (
            ("seed", self.seed, expected.seed),
            ("shuffle", self.shuffle, expected.shuffle),
        ):
            if was != now:
                raise UsageError(
                    f"the loader state was taken with {name}={was}, this dataset has "
                    f"{name}={now}: its orders would differ"
                )
        was_mixed, now_mixed = self.mixture or {}, expected.mixture or {}
        for name in ("weights", "epoch_samples"):
            if was_mixed.get(name) != now_mixed.get(name):
                raise UsageError(
                    f"the loader state was taken with {name}={was_mixed.get(name)!r}, this "
                    f"dataset has {name}={now_mixed.get(name)!r}: its mixture would differ"
                )
        if self.split != expected.split:
            raise UsageError(
                f"the loader state was taken with split={_shown(self.split)}, this dataset "
                f"has split={_shown(expected.split)}: it reads other samples"
            )


def _shown(split: Any) -> str:
    """A recorded split as the call that makes it."""
    if not isinstance(split, dict):
        return repr(split)
    return "KeySplit(" + ", ".join(f"{name}={value!r}" for name, value in split.items()) + ")"


class _Reader:
    """Reads the parts of a state, refusing with a UsageError that names the part (``where``)."""

    def __init__(self, most: int) -> None:
        self.most = most  # the most samples or items any count may say

    def refuse(self, what: str) -> NoReturn:
        raise UsageError(f"malformed tarkit loader state: {what}")

    def field(self, data: dict[str, Any], name: str, where: str) -> Any:
        if name not in data:
            self.refuse(f"{where + '.' if where else ''}{name} is missing")
        return data[name]

    def mapping(self, data: dict[str, Any], name: str) -> dict[str, Any]:
        value = self.field(data, name, "")
        if not isinstance(value, dict):
            self.refuse(f"{name} is not a dict")
        return value

    def sequence(self, value: object, where: str, most: int) -> list[Any]:
        if not isinstance(value, list):
            self.refuse(f"{where} is not a list")
        if len(value) > most:
            self.refuse(f"{where} has {len(value)} entries, more than {most}")
        return value

    def integer(self, value: object, where: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.refuse(f"{where} is {value!r}, not a whole number")
        return value

    def whole(self, value: object, where: str, least: int = 0, most: int = MAX_COUNT) -> int:
        """``value``, a whole number from ``least`` up to ``most``."""
        number = self.integer(value, where)
        if number < least:
            self.refuse(f"{where} is {number}, less than {least}")
        if number > most:
            self.refuse(f"{where} is {number}, more than {most}")
        return number

    def count(self, value: object, where: str) -> int:
        """A count of samples or items: at most what the dataset can hold."""
        return self.whole(value, where, most=self.most)

    def flag(self, value: object, where: str) -> bool:
        if value not in (True, False, 0, 1):
            self.refuse(f"{where} is {value!r}, not true or false")
        return bool(value)

    def topology(self, data: object, where: str) -> Topology:
        if not isinstance(data, dict):
            self.refuse(f"{where} is not a dict")
        batch = self.field(data, "batch_size", where)
        return Topology(
            self.whole(self.field(data, "world", where), f"{where}.world", 1, MAX_WORLD),
            self.whole(self.field(data, "workers", where), f"{where}.workers", 1, MAX_WORKERS),
            None if batch is None else self.whole(batch, f"{where}.batch_size", 1),
            self.flag(self.field(data, "drop_last", where), f"{where}.drop_last"),
            self.flag(self.field(data, "equal_batches", where), f"{where}.equal_batches"),
        )

    def spans(self, value: object, where: str) -> list[tuple[int, int]]:
        found = []
        for i, span in enumerate(self.sequence(value, where, MAX_SPANS)):
            if not isinstance(span, list) or len(span) != 2:
                self.refuse(f"{where}[{i}] is not a span [start, end]")
            start = self.count(span[0], f"{where}[{i}][0]")
            end = self.count(span[1], f"{where}[{i}][1]")
            if end < start:
                self.refuse(f"{where}[{i}] ends at {end}, before its start {start}")
            found.append((start, end))
        return found

    def position(self, data: object, where: str) -> WorkerPosition:
        """A worker's position: ``[taken, read, items, ended, lost, (parts)]``."""
        if not isinstance(data, list) or len(data) not in (5, 6):
            self.refuse(f"{where} is not a worker position [taken, read, items, ended, lost]")
        taken, read = self.count(data[0], f"{where}[0]"), self.count(data[1], f"{where}[1]")
        if taken > read:
            self.refuse(f"{where} took {taken} samples out of its shuffle but read only {read}")
        parts = []
        if len(data) == 6:
            for i, part in enumerate(self.sequence(data[5], f"{where}[5]", MAX_WORKERS)):
                parts.append(self.spans(part, f"{where}[5][{i}]"))
        return WorkerPosition(
            taken, read, self.count(data[2], f"{where}[2]"), self.flag(data[3], f"{where}[3]"),
            self.spans(data[4], f"{where}[4]"), parts,
        )  # fmt: skip

    def generation(self, data: object, where: str) -> Generation:
        if not isinstance(data, dict):
            self.refuse(f"{where} is not a dict")
        topology = self.topology(self.field(data, "topology", where), f"{where}.topology")
        rank = self.whole(self.field(data, "rank", where), f"{where}.rank", 0, topology.world - 1)
        last = data.get("last_worker")
        if last is not None:
            last = self.whole(last, f"{where}.last_worker", 0, topology.workers - 1)
        workers = data.get("workers")
        positions = None
        if workers is not None:
            listed = self.sequence(workers, f"{where}.workers", topology.workers)
            positions = [self.position(w, f"{where}.workers[{i}]") for i, w in enumerate(listed)]
            if where != "generation" and len(positions) != topology.workers:
                self.refuse(f"{where}.workers has {len(positions)} positions for "
                            f"{topology.workers} workers")  # fmt: skip
        delivered = self.count(self.field(data, "delivered", where), f"{where}.delivered")
        return Generation(topology, delivered, rank, positions, last)

    def covers(self, value: object, generation: Generation) -> list[int]:
        """The workers whose positions the current generation holds, in order."""
        workers = generation.topology.workers
        listed = self.sequence(value or [], "generation.covers", workers)
        covers = [self.whole(w, f"generation.covers[{i}]", 0, workers - 1)
                  for i, w in enumerate(listed)]  # fmt: skip
        if len(set(covers)) != len(covers):
            self.refuse("generation.covers names a worker twice")
        if generation.workers is not None and len(generation.workers) != len(covers):
            self.refuse(f"generation holds {len(generation.workers)} positions for "
                        f"{len(covers)} covered workers")  # fmt: skip
        return covers
