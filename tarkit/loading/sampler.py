"""``tarkit.BlockSampler``: a sampler for map-style datasets that shuffles while keeping
reads local, gives every position once per epoch over ranks, and resumes mid-epoch.

The parts, one module each: the blocks and an epoch's shuffled order
(:mod:`~tarkit.loading.block_order`), which places of that order each rank delivers,
across elastic resumes (:mod:`~tarkit.loading.rank_parts`), and the state
(:mod:`~tarkit.loading.sampler_state`). This module keeps the epochs and the topology.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from torch.utils.data import Sampler

from ..errors import UsageError
from .block_order import DEFAULT_WINDOW, BlockOrder, Blocks, InOrder
from .rank_parts import Generation, longest_part, part, rank_runs, total_after
from .ranks import distributed_rank
from .sampler_state import MAX_GENERATIONS, MAX_WORLD, SamplerState


class SizedDataset(Protocol):
    """What a BlockSampler needs of a dataset: its length (``shard_sizes`` is optional)."""

    def __len__(self) -> int: ...


@dataclass
class _Pass:
    """Where an epoch's pass stands: its epoch, the generations elastic resumes ended, and
    what this rank has delivered of its part of the current generation."""

    epoch: int
    history: tuple[Generation, ...] = ()
    delivered: int = 0
    resumed: bool = False  # from a loaded state (else from set_epoch or the next epoch)
    drawn: bool = False  # an index asked for
    ended: bool = False  # its last index given and the end seen


class BlockSampler(Sampler[int]):
    """Every position of a map-style dataset once per epoch over all ranks, shuffled in
    blocks so that each rank reads from only a few shards at a time.

    **Blocks and windows.** The dataset's positions are cut into *blocks* of consecutive
    positions: a block per shard when the dataset gives its shards' sample counts
    (``dataset.shard_sizes``, a sequence of ints adding up to ``len(dataset)``, or a method
    returning one), each cut into blocks of at most ``block_size`` when that is given;
    without shard sizes, blocks of ``block_size`` positions (default 1,000). An epoch
    shuffles the order of the blocks, then the positions within each *window* of
    ``window`` consecutive blocks of that order (default 8). ``window`` and the block size
    bound the locality: a rank reads from the blocks of one window at a time — at most
    ``window`` shards when blocks are shards or parts of shards — and from two windows
    where its stretch passes from one to the next. Larger windows mix more shards into each
    batch and read from more at once (``bench/bench_sampler.py`` measures both).

    **Ranks.** Ranks take contiguous parts of the epoch's order (each keeps its locality),
    cut by count: lengths differ by at most one; ``drop_last=True`` makes them equal by
    leaving out fewer than ``num_replicas`` positions, never by repeating any (as
    ``DistributedSampler`` pads). ``num_replicas`` and ``rank`` default to
    ``torch.distributed``'s when it is initialised, else to ``RANK``/``WORLD_SIZE``, else to
    one rank (read when the sampler is made). ``shuffle=False`` gives the positions in
    order, in the same contiguous parts.

    **Epochs.** Each iteration reads the next epoch (the first reads 0), as tarkit's
    loader does (an iteration begins at its first index: an iterator never read does not
    count); ``set_epoch(e)`` makes the next iteration read epoch ``e`` and the ones after
    it ``e + 1``… (so DistributedSampler-style loops and Lightning's call work). The
    order is a function of ``(seed, epoch)`` only: the same in every process and run
    (with the same torch version, whose ``randperm`` draws the shuffles), whatever the
    global random state.

    **State.** :meth:`state_dict` and :meth:`load_state_dict` follow torchdata's
    ``Stateful`` protocol: a ``StatefulDataLoader`` saves and restores the sampler with
    itself, accounting for the indices its workers prefetched. Restored on the same
    number of ranks, the epoch goes on exactly; on another (or another ``drop_last``), the
    new ranks deliver every position of the epoch not yet delivered, each once. Ranks move
    in step, so every rank resumes from any rank's state (rank 0's, as Lightning saves).

    Memory: a few integers per block and the positions of one window (8 bytes each),
    never one per sample: a few tens of MB for a billion samples in a million shards.
    Raises :class:`~tarkit.errors.UsageError` for malformed options or shard sizes.
    """

    def __init__(
        self,
        dataset: SizedDataset,
        *,
        shuffle: bool = True,
        seed: int = 0,
        num_replicas: int | None = None,
        rank: int | None = None,
        drop_last: bool = False,
        block_size: int | None = None,
        window: int = DEFAULT_WINDOW,
    ) -> None:
        super().__init__()
        for name, value in (("shuffle", shuffle), ("drop_last", drop_last)):
            if not isinstance(value, bool):
                raise UsageError(f"BlockSampler's {name} must be True or False, not {value!r}")
        if not _whole(seed):
            raise UsageError(f"BlockSampler's seed must be an integer, not {seed!r}")
        for name, count in (("window", window), ("block_size", block_size)):
            if count is not None and not (_whole(count) and count >= 1):
                raise UsageError(f"BlockSampler's {name} must be a positive integer")
        self.total = len(dataset)
        self.blocks = Blocks(self.total, _shard_sizes(dataset), block_size)
        self.shuffle, self.seed, self.window, self.drop_last = shuffle, seed, window, drop_last
        self.rank, self.world = _rank_and_world(rank, num_replicas)
        self._next: _Pass | None = _Pass(0)  # pinned for the next iterator
        self._current: _Pass | None = None  # the last iterator's

    def __len__(self) -> int:
        """How many indices this rank gives in an epoch."""
        start, stop = part(self.total, rank=self.rank, world=self.world, drop_last=self.drop_last)
        return stop - start

    def __iter__(self) -> Iterator[int]:
        return self._indices(self._claim())

    def _claim(self) -> _Pass:
        """The pass a new iterator reads: the one set_epoch or load_state_dict pinned; else
        the pass of the last iterator if none of its indices was drawn (torchdata's
        StatefulDataLoader makes iterators that it never reads); else the next epoch."""
        current = self._current
        if self._next is not None:
            claimed = self._next
        elif current is not None and not current.drawn:
            claimed = replace(current)
        else:
            claimed = _Pass(current.epoch + 1 if current is not None else 0)
        self._current, self._next = claimed, None
        return claimed

    def _indices(self, current: _Pass) -> Iterator[int]:
        if current is self._current and self._next is not None:
            current = self._claim()  # pinned after iter(), before the first index
        current.drawn = True
        if self.shuffle:
            order: BlockOrder | InOrder = BlockOrder(
                self.blocks, window=self.window, seed=self.seed, epoch=current.epoch
            )
        else:
            order = InOrder()
        runs = rank_runs(
            self.total, current.history, rank=self.rank, world=self.world,
            drop_last=self.drop_last, delivered=current.delivered,
        )  # fmt: skip
        for start, length in runs:
            for piece in order.stretch(start, length):
                for position in piece:
                    current.delivered += 1  # before the yield: the state counts it given
                    yield position
        current.ended = True

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration read epoch ``epoch`` (the ones after it ``epoch + 1``…),
        also an iterator made but not read yet.

        Nothing changes when the pass to come already reads that epoch, and a loaded state
        of it stays: its pass goes on where it stood. So a loop that calls ``set_epoch`` at
        the start of every epoch resumes too, as does Lightning, which calls it after its
        DataLoader has made its iterator.
        """
        if not (_whole(epoch) and epoch >= 0):
            raise UsageError(f"an epoch is a whole number from 0, not {epoch!r}")
        pending, current = self._next, self._current
        if pending is not None and pending.resumed and pending.epoch == epoch:
            return
        if current is not None and not current.drawn and current.epoch == epoch:
            self._next = None  # its iterator, not read yet, reads this epoch already
            return
        self._next = _Pass(epoch)

    @property
    def epoch(self) -> int:
        """The epoch of the last iterator's pass; before any, the next one's."""
        if self._current is not None:
            return self._current.epoch
        assert self._next is not None
        return self._next.epoch

    def state_dict(self) -> dict[str, Any]:
        """Where this rank stands in its epoch, as a small dict of JSON types (a few
        kilobytes at most).

        It describes the pass of the last iterator (which may have ended: restoring it
        then gives an empty pass, and the pass after it the next epoch, as torchdata's
        StatefulDataLoader expects), or the pass :meth:`set_epoch` or
        :meth:`load_state_dict` pinned for the next one. ``set_epoch`` with the epoch of a
        pass already under way leaves that pass in the state: Lightning calls it after its
        DataLoader's workers have begun the pass. A plain DataLoader's workers prefetch
        indices and the state counts every index drawn: take it through a
        StatefulDataLoader, which accounts for them.
        """
        pending, current = self._next, self._current
        if pending is not None and (
            pending.resumed or current is None or pending.epoch != current.epoch
        ):
            stand = pending
        else:  # set_epoch with the epoch of the pass under way leaves it the one to save
            assert current is not None
            stand = current
        delivered = stand.delivered
        if stand.ended:
            # The end seen: every rank has ended too (in step, its last batch was this
            # rank's, one index longer at most), including the ranks of longer parts.
            total = total_after(self.total, stand.history)
            delivered = longest_part(total, world=self.world, drop_last=self.drop_last)
        return SamplerState(
            samples=self.total, blocks=len(self.blocks), layout=self.blocks.fingerprint,
            seed=self.seed, shuffle=self.shuffle, window=self.window, epoch=stand.epoch,
            history=list(stand.history),
            current=Generation(self.world, self.drop_last, delivered), rank=self.rank,
        ).to_json()  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Make the next iteration (or an iterator made and not read yet) resume the pass
        of ``state`` (:meth:`state_dict`).

        On the same number of ranks and ``drop_last``, each rank goes on where the ranks
        stood (in step: each had delivered the state's count, up to its length), exactly as
        the uninterrupted run; on another, the epoch's positions not yet delivered are cut
        over the new ranks, each once (at most 64 such elastic resumes within an epoch).
        The epoch after it is a whole one. UsageError when the state is malformed or
        belongs to another dataset, seed, shuffle, window or cut into blocks.
        """
        parsed = SamplerState.from_json(state)
        parsed.check(
            samples=self.total, blocks=len(self.blocks), layout=self.blocks.fingerprint,
            seed=self.seed, shuffle=self.shuffle, window=self.window,
        )  # fmt: skip
        ended, history = parsed.current, list(parsed.history)
        if (ended.world, ended.drop_last) == (self.world, self.drop_last):
            # The ranks' count in step, kept whole: a rank of a shorter part passes it on.
            delivered = ended.delivered
        else:
            if ended.delivered:
                if len(history) == MAX_GENERATIONS:
                    raise UsageError(
                        f"the block sampler state has had {MAX_GENERATIONS} elastic resumes "
                        "within its epoch already: resume it on its own number of ranks"
                    )
                history.append(Generation(ended.world, ended.drop_last, ended.delivered))
            delivered = 0
        self._next = _Pass(parsed.epoch, tuple(history), delivered, resumed=True)


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _shard_sizes(dataset: SizedDataset) -> Sequence[int] | None:
    """The dataset's ``shard_sizes`` (an attribute, or a method returning them), if any."""
    sizes = getattr(dataset, "shard_sizes", None)
    return sizes() if callable(sizes) else sizes


def _rank_and_world(rank: int | None, world: int | None) -> tuple[int, int]:
    detected = distributed_rank() if rank is None or world is None else (0, 1)
    rank = detected[0] if rank is None else rank
    world = detected[1] if world is None else world
    if not (_whole(rank) and _whole(world) and 1 <= world <= MAX_WORLD and 0 <= rank < world):
        raise UsageError(f"rank {rank!r} is not in a world of size {world!r} (at most {MAX_WORLD})")
    return rank, world
