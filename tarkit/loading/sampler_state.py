"""A BlockSampler's state: a small dict of JSON types that a checkpoint can hold.

::

    {"format": "tarkit-block-sampler-state", "version": 1,
     "dataset": {"samples": 100000, "blocks": 100, "layout": "9f2c…"},
     "settings": {"seed": 0, "shuffle": true, "window": 8},
     "epoch": 3,
     "history": [{"world": 4, "drop_last": false, "delivered": 800}, …],
     "generation": {"world": 2, "drop_last": false, "rank": 0, "delivered": 96}}

``history`` holds the generations of this epoch that elastic resumes ended (at most
:data:`MAX_GENERATIONS`, so a state stays under a few kilobytes); ``generation`` is the
current one, with what its rank had delivered (ranks move in step, so every rank derives
its own place from that count). :meth:`SamplerState.from_json` checks every type, range
and size before anything is computed from a state, and :meth:`SamplerState.check`
refuses, naming the setting, a state of another dataset or order, with
:class:`~tarkit.errors.UsageError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NoReturn

from ..errors import UsageError
from ..sizes import MAX_COUNT
from .rank_parts import Generation, longest_part, total_after

FORMAT = "tarkit-block-sampler-state"
VERSION = 1
MAX_GENERATIONS = 64  # elastic resumes within one epoch
MAX_WORLD = 1 << 20  # ranks


@dataclass
class SamplerState:
    """A parsed state: the dataset and order it belongs to, and where its epoch stands."""

    samples: int
    blocks: int
    layout: str
    seed: int
    shuffle: bool
    window: int
    epoch: int
    history: list[Generation]
    current: Generation  # the current generation, with this rank's delivered count
    rank: int

    def to_json(self) -> dict[str, Any]:
        """The state as a dict of plain JSON types."""
        return {
            "format": FORMAT,
            "version": VERSION,
            "dataset": {"samples": self.samples, "blocks": self.blocks, "layout": self.layout},
            "settings": {"seed": self.seed, "shuffle": self.shuffle, "window": self.window},
            "epoch": self.epoch,
            "history": [_generation(g) for g in self.history],
            "generation": _generation(self.current) | {"rank": self.rank},
        }

    @classmethod
    def from_json(cls, data: object) -> SamplerState:
        """Parse and validate a state; UsageError naming what is wrong."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise UsageError(f"not a tarkit block sampler state (no 'format': '{FORMAT}')")
        if data.get("version") != VERSION or type(data.get("version")) is not int:
            raise UsageError(f"unsupported block sampler state version {data.get('version')!r}")
        top = _fields(data, "state", {"format", "version", "dataset", "settings", "epoch",
                                      "history", "generation"})  # fmt: skip
        dataset = _fields(top["dataset"], "dataset", {"samples", "blocks", "layout"})
        settings = _fields(top["settings"], "settings", {"seed", "shuffle", "window"})
        layout = dataset["layout"]
        if not isinstance(layout, str) or len(layout) != 16 or layout.strip("0123456789abcdef"):
            _malformed("dataset.layout is not 16 hexadecimal digits")
        samples = _count(dataset["samples"], "dataset.samples", 0, MAX_COUNT)
        history = top["history"]
        if not isinstance(history, list) or len(history) > MAX_GENERATIONS:
            _malformed(f"history is not a list of at most {MAX_GENERATIONS} generations")
        total, parsed = samples, []
        for number, item in enumerate(history):
            parsed.append(_parse_generation(item, f"history[{number}]", total, set()))
            total = total_after(total, parsed[-1:])
        current = top["generation"]
        generation = _parse_generation(current, "generation", total, {"rank"})
        seed = settings["seed"]
        if type(seed) is not int:
            _malformed("settings.seed is not an integer")
        return cls(
            samples=samples,
            blocks=_count(dataset["blocks"], "dataset.blocks", 0, MAX_COUNT),
            layout=layout,
            seed=seed,
            shuffle=_flag(settings["shuffle"], "settings.shuffle"),
            window=_count(settings["window"], "settings.window", 1, MAX_COUNT),
            epoch=_count(top["epoch"], "epoch", 0, MAX_COUNT),
            history=parsed,
            current=generation,
            rank=_count(current["rank"], "generation.rank", 0, generation.world - 1),
        )

    def check(
        self, *, samples: int, blocks: int, layout: str, seed: int, shuffle: bool, window: int
    ) -> None:
        """Refuse a state whose epochs would have another order, naming what differs."""
        if self.samples != samples:
            raise UsageError(
                f"the block sampler state belongs to another dataset: it was taken over "
                f"{self.samples} samples, this dataset has {samples}"
            )
        differences: list[tuple[str, object, object]] = [("shuffle", self.shuffle, shuffle)]
        if shuffle:  # without it, the order is the positions' own
            differences += [("seed", self.seed, seed), ("window", self.window, window)]
        for name, was, now in differences:
            if was != now:
                raise UsageError(
                    f"the block sampler state was taken with {name}={was!r}, this sampler has "
                    f"{name}={now!r}: its orders would differ"
                )
        if shuffle and (self.blocks, self.layout) != (blocks, layout):
            raise UsageError(
                f"the block sampler state was taken over {self.blocks} blocks ({self.layout}), "
                f"this sampler cuts the dataset into {blocks} ({layout}): block_size or the "
                "dataset's shard sizes differ, so its orders would differ"
            )


def _generation(generation: Generation) -> dict[str, Any]:
    return {
        "world": generation.world,
        "drop_last": generation.drop_last,
        "delivered": generation.delivered,
    }


def _parse_generation(item: object, where: str, total: int, extra: set[str]) -> Generation:
    fields = _fields(item, where, {"world", "drop_last", "delivered"} | extra)
    world = _count(fields["world"], f"{where}.world", 1, MAX_WORLD)
    drop_last = _flag(fields["drop_last"], f"{where}.drop_last")
    longest = longest_part(total, world=world, drop_last=drop_last)
    delivered = _count(fields["delivered"], f"{where}.delivered", 0, longest)
    return Generation(world, drop_last, delivered)


def _fields(value: object, where: str, names: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict) or set(value) != names:
        _malformed(f"{where} is not an object with exactly the fields {sorted(names)}")
    return value


def _count(value: object, where: str, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        _malformed(f"{where} is not a whole number from {low} to {high}: {value!r:.40}")
    return value


def _flag(value: object, where: str) -> bool:
    if type(value) is not bool:
        _malformed(f"{where} is not true or false")
    return value


def _malformed(what: str) -> NoReturn:
    raise UsageError(f"malformed tarkit block sampler state: {what}")
