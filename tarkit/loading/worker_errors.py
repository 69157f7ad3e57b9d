"""Errors raised in DataLoader workers, handed to the main process whole.

torch re-raises a worker's exception in the main process as a new one of the same class
built from a long text ("Caught InputError in DataLoader worker process 0. Original
Traceback…"), so tarkit's one-line message is lost. Inside a :class:`ShardLoader`, a
worker instead hands over the error itself as an item (:class:`WorkerError`, which
pickles whole) and stops; the loader raises it in the main process, with the worker's
traceback chained only under ``TARKIT_DEBUG=1``.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Iterator
from typing import Any

from ..errors import TarkitError


class WorkerTraceback(Exception):
    """The traceback of an error in a DataLoader worker (shown under ``TARKIT_DEBUG=1``)."""


class WorkerError:
    """An error raised in a worker, travelling to the main process as an item."""

    def __init__(self, error: TarkitError, trace: str) -> None:
        self.error = error
        self.trace = trace

    def reraise(self) -> None:
        """Raise the worker's error here, in the main process."""
        if os.environ.get("TARKIT_DEBUG"):
            raise self.error from WorkerTraceback("in the DataLoader worker:\n" + self.trace)
        raise self.error from None


def errors_as_items(items: Iterator[Any]) -> Iterator[Any]:
    """``items``, ending with a :class:`WorkerError` instead of raising a tarkit error."""
    try:
        yield from items
    except TarkitError as exc:
        yield WorkerError(exc, traceback.format_exc())
