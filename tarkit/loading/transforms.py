"""The per-sample stages of the loader: webdataset's ``decode``, ``to_tuple`` and ``map``.

webdataset's own decoder does the decoding (:class:`webdataset.autodecode.Decoder`, with
its image specs and basic handlers), called on each sample directly rather than through
a chain of webdataset's generator stages: one loop per worker, with the stages' exact
rules (``to_tuple``'s alternatives and its error on a missing field, ``map`` dropping a
sample that maps to None and keeping ``__key__`` on a dict). A stage that fails on a
sample is named with the sample's shard and key and raises, or with ``handler="skip"``
the sample is counted under the stage's reason and the loop goes on with the next sample.
With ``resize``, the image specs of ``decode`` decode at that size
(:mod:`~tarkit.loading.resized_images`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import webdataset as wds
from webdataset.filters import getfirst

from ..errors import InputError, UsageError
from ..format.encoding import parse_resize
from .reading import SkipReport
from .resized_images import ResizedImageHandler, Size
from .skips import MAP_FAILED, MISSING, UNDECODABLE

DROPPED = object()  # what Transforms.apply gives for a sample that yields no item


class Transforms:
    """``decode``, ``to_tuple``, ``map`` and ``resize`` as :class:`~tarkit.loading.ShardDataset`
    takes them; :attr:`active` when any is given. A malformed ``resize``, or one without an
    image spec in ``decode`` to apply to, raises :class:`~tarkit.errors.UsageError`, and so
    does an image spec webdataset does not know."""

    def __init__(
        self,
        decode: Any,
        to_tuple: str | Sequence[str] | None,
        map: Callable[[Any], Any] | None,  # noqa: A002 - the dataset's name
        *,
        resize: str | None = None,
        handler: str,
        skip: SkipReport,
    ) -> None:
        self.size = _size(decode, resize)
        self.decode = decode
        self.to_tuple = to_tuple
        self.map = map
        self.handler = handler
        self.skip = skip
        # The sample dict the item last yielded came from (its shard and key name it).
        self.current: dict[str, Any] = {}
        self._stages: tuple[Any, _Columns | None] | None = None  # made on first use

    @property
    def active(self) -> bool:
        return self.decode is not None or self.to_tuple is not None or self.map is not None

    def __call__(self, samples: Iterator[dict[str, Any]], row: int) -> Iterator[Any]:
        """Run the stages over ``samples``; a failure raises or is counted (``row``: the
        worker). An error of ``samples`` itself (the shard reader's) goes through."""
        apply = self.apply
        for sample in samples:
            item = apply(sample, row)
            if item is not DROPPED:
                self.current = sample
                yield item

    def apply(self, sample: dict[str, Any], row: int) -> Any:
        """The stages on one sample: its item, or :data:`DROPPED` when ``map`` gave None
        (webdataset's map drops it, uncounted) or a failure was counted (``handler=
        "skip"``); else the failure raises, naming the sample's shard and key."""
        stages = self._stages
        if stages is None:
            stages = self._stages = (
                _decoder(self.decode, self.size) if self.decode is not None else None,
                _Columns(self.to_tuple) if self.to_tuple is not None else None,
            )
        decoder, columns = stages
        mapper = self.map
        stage = UNDECODABLE
        try:
            item: Any = sample if decoder is None else decoder(sample)
            if columns is not None:
                stage = MISSING
                item = columns.take(item)
            if mapper is not None:
                stage = MAP_FAILED
                result = mapper(item)
                if result is None:
                    return DROPPED
                if isinstance(result, dict) and isinstance(item, dict):
                    result["__key__"] = item.get("__key__")
                item = result
        except Exception as exc:
            error = _sample_error(stage, sample, exc)
            if self.handler == "raise":
                raise error from exc
            self.skip(row, stage, 1, None, str(error))
            return DROPPED
        return item

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_stages"] = None  # made again where it is used (a worker)
        return state


def _handlers(decode: Any) -> list[Any]:
    return list(decode) if isinstance(decode, (list, tuple)) else [decode]


def _size(decode: Any, resize: str | None) -> Size | None:
    """``resize`` parsed, once ``decode``'s image specs are known good (UsageError)."""
    specs = [h for h in _handlers(decode) if isinstance(h, str)] if decode is not None else []
    for spec in specs:
        if spec not in wds.autodecode.imagespecs:
            known = ", ".join(wds.autodecode.imagespecs)
            raise UsageError(f"decode {spec!r}: not an image spec (one of {known})")
    if resize is None:
        return None
    size = parse_resize(resize, "resize")
    if not specs:
        raise UsageError(
            f"resize {resize!r} resizes the images an image spec of decode= decodes "
            "(decode='rgb8', 'torchrgb8', 'pil'…): give one"
        )
    return size


def _decoder(decode: Any, size: Size | None) -> wds.autodecode.Decoder:
    """webdataset's ``decode(*handlers)`` decoder: spec strings become image handlers (at
    ``size``, decoded reduced, when it is given)."""
    return wds.autodecode.Decoder([
        h if not isinstance(h, str)
        else wds.autodecode.imagehandler(h) if size is None
        else ResizedImageHandler(h, size)
        for h in _handlers(decode)
    ])  # fmt: skip


class _Columns:
    """webdataset's ``to_tuple(*args)``: each column a list of alternatives, taken by
    webdataset's ``getfirst``; a missing or None field is an error, as there."""

    def __init__(self, to_tuple: str | Sequence[str]) -> None:
        args: Any = (to_tuple,) if isinstance(to_tuple, str) else tuple(to_tuple)
        if len(args) == 1 and isinstance(args[0], str) and " " in args[0]:
            args = args[0].split()
        self.args = args  # as webdataset names them in its error
        # A column with a space stays a string: getfirst refuses it, as in webdataset.
        self.keys = [a.split(";") if isinstance(a, str) and " " not in a else a for a in args]
        # Columns of one field each: looked up directly (getfirst says what is missing).
        single = all(isinstance(k, list) and len(k) == 1 for k in self.keys)
        self.fields = [k[0] for k in self.keys] if single else None

    def take(self, sample: dict[str, Any]) -> tuple[Any, ...]:
        result: tuple[Any, ...] | None = None
        if self.fields is not None:
            try:
                result = tuple([sample[field] for field in self.fields])
            except KeyError:
                pass
        if result is None:
            result = tuple([getfirst(sample, keys, missing_is_error=True) for keys in self.keys])
        for value in result:
            if value is None:
                raise ValueError(f"to_tuple {self.args} got {sample.keys()}")
        return result


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
