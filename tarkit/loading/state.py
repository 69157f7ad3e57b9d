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
resume within an epoch. :func:`check` refuses, with a :class:`~tarkit.errors.UsageError`
naming the setting, a state that belongs to another dataset or settings.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import UsageError
from ..format.manifest import ShardInfo
from ..storage import location
from .plans import Generation

FORMAT = "tarkit-loader-state"
VERSION = 1


def fingerprint(
    sources: Sequence[tuple[str, Sequence[str], Sequence[ShardInfo] | None]],
) -> str:
    """What identifies a dataset's shards, wherever they are: for each source (one, unless
    mixed) its name, its shards' names in order, and their sample counts when known
    (moving the shards keeps it; renaming one does not)."""
    described = [
        [name, [location(u).basename for u in urls],
         [i.samples for i in infos] if infos is not None else None]
        for name, urls, infos in sources
    ]  # fmt: skip
    text = json.dumps(described, ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:32]


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
    def from_json(cls, data: object) -> LoaderState:
        """Parse a state; UsageError when it is not a tarkit loader state."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise UsageError("not a tarkit loader state (no 'format': 'tarkit-loader-state')")
        if data.get("version") != VERSION:
            raise UsageError(f"unsupported loader state version {data.get('version')!r}")
        try:
            dataset, settings = data["dataset"], data["settings"]
            current = data.get("generation")
            return cls(
                fingerprint=str(dataset["fingerprint"]),
                shards=int(dataset["shards"]),
                samples=None if dataset.get("samples") is None else int(dataset["samples"]),
                seed=int(settings["seed"]),
                shuffle=int(settings["shuffle"]),
                epoch=int(data["epoch"]),
                history=[Generation.from_json(g) for g in data.get("history") or []],
                generation=None if current is None else Generation.from_json(current),
                covers=[] if current is None else [int(w) for w in current.get("covers") or []],
                mixture=settings.get("mixture"),
                split=settings.get("split"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(
                f"malformed tarkit loader state ({type(exc).__name__}: {exc})"
            ) from None

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
