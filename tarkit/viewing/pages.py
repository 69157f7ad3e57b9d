"""Pages of samples, as the page in the browser asks for them: a run of positions, or
the samples a ``--where`` expression keeps, each sample described field by field.

:class:`Pages` answers the server's questions in plain data (what ``json.dumps`` takes):
a page (:meth:`Pages.page`), a key's position (:meth:`Pages.find`), a field's bytes
(:meth:`Pages.field`). Every answer that searches stops at a deadline and says where to
go on from, so that no request holds the samples for long; the page goes on by itself.

The samples of the pages shown last are kept, up to :data:`KEPT_BYTES` (the last page
always), so that the images of a page are served without reading their samples again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from time import monotonic
from typing import Any
from urllib.parse import quote

from ..errors import NotFound, UsageError
from ..format.classes import ClassNames, names_for
from ..format.samples import Sample
from ..storage import display_name
from ..stream.filters import where as parse_where
from . import fields
from .samples import ViewedSamples

PER_PAGE = 48
MAX_PER_PAGE = 1000
SEARCH_SECONDS = 1.0  # at most this long searching for one answer
KEPT_BYTES = 256 << 20  # samples of the last pages kept for their fields


class Pages:
    """What the viewer shows of ``samples`` (see the module docstring). Safe for the
    server's threads: one of them at a time reads the samples.

    ``class_names`` name the values of class fields (``classes.json``); ``where`` is the
    expression the page starts with.
    """

    def __init__(
        self,
        samples: ViewedSamples,
        *,
        source: str,
        class_names: ClassNames | None = None,
        where: str | None = None,
        per_page: int = PER_PAGE,
    ) -> None:
        check_settings(where, per_page)
        self.samples = samples
        self.source = source
        self.class_names = class_names
        self.where = where
        self.per_page = per_page
        self._lock = threading.Lock()
        self._kept: OrderedDict[int, Sample] = OrderedDict()
        self._kept_bytes = 0
        self._pinned: dict[int, Sample] = {}  # the last page's samples

    def info(self) -> dict[str, Any]:
        """What the page shows at its top: the source, its size, how it is read."""
        samples = self.samples
        return {
            "source": self.source,
            "shards": samples.shards,
            "samples": samples.samples,
            "indexed": samples.indexed,
            "note": samples.note,
            "where": self.where,
            "per_page": self.per_page,
        }

    def page(self, start: int, count: int, where: str | None = None) -> dict[str, Any]:
        """Up to ``count`` samples from position ``start`` on (those ``where`` keeps, when
        given), described for the page: ``{"samples": […], "next": position or None,
        "end": bool, "scanned": N, "total": samples or None}``.

        Without ``where`` a page is ``count`` positions; with it, the search stops at
        :data:`SEARCH_SECONDS` and ``next`` says where to go on (``end`` false). Raises
        :class:`~tarkit.errors.ExpressionError` for a malformed expression and
        :class:`~tarkit.errors.InputError` for a sample it cannot judge.
        """
        _check_position(start)
        if not 1 <= count <= MAX_PER_PAGE:
            raise UsageError(f"count must be between 1 and {MAX_PER_PAGE}")
        keep: Callable[[Sample], bool] | None = None if where is None else parse_where(where)
        deadline = monotonic() + SEARCH_SECONDS
        shown: list[tuple[int, Sample]] = []
        scanned, next_position, end = 0, start, True
        with self._lock:
            reading = self.samples.read(start)
            try:
                for position, sample in reading:
                    scanned += 1
                    next_position = position + 1
                    if keep is None or keep(sample):
                        shown.append((position, sample))
                        if len(shown) == count:
                            end = False
                            break
                    if keep is not None and monotonic() > deadline:
                        end = False
                        break
            finally:
                reading.close()
            self._pin(shown)
            total = self.samples.samples
        if not end and total is not None and next_position >= total:
            end = True
        return {
            "samples": [self._describe(position, sample) for position, sample in shown],
            "next": None if end else next_position,
            "end": end,
            "scanned": scanned,
            "total": total,
        }

    def find(self, key: str, start: int = 0) -> dict[str, Any]:
        """``{"position": N}`` for the first sample with ``key`` at or after ``start``;
        ``{"position": None, "next": M}`` when the search stopped at its deadline (go on
        from ``M``), ``{"position": None, "next": None}`` when no sample has it."""
        _check_position(start)
        with self._lock:
            found = self.samples.find(key, start, monotonic() + SEARCH_SECONDS)
        return {"position": found.position, "next": found.resume}

    def field(self, position: int, name: str) -> tuple[str, str, bytes]:
        """(key, field, bytes) of field ``name`` of the sample at ``position``: a kept
        sample's, else the sample read again. Raises :class:`~tarkit.errors.NotFound`
        when there is no such sample or field."""
        _check_position(position)
        with self._lock:
            sample = self._pinned.get(position) or self._kept.get(position)
            if sample is None:
                reading = self.samples.read(position)
                try:
                    at, sample = next(reading, (None, None))  # type: ignore[arg-type]
                finally:
                    reading.close()
                if sample is None or at != position:
                    raise NotFound(f"no sample {position} in {self.source}")
                self._keep(position, sample)
            elif position in self._kept:
                self._kept.move_to_end(position)
        index = sample.field_index(name)
        if index is not None:
            return sample.key, sample.fields[index], sample.data_at(index)
        raise NotFound(f"sample {position} ({sample.key}) has no field {name}")

    def close(self) -> None:
        with self._lock:
            self.samples.close()

    # -- what a page says of a sample -------------------------------------------------

    def _describe(self, position: int, sample: Sample) -> dict[str, Any]:
        described = []
        for index, (field, extent) in enumerate(zip(sample.fields, sample.extents(), strict=True)):
            url = f"/field/{position}/{quote(field.encode('utf-8', 'surrogateescape'), safe='')}"
            entry: dict[str, Any] = {"name": field, "size": extent[2] - extent[1], "url": url}
            kind = fields.kind(field)
            if kind in ("image", "audio", "video"):
                entry["kind"] = kind
                if fields.extension(field) in fields.CONVERTED_IMAGES:
                    entry["url"] += "?as=png"
            else:
                names = names_for(field, self.class_names) if kind == "class" else None
                entry.update(fields.describe(field, sample.data_at(index), names))
            described.append(entry)
        return {
            "position": position,
            "key": sample.key,
            "shard": display_name(sample.source),
            "fields": described,
        }

    # -- samples kept for their fields -------------------------------------------------

    def _pin(self, shown: list[tuple[int, Sample]]) -> None:
        for position, sample in self._pinned.items():
            self._keep(position, sample)
        self._pinned = dict(shown)

    def _keep(self, position: int, sample: Sample) -> None:
        if position in self._kept:
            return
        self._kept[position] = sample
        self._kept_bytes += sample.size
        while self._kept_bytes > KEPT_BYTES and self._kept:
            self._kept_bytes -= self._kept.popitem(last=False)[1].size


def check_settings(where: str | None, per_page: int) -> None:
    """Raise :class:`~tarkit.errors.UsageError` for a malformed ``--where`` expression
    (:class:`~tarkit.errors.ExpressionError`) or ``--per-page``."""
    if where is not None:
        parse_where(where)
    if not 1 <= per_page <= MAX_PER_PAGE:
        raise UsageError(f"--per-page must be between 1 and {MAX_PER_PAGE} (got {per_page})")


def _check_position(position: int) -> None:
    if position < 0:
        raise UsageError(f"a position is 0 or more (got {position})")
