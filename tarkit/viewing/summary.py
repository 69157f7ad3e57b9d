"""The ``tarkit stats`` summary of a viewed dataset: read once, in the background.

Reading every shard may take a while, so the page asks for the summary only when it is
shown, :class:`Summary` starts the read then (:func:`~tarkit.dataset_stats`, one shard
after another), and until it is done it answers with what the manifest says, when there
is one.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from ..errors import TarkitError
from ..format.samples import SkipLog
from ..processing.stats import dataset_stats


class Summary:
    """The summary of the dataset ``sources`` name (as ``tarkit stats`` takes them, with
    the class names of ``classes``), as plain data for the page (:meth:`state`)."""

    def __init__(
        self, sources: Sequence[str], *, classes: str | None = None, strict: bool = False
    ) -> None:
        self._sources = list(sources)
        self._classes = classes
        self._strict = strict
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._manifest: dict[str, Any] | None = None
        self._read: dict[str, Any] | None = None
        self._error: str | None = None

    def state(self) -> dict[str, Any]:
        """``{"state": "reading", "stats": manifest's figures or None}`` while the shards
        are read (the first call starts that), then ``{"state": "done", "stats": …}``
        (:meth:`~tarkit.stream.summary.DatasetStats.to_json`) or ``{"state": "failed",
        "error": message}``."""
        with self._lock:
            if self._thread is None:
                self._manifest = self._from_manifest()
                self._thread = threading.Thread(target=self._read_shards, daemon=True)
                self._thread.start()
            if self._error is not None:
                return {"state": "failed", "error": self._error, "stats": self._manifest}
            if self._read is not None:
                return {"state": "done", "stats": self._read}
            return {"state": "reading", "stats": self._manifest}

    def _from_manifest(self) -> dict[str, Any] | None:
        try:
            return dataset_stats(self._sources, read=False).to_json()
        except TarkitError:
            return None  # no manifest: the figures wait for the read

    def _read_shards(self) -> None:
        try:
            stats = dataset_stats(
                self._sources, classes=self._classes, strict=self._strict, skips=SkipLog()
            )
        except TarkitError as exc:
            with self._lock:
                self._error = str(exc)
            return
        with self._lock:
            self._read = stats.to_json()
