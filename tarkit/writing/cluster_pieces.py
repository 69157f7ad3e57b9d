"""The encoded items as the driver of :func:`~tarkit.shard_dataset` on an engine holds them.

An encode task (:class:`~tarkit.writing.cluster_tasks.EncodeTask`) encodes a *piece*: a
run of consecutive positions of the item order. Once it is done, the driver knows, for
each item of the piece, the tar size of every sample it gave (none, one or several) or
its failure, and the keys of its first and last sample; the samples themselves stay in
the payload, in the engine, until a write task takes them. :class:`Pieces` finds the
item at a position, checks the keys in order (an item whose first sample has the key of
the sample before it fails, as on one machine) and lets go of the pieces the walk has
left behind.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from ..engines.base import Handle
from .cluster_tasks import Encoded
from .items import ItemEncoder, ItemFailure
from .shard_records import Point


@dataclass
class Piece:
    """An encode task's positions and, once it is done, per item the tar sizes of its
    samples (None for an item that failed) and their offsets in the payload."""

    first: int
    end: int
    sizes: list[list[int] | None] | None = None
    offsets: list[list[int]] = field(default_factory=list)
    keys: list[tuple[str, str] | None] = field(default_factory=list)
    failures: dict[int, ItemFailure] = field(default_factory=dict)  # by position
    payload: Handle | None = None
    users: set[int] = field(default_factory=set)  # shards whose write needs the payload

    def item(self, position: int) -> list[int] | None:
        """The sizes of the samples of the item at ``position`` (None: it failed)."""
        assert self.sizes is not None
        return self.sizes[position - self.first]

    def fail(self, position: int, failure: ItemFailure) -> None:
        """Count the item at ``position`` as failed, with ``failure``."""
        assert self.sizes is not None
        self.sizes[position - self.first] = None
        self.failures[position] = failure


class Pieces:
    """The pieces queued so far, by first position.

    ``skips`` maps the first position of each run of items a resumed run need not encode
    (its samples are all in complete shards) to the position after it. Items are
    checked in order as their pieces arrive (:meth:`check`); :meth:`at` finds only
    checked items, so the walk never runs ahead of the check.
    """

    def __init__(self, encoder: ItemEncoder, order: list[int], skips: dict[int, int]) -> None:
        self.encoder, self.order, self.skips = encoder, order, skips
        self.pieces: dict[int, Piece] = {}
        self.firsts: list[int] = []
        self.checked = 0  # the first position not checked yet
        self.last_key: str | None = None  # of the last sample before it

    def add(self, first: int, end: int) -> None:
        """Queue the piece of positions ``first`` to ``end``."""
        self.pieces[first] = Piece(first, end)
        self.firsts.append(first)

    def waiting(self) -> int:
        """How many pieces are not encoded yet."""
        return sum(1 for piece in self.pieces.values() if piece.sizes is None)

    def encoded(self, result: Encoded, payload: Handle) -> Piece:
        """Take in what the encode task of a piece reported."""
        piece = self.pieces[result.first]
        piece.sizes, piece.keys, piece.payload = result.sizes, result.keys, payload
        offset = 0
        for sizes in result.sizes:
            piece.offsets.append([])
            for size in sizes or ():
                piece.offsets[-1].append(offset)
                offset += size
        failed = [result.first + k for k, sizes in enumerate(result.sizes) if sizes is None]
        piece.failures = dict(zip(failed, result.failures, strict=True))
        return piece

    def at(self, position: int) -> Piece | None:
        """The piece of the item at ``position``, once it is encoded and checked."""
        if position >= self.checked:
            return None
        at = bisect.bisect_right(self.firsts, position) - 1
        piece = self.pieces.get(self.firsts[at]) if at >= 0 else None
        assert piece is not None and piece.first <= position < piece.end
        return piece

    def check(self) -> list[tuple[int, ItemFailure]]:
        """Check the keys of the items encoded in order since the last call; return the
        items that fail for repeating the key of the sample before them (each is then
        failed in its piece)."""
        failed: list[tuple[int, ItemFailure]] = []
        while True:
            if self.checked in self.skips:  # the sample before the next one is unknown
                self.checked, self.last_key = self.skips[self.checked], None
                continue
            at = bisect.bisect_right(self.firsts, self.checked) - 1
            piece = self.pieces.get(self.firsts[at]) if at >= 0 else None
            if piece is None or piece.sizes is None or not self.checked < piece.end:
                return failed
            position = self.checked
            keys = piece.keys[position - piece.first]
            if piece.item(position) is not None and keys is not None:
                index = self.order[position]
                failure = self.encoder.follows(self.last_key, keys[0], index)
                if failure is None:
                    self.last_key = keys[1]
                else:
                    piece.fail(position, failure)
                    failed.append((position, failure))
            self.checked += 1

    def release(self, walked: Point) -> None:
        """Let go of the pieces behind the point ``walked`` and checked that no write
        needs."""
        for first, piece in list(self.pieces.items()):
            behind = (piece.end, 0) <= walked and piece.end <= self.checked
            if behind and not piece.users and piece.sizes is not None:
                del self.pieces[first]
                self.firsts.remove(first)


__all__ = ["Piece", "Pieces"]
