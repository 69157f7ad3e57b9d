"""The per-sample stages of the loader: webdataset's ``decode``, ``to_tuple`` and ``map``.

webdataset's own stages do the work (its image specs and basic handlers decode). A
stage that fails on a sample is named with the sample's shard and key and raises, or
with ``handler="skip"`` the sample is counted under the stage's reason and the chain
goes on with the next sample.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import webdataset as wds

from ..errors import InputError
from .reading import SkipReport
from .skips import MAP_FAILED, MISSING, UNDECODABLE


class Transforms:
    """``decode``, ``to_tuple`` and ``map`` as :class:`~tarkit.loading.ShardDataset` takes
    them; :attr:`active` when any is given."""

    def __init__(
        self,
        decode: Any,
        to_tuple: str | Sequence[str] | None,
        map: Callable[[Any], Any] | None,  # noqa: A002 - the dataset's name
        *,
        handler: str,
        skip: SkipReport,
    ) -> None:
        self.decode = decode
        self.to_tuple = to_tuple
        self.map = map
        self.handler = handler
        self.skip = skip
        # The (shard, key) of the sample the item last yielded came from.
        self.current: tuple[str, str] = ("-", "?")

    @property
    def active(self) -> bool:
        return self.decode is not None or self.to_tuple is not None or self.map is not None

    def __call__(self, samples: Iterator[dict[str, Any]], row: int) -> Iterator[Any]:
        """Run the stages over ``samples``; a failure raises or is counted (``row``: the
        worker)."""
        stages: list[tuple[str, Any]] = []
        if self.decode is not None:
            handlers = self.decode if isinstance(self.decode, (list, tuple)) else [self.decode]
            stages.append((UNDECODABLE, wds.decode(*handlers)))
        if self.to_tuple is not None:
            columns = [self.to_tuple] if isinstance(self.to_tuple, str) else self.to_tuple
            stages.append((MISSING, wds.to_tuple(*columns)))
        if self.map is not None:
            stages.append((MAP_FAILED, wds.map(self.map)))
        while True:
            feed = _Feed(samples, stages[0][0])
            items: Iterator[Any] = iter(feed)
            for index, (_, stage) in enumerate(stages):
                items = stage(items)
                if index + 1 < len(stages):
                    items = feed.mark(items, stages[index + 1][0])
            try:
                for item in items:
                    sample = feed.current or {}
                    self.current = (sample.get("__url__", "-"), sample.get("__key__", "?"))
                    yield item
                return
            except Exception as exc:  # a stage failed on feed.current: rebuild the chain
                if exc is feed.upstream:
                    raise  # the shard reader's own error, already named
                sample = feed.current or {}
                error = _sample_error(feed.stage, sample, exc)
                if self.handler == "raise":
                    raise error from exc
                self.skip(row, feed.stage, 1, None, str(error))


def _sample_error(stage: str, sample: dict[str, Any], exc: BaseException) -> InputError:
    key = sample.get("__key__", "?")
    url = sample.get("__url__", "-")
    cause = exc.__cause__ if isinstance(exc, wds.autodecode.DecodingError) else exc
    reason = f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__
    if stage == UNDECODABLE:
        what = f"cannot decode field {getattr(exc, 'k', '?')!r} of sample {key!r}: {reason}"
    elif stage == MISSING:
        what = f"sample {key!r} lacks a field for to_tuple: {reason}"
    else:
        what = f"map failed on sample {key!r}: {reason}"
    return InputError(what, source=url, member=key)


class _Feed:
    """Feeds samples to a chain of stages and knows which sample and stage is current."""

    def __init__(self, samples: Iterator[dict[str, Any]], first: str) -> None:
        self.samples = samples
        self.first = first
        self.stage = first
        self.current: dict[str, Any] | None = None
        self.upstream: BaseException | None = None

    def __iter__(self) -> Iterator[dict[str, Any]]:
        while True:
            try:
                sample = next(self.samples)
            except StopIteration:
                return
            except BaseException as exc:
                self.upstream = exc
                raise
            self.current = sample
            self.stage = self.first
            yield sample

    def mark(self, items: Iterator[Any], stage: str) -> Iterator[Any]:
        for item in items:
            self.stage = stage
            yield item
