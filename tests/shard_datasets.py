"""Datasets for the tests of shard_dataset on an engine: importable by Ray workers.

Items are dicts of text of varied lengths (so that ``maxsize`` cuts fall at uneven
places). Behaviour that must differ between attempts is driven by marker files in the
directory ``TARKIT_TEST_MARKS`` names; where a Ray worker runs, the items say which node
read them by leaving a file ``node-<id>`` there.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any


class Words:
    """``length`` items ``{"__key__": "w0007", "txt": …, "cls": 7 % 3}``; each takes
    ``delay`` seconds to read; item ``bad`` raises ValueError; item ``die``, while the
    mark ``<marks>/die`` exists, consumes it and kills its own process (SIGKILL)."""

    def __init__(self, length: int, delay: float = 0.0, bad: int | None = None,
                 die: int | None = None) -> None:  # fmt: skip
        self.length, self.delay, self.bad, self.die = length, delay, bad, die

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, Any]:
        if not 0 <= index < self.length:
            raise IndexError(index)
        _note_node()
        if self.delay:
            time.sleep(self.delay)
        if index == self.bad:
            raise ValueError(f"no words for {index}")
        if index == self.die:
            mark = _marks() / "die"
            try:
                mark.unlink()
            except FileNotFoundError:
                pass
            else:
                os.kill(os.getpid(), signal.SIGKILL)
        text = " ".join(f"word{index}" for _ in range(1 + (index * 37) % 23))
        return {"__key__": f"w{index:04d}", "txt": text, "cls": index % 3}


def slow_words(source: str | None = None) -> Words:
    """For ``tarkit shard --dataset shard_datasets:slow_words``: 120 items, slowly."""
    return Words(120, delay=float(os.environ.get("TARKIT_TEST_DELAY", "0.05")))


def _marks() -> Path:
    return Path(os.environ["TARKIT_TEST_MARKS"])


def _note_node() -> None:
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized() or "TARKIT_TEST_MARKS" not in os.environ:
        return
    (_marks() / f"node-{ray.get_runtime_context().get_node_id()}").touch()


class Chunks:
    """A ``to_sample`` for :class:`Words` items that gives several samples per item:
    item ``i`` gives ``i % 4`` (none for every fourth), keyed ``w0007/0``…, with uneven
    text. Item ``bad`` raises after its first sample; item ``repeat`` gives its first
    sample the key of the last sample before it; ``as_list`` returns lists, not
    generators; ``stop`` ends the run at that item as a crash would."""

    def __init__(self, bad: int | None = None, repeat: int | None = None,
                 as_list: bool = False, stop: int | None = None) -> None:  # fmt: skip
        self.bad, self.repeat, self.as_list, self.stop = bad, repeat, as_list, stop

    def __call__(self, item: dict[str, Any], index: int) -> Any:
        if index == self.stop:
            raise KeyboardInterrupt  # not an item's failure: the run stops here
        samples = self.samples(item, index)
        return list(samples) if self.as_list else samples

    def samples(self, item: dict[str, Any], index: int) -> Any:
        for number in range(index % 4):
            if index == self.bad and number == 1:
                raise ValueError(f"no chunk {number} of item {index}")
            key = f"{item['__key__']}/{number}"
            if index == self.repeat and number == 0:
                key = f"w{index - 1:04d}/{(index - 1) % 4 - 1}"
            yield {"__key__": key, "txt": item["txt"][number::3] or "-", "cls": number}
