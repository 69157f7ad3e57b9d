"""The order of an epoch in a :class:`~tarkit.loading.sampler.BlockSampler`: blocks
shuffled, then positions shuffled within windows of consecutive blocks of that order.

A dataset's positions are cut into :class:`Blocks` of consecutive positions (a shard each,
or ``block_size`` positions). An epoch's :class:`BlockOrder` shuffles the blocks, groups
that order into windows of ``window`` blocks and shuffles the positions of each window, so
that a stretch of the order reads from the blocks of one window at a time (of two where
it passes from one window to the next). Each window is shuffled by a generator of its own,
seeded from (seed, epoch, window) by :func:`~tarkit.seeds.stable_seed` and independent of
torch's global random state, so any stretch is computed without the windows before it:
memory is one integer a block (the block order) and one window's positions.

>>> order = BlockOrder(Blocks(10, None, block_size=2), window=2, seed=0, epoch=0)
>>> places = [position for piece in order.stretch(0, 10) for position in piece]
>>> sorted(places) == list(range(10))  # every position once
True
>>> sorted(places[:4])  # the first window: two blocks of two positions
[0, 1, 6, 7]
"""

from __future__ import annotations

import array
import hashlib
import sys
from collections.abc import Iterator, Sequence
from functools import cached_property

import torch

from ..errors import UsageError
from ..seeds import stable_seed

DEFAULT_BLOCK_SIZE = 1000  # positions a block, when the dataset does not give shard sizes
DEFAULT_WINDOW = 8  # blocks whose positions are shuffled together
_SEED_MASK = (1 << 63) - 1
_PIECE = 4096  # positions made Python ints at a time


class Blocks:
    """The blocks of a dataset of ``total`` positions: ``sizes[b]`` consecutive positions
    from ``starts[b]`` (tensors of int64; empty shards make no block).

    ``shard_sizes`` (the samples of each shard, in position order) makes a block of each
    shard, cut into blocks of at most ``block_size`` when that is given; without shard
    sizes, blocks are ``block_size`` positions (default :data:`DEFAULT_BLOCK_SIZE`).
    UsageError when the shard sizes are not whole numbers adding up to ``total``.

    >>> Blocks(7, [3, 0, 4], block_size=2).sizes.tolist()
    [2, 1, 2, 2]
    """

    def __init__(self, total: int, shard_sizes: Sequence[int] | None, block_size: int | None):
        if shard_sizes is None:
            size = block_size or DEFAULT_BLOCK_SIZE
            count = -(-total // size)
            sizes = torch.full((count,), size, dtype=torch.int64)
            if count:
                sizes[-1] = total - (count - 1) * size
        else:
            sizes = _shard_tensor(shard_sizes, total)
            sizes = sizes[sizes > 0]
            if block_size is not None:
                sizes = _cut(sizes, block_size)
        self.sizes = sizes
        self.starts = torch.cumsum(sizes, 0) - sizes

    def __len__(self) -> int:
        return len(self.sizes)

    @cached_property
    def fingerprint(self) -> str:
        """What identifies the cut: a hash of the blocks' sizes."""
        sizes = array.array("q", self.sizes.tolist())
        if sys.byteorder == "big":
            sizes.byteswap()
        return hashlib.blake2b(sizes.tobytes(), digest_size=8).hexdigest()


def _shard_tensor(shard_sizes: Sequence[int], total: int) -> torch.Tensor:
    try:
        sizes = torch.as_tensor(shard_sizes)
        if sizes.numel() == 0:
            sizes = sizes.to(torch.int64).view(0)  # a float tensor, from []
    except (TypeError, ValueError, RuntimeError):
        sizes = None
    if sizes is None or sizes.dim() != 1 or sizes.dtype not in _INTEGERS:
        raise UsageError("the dataset's shard_sizes must be a sequence of whole numbers")
    sizes = sizes.to(torch.int64)
    if len(sizes) and int(sizes.min()) < 0:
        raise UsageError("the dataset's shard_sizes must not be negative")
    if int(sizes.sum()) != total:
        raise UsageError(
            f"the dataset's shard_sizes add up to {int(sizes.sum())}, but its len() is {total}"
        )
    return sizes


_INTEGERS = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


def _cut(sizes: torch.Tensor, block_size: int) -> torch.Tensor:
    """Shards of ``sizes`` cut into blocks of ``block_size`` (the last of each shorter)."""
    counts = -(-sizes // block_size)
    cut = torch.full((int(counts.sum()),), block_size, dtype=torch.int64)
    last = torch.cumsum(counts, 0) - 1
    cut[last] = sizes - (counts - 1) * block_size
    return cut


class BlockOrder:
    """Which dataset position is at each place of an epoch's order (shuffled)."""

    def __init__(self, blocks: Blocks, *, window: int, seed: int, epoch: int) -> None:
        self.blocks = blocks
        self.window = window
        self.seed, self.epoch = seed, epoch
        self.order = torch.randperm(len(blocks), generator=_generator(seed, epoch, "blocks"))
        sizes = blocks.sizes.index_select(0, self.order)
        padded = torch.cat([sizes, sizes.new_zeros(-len(sizes) % window)])
        self.ends = torch.cumsum(padded.view(-1, window).sum(1), 0)  # of each window
        self._cached: tuple[int, torch.Tensor] = (-1, self.ends)

    def stretch(self, start: int, length: int) -> Iterator[Sequence[int]]:
        """The positions at places ``[start, start + length)``, in pieces of a window."""
        while length > 0:
            number = int(torch.searchsorted(self.ends, start, right=True))
            first = int(self.ends[number - 1]) if number else 0
            count = min(length, int(self.ends[number]) - start, _PIECE)
            offset = start - first
            yield self._window(number)[offset : offset + count].tolist()
            start += count
            length -= count

    def _window(self, number: int) -> torch.Tensor:
        """The positions of window ``number``, shuffled (8 bytes each, as one tensor)."""
        # index_select, not indexing with a tensor: on a busy machine, torch spreads the
        # latter over threads that wait for each other (ten times slower here).
        if self._cached[0] != number:
            chosen = self.order[number * self.window : (number + 1) * self.window]
            starts = self.blocks.starts.index_select(0, chosen).tolist()
            sizes = self.blocks.sizes.index_select(0, chosen).tolist()
            ranges = zip(starts, sizes, strict=True)
            positions = torch.cat([torch.arange(start, start + n) for start, n in ranges])
            generator = _generator(self.seed, self.epoch, number)
            shuffle = torch.randperm(len(positions), generator=generator)
            self._cached = (number, positions.index_select(0, shuffle))
        return self._cached[1]


class InOrder:
    """The positions in order (``shuffle=False``): place ``i`` holds position ``i``."""

    def stretch(self, start: int, length: int) -> Iterator[Sequence[int]]:
        """The positions at places ``[start, start + length)``."""
        yield range(start, start + length)


def _generator(seed: int, epoch: int, part: object) -> torch.Generator:
    generator = torch.Generator()
    generator.manual_seed(stable_seed("block sampler", seed, epoch, part) & _SEED_MASK)
    return generator
