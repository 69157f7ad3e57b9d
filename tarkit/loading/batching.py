"""Batches made inside the workers, and a collate failure that says which samples differ.

torch's ``default_collate`` stacks tensors of one shape; images of different sizes make
it fail with ``stack expects each tensor to be equal size``, naming no sample. Here the
failure is an :class:`~tarkit.errors.InputError` naming the shard and key of two samples
whose fields differ in shape, the shapes, and how to make them stack.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ..errors import InputError

Where = tuple[str, str]  # (shard, key) of the sample an item came from


def batches(
    items: Iterator[Any],
    size: int,
    collate: Callable[[list[Any]], Any],
    *,
    partial: bool,
    origin: Callable[[Any], dict[str, Any]] | None = None,
) -> Iterator[Any]:
    """Lists of ``size`` items collated by ``collate`` (a last, shorter one if ``partial``).

    ``origin(item)``, called as each item arrives, gives the sample dict it came from
    (whose ``__url__`` and ``__key__`` a collate failure names); without it, each item is
    a sample dict itself.
    """
    batch: list[Any] = []
    origins: list[dict[str, Any]] = []  # with ``origin``: the sample dict of each item
    for item in items:
        batch.append(item)
        if origin is not None:
            origins.append(origin(item))
        if len(batch) == size:
            yield _collated(batch, origins or batch, collate)
            batch, origins = [], []
    if batch and partial:
        yield _collated(batch, origins or batch, collate)


def _collated(batch: list[Any], samples: list[Any], collate: Callable[[list[Any]], Any]) -> Any:
    """``collate(batch)``; a failure names the shard and key of ``samples``, one an item."""
    try:
        return collate(batch)
    except Exception as exc:
        sources = [
            (sample.get("__url__", "-"), sample.get("__key__", "?"))
            if isinstance(sample, dict) else ("-", "?")
            for sample in samples
        ]  # fmt: skip
        raise collate_error(batch, sources, exc) from exc


def padded(
    items: Iterator[Any], expected: int, repeated: Callable[[int], object], none: str, source: str
) -> Iterator[Any]:
    """Exactly ``expected`` items (``equal_batches``): samples skipped under
    ``handler="skip"`` are made up by repeating the last item (``repeated`` is told how
    many); an :class:`~tarkit.errors.InputError` (``none`` says why, ``source`` where) when
    every one was skipped."""
    count = 0
    last: Any = None
    for item in items:
        count += 1
        last = item
        yield item
    if count < expected:
        if count == 0:
            raise InputError(f"{none}: equal_batches cannot make them up", source=source)
        repeated(expected - count)
        for _ in range(expected - count):
            yield last


def collate_error(batch: list[Any], sources: list[Where], exc: BaseException) -> InputError:
    """The error of a batch that does not collate: the first two samples whose fields
    differ in shape, or the collate function's own message.

    >>> import numpy
    >>> items = [(numpy.zeros((3, 8, 8)), 1), (numpy.zeros((3, 9, 8)), 2)]
    >>> print(collate_error(items, [("s-0.tar", "a"), ("s-1.tar", "b")], ValueError("x")))
    s-1.tar: cannot batch field 0: sample 'b' has shape (3, 9, 8), sample 'a' (s-0.tar) has (3, 8, 8); fields of a batch must have one shape: give images one size (tarkit shard --resize 256x256:crop, or a map= that resizes) or pass collate= (member b)
    """
    first = _shapes(batch[0])
    for item, (url, key) in zip(batch[1:], sources[1:], strict=True):
        shapes = _shapes(item)
        for name, shape in shapes.items():
            if name in first and first[name] != shape:
                first_url, first_key = sources[0]
                return InputError(
                    f"cannot batch field {name}: sample {key!r} has shape {shape}, sample "
                    f"{first_key!r} ({first_url}) has {first[name]}; fields of a batch must "
                    "have one shape: give images one size (tarkit shard --resize "
                    "256x256:crop, or a map= that resizes) or pass collate=",
                    source=url,
                    member=key,
                )
    url, key = sources[0]
    reason = f"{type(exc).__name__}: {exc}"
    return InputError(f"cannot batch the samples from {key!r} on: {reason}", source=url)


def _shapes(item: Any) -> dict[str, object]:
    """A field name (or position) → the shape of each array-like field of ``item``."""
    if isinstance(item, dict):
        fields = {str(k): v for k, v in item.items() if not str(k).startswith("__")}
    elif isinstance(item, (tuple, list)):
        fields = {str(i): v for i, v in enumerate(item)}
    else:
        fields = {"": item}
    shapes: dict[str, object] = {}
    for name, value in fields.items():
        shape = getattr(value, "shape", None)
        if shape is None and hasattr(value, "size") and hasattr(value, "mode"):
            shape = tuple(value.size)  # a PIL image: (width, height)
        if shape is not None:
            shapes[name] = tuple(shape)
    return shapes
