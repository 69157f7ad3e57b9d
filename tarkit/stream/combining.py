"""Combining inputs into one stream of samples: in order, round robin, or mixed by weight.

- :func:`read_ahead`: the inputs in order, as :func:`~tarkit.stream.stages.read_samples`
  gives them, but up to N inputs are read at once by threads into bounded buffers.
- :func:`interleave`: one sample from each input in turn; an input that ends drops out.
- :func:`mix`: the inputs in proportion to their weights, by a seeded, stratified
  :class:`MixSchedule` (the rule the loader mixes datasets by), until one input runs out
  (or, with ``until_all``, until all do).

All three are generators over iterators, and all keep tarkit's error rule: an error in
an input is raised when the sequential run would have reached it, after every sample
before it. Closing them closes every input (stopping ``pipe:`` commands early).

>>> list(interleave([iter("abc"), iter("12"), iter("xyzw")]))
['a', '1', 'x', 'b', '2', 'y', 'c', 'z', 'w']
>>> "".join(mix([iter("aaaaaaaa"), iter("bbbbbbbb")], [3, 1], seed=0))
'aaaabbaaaa'
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from typing import TypeVar

from ..errors import UsageError
from ..format.samples import Sample, SkipLog
from ..seeds import stable_seed
from ..sizes import check_parallel
from ..storage import PIPE, Source, check_local_files, expand_inputs, location, open_source
from .stages import close_iterator, read_samples, source_samples

T = TypeVar("T")
READ_AHEAD_BYTES = 16 << 20  # per input read ahead by -p; at least one sample is always taken


def interleave(streams: Sequence[Iterator[T]]) -> Iterator[T]:
    """Round robin over ``streams`` until all are done; closing it closes them all."""
    active = list(streams)
    try:
        while active:
            still = []
            for stream in active:
                try:
                    item = next(stream)
                except StopIteration:
                    continue
                still.append(stream)
                yield item
            active = still
    finally:
        for stream in streams:
            close_iterator(stream)


BLOCK = 1000  # slots of a mix schedule whose shares are exact to within one sample


def preview_seed(seed: int) -> tuple[object, ...]:
    """The schedule seed of epoch 0 of a one-worker, one-rank loader mixing with ``seed``."""
    return ("loader", seed, 0, 0, 0, 0)


_KEPT = 1024  # blocks a schedule keeps: about 8 MB at most, a million slots


class MixSchedule:
    """Which input each slot of a mixed stream takes: a seeded, stratified draw.

    Slots come in aligned blocks of ``block``. In every block each input gets its share of
    the block, ``block × weight / total``, rounded down or up — so it is exact to within
    one sample in every block — and which inputs get the sample left over by rounding is
    drawn by systematic sampling, so that over many blocks every share is exact on
    average. The order inside a block is a seeded random permutation, not a pattern. A
    block depends only on the weights, ``seed`` (any values: the loader gives its seed,
    epoch, rank and worker) and its number, so any slot is found without the ones before.

    >>> schedule = MixSchedule([3, 1], seed=(0,), block=8)
    >>> [schedule.source_at(k) for k in range(8)].count(0)
    6
    >>> schedule.draws(8)
    [6, 2]
    """

    def __init__(self, weights: Sequence[float], *, seed: tuple[object, ...], block: int = BLOCK):
        from fractions import Fraction

        if not weights or not all(w > 0 and math.isfinite(w) for w in weights):
            raise UsageError("mixing weights must be positive numbers")
        exact = [Fraction(w) for w in weights]
        total = sum(exact)
        self.shares = [block * w / total for w in exact]
        self.floors = [math.floor(s) for s in self.shares]
        self.seed = seed
        self.block_size = block
        # Blocks drawn so far (a pass asks for each several times: its length, where a
        # resume starts, then slot by slot), up to _KEPT of them.
        self._blocks: dict[int, list[int]] = {}

    def block(self, number: int) -> list[int]:
        """The inputs of the slots of block ``number``, in order."""
        cached = self._blocks.get(number)
        if cached is not None:
            return cached
        import random  # here: its import is a start-up cost of every tool
        from fractions import Fraction

        rng = random.Random(stable_seed("mix", *self.seed, number))
        counts = list(self.floors)
        order = list(range(len(counts)))
        rng.shuffle(order)
        point = Fraction(rng.random())  # systematic sampling of the leftover samples
        reached = Fraction(0)
        for i in order:
            share = self.shares[i] - self.floors[i]
            counts[i] += math.ceil(reached + share - point) - math.ceil(reached - point)
            reached += share
        slots = [i for i, n in enumerate(counts) for _ in range(n)]
        rng.shuffle(slots)
        if len(self._blocks) >= _KEPT:
            self._blocks.clear()
        self._blocks[number] = slots
        return slots

    def source_at(self, slot: int) -> int:
        """The input of slot ``slot``."""
        return self.block(slot // self.block_size)[slot % self.block_size]

    def draws(self, slots: int) -> list[int]:
        """How many of the first ``slots`` slots each input takes."""
        counts = [0] * len(self.shares)
        whole, rest = divmod(slots, self.block_size)
        for number in range(whole):
            for i, n in enumerate(_counts(self.block(number), len(counts))):
                counts[i] += n
        for i in self.block(whole)[:rest]:
            counts[i] += 1
        return counts

    def length(self, limits: Sequence[int]) -> int:
        """How many slots can be filled before some input needs more than ``limits`` of it."""
        counts = [0] * len(self.shares)
        number = 0
        while True:
            slots = self.block(number)
            full = _counts(slots, len(counts))
            if all(c + n <= limit for c, n, limit in zip(counts, full, limits, strict=True)):
                counts = [c + n for c, n in zip(counts, full, strict=True)]
                number += 1
                continue
            for offset, i in enumerate(slots):
                if counts[i] + 1 > limits[i]:
                    return number * self.block_size + offset
                counts[i] += 1
            raise AssertionError("unreachable")  # pragma: no cover


def _counts(slots: Sequence[int], sources: int) -> list[int]:
    counts = [0] * sources
    for i in slots:
        counts[i] += 1
    return counts


def mix(
    streams: Sequence[Iterator[T]],
    weights: Sequence[float],
    *,
    seed: int = 0,
    until_all: bool = False,
) -> Iterator[T]:
    """Take items from ``streams`` in proportion to ``weights``, by a :class:`MixSchedule`
    seeded with ``seed`` — the draw the loader's mixing uses, so ``tarcat --mix`` previews
    it.

    The first slot of an input that has ended stops the mix, or with ``until_all`` that
    input's slots are passed over and the others go on. Closing it closes every stream.
    """
    if len(weights) != len(streams):
        raise UsageError(f"--mix has {len(weights)} weights for {len(streams)} inputs")
    # Epoch 0 of a one-worker, one-rank loader: tarcat --mix previews the loader's mix.
    schedule = MixSchedule(weights, seed=preview_seed(seed))
    active = [True] * len(streams)
    left = len(streams)
    slot = 0
    try:
        while left:
            index = schedule.source_at(slot)
            slot += 1
            if not active[index]:
                continue
            try:
                item = next(streams[index])
            except StopIteration:
                if not until_all:
                    return
                active[index] = False
                left -= 1
                continue
            yield item
    finally:
        for stream in streams:
            close_iterator(stream)


def parse_weights(text: str) -> list[float]:
    """Parse ``--mix`` weights: positive numbers separated by commas.

    >>> parse_weights("3,1,0.5")
    [3.0, 1.0, 0.5]
    """
    try:
        weights = [float(w) for w in text.split(",")]
    except ValueError:
        raise UsageError(f"--mix {text!r}: expected weights like 3,1,1") from None
    if not all(w > 0 and math.isfinite(w) for w in weights):
        raise UsageError(f"--mix {text!r}: every weight must be a positive number")
    return weights


ReadOptions = dict[str, object]  # keyword arguments of source_samples


class _Prefetch:
    """One input read by a thread into a buffer of at most ``limit`` bytes of samples."""

    def __init__(self, spec: str, options: ReadOptions, limit: int) -> None:
        self._spec = spec
        self._options = options
        self._limit = limit
        self._ready = threading.Condition()
        self._samples: deque[Sample] = deque()
        self._bytes = 0
        self._finished = False
        self._error: BaseException | None = None
        self._stopped = False
        self._source: Source | None = None
        if location(spec).kind == PIPE:
            # Started here rather than in the thread, so that stop() can always end it.
            try:
                self._source = open_source(spec)
            except BaseException as exc:
                self._finished, self._error = True, exc
                return
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        ready = self._ready
        error: BaseException | None = None
        try:
            with self._source or open_source(self._spec) as source:
                with ready:
                    self._source = source
                    if self._stopped:
                        source.close(early=True)
                        return
                for sample in source_samples(source, **self._options):  # type: ignore[arg-type]
                    size = sample.size
                    with ready:
                        while (
                            self._samples and self._bytes + size > self._limit
                            and not self._stopped
                        ):  # fmt: skip
                            ready.wait()
                        if self._stopped:
                            source.close(early=True)
                            return
                        self._samples.append(sample)
                        self._bytes += size
                        ready.notify_all()
        except BaseException as exc:  # handed to the consumer, raised where it belongs
            error = exc
        finally:
            with ready:
                self._finished = True
                self._error = None if self._stopped else error
                ready.notify_all()

    def __iter__(self) -> Iterator[Sample]:
        ready = self._ready
        while True:
            with ready:
                while not self._samples and not self._finished:
                    ready.wait()
                if not self._samples:
                    if self._error is not None:
                        error, self._error = self._error, None
                        raise error
                    return
                sample = self._samples.popleft()
                self._bytes -= sample.size
                ready.notify_all()
            yield sample

    def stop(self) -> None:
        """Make the thread stop and close its input; a ``pipe:`` command is killed, so a
        thread waiting for its output stops too, as closing it early would."""
        with self._ready:
            self._stopped = True
            self._samples.clear()
            self._bytes = 0
            self._ready.notify_all()
            process = self._source.process if self._source is not None else None
        if process is not None and not self._finished:
            process.kill()


def read_ahead(specs: Sequence[str], parallel: int, limit: int = READ_AHEAD_BYTES,
               **options: object) -> Iterator[Sample]:  # fmt: skip
    """The samples of each input in ``specs`` in order, with up to ``parallel`` being read.

    ``options`` go to :func:`~tarkit.stream.stages.source_samples`. Input ``k + parallel``
    starts when input ``k`` is done. Each thread holds at most ``limit`` bytes of samples
    (or one sample) ahead of the consumer. An error in an input is raised after all of
    its samples before the error, when the consumer reaches it; errors of later inputs
    wait until then. Closing it stops every thread.
    """
    check_parallel(parallel)
    started: deque[_Prefetch] = deque()
    waiting = deque(specs)
    try:
        while waiting or started:
            while waiting and len(started) < parallel:
                started.append(_Prefetch(waiting.popleft(), options, limit))
            yield from started[0]
            started.popleft()
    finally:
        for prefetch in started:
            prefetch.stop()


class _SharedSkips(SkipLog):
    """A SkipLog that threads can add to: counts go to ``target`` under a lock."""

    def __init__(self, target: SkipLog) -> None:
        super().__init__(None)
        self._target = target
        self._lock = threading.Lock()

    def add(self, reason: str, source: str, member: str) -> None:
        with self._lock:
            self._target.add(reason, source, member)


def combine_inputs(
    inputs: Sequence[str],
    *,
    interleaved: bool = False,
    weights: str | Sequence[float] | None = None,
    seed: int = 0,
    until_all: bool = False,
    parallel: int = 1,
    strict: bool = False,
    skips: SkipLog | None = None,
    ignore_zeros: bool = False,
    allow_empty: bool = False,
) -> Iterator[Sample]:
    """The samples of ``inputs`` (brace-expanded; none: stdin) combined as asked.

    In order by default (``parallel`` > 1 reads that many inputs at once), round robin
    with ``interleaved``, or drawn by ``weights`` (``"3,1"`` or a list, one per input)
    with ``seed``. Raises :class:`~tarkit.errors.UsageError` for contradicting options.
    """
    check_parallel(parallel)
    if interleaved and weights is not None:
        raise UsageError("--interleave and --mix exclude each other")
    if until_all and weights is None:
        raise UsageError("--until-all needs --mix")
    if parallel != 1 and (interleaved or weights is not None):
        raise UsageError("-p reads inputs ahead in order: it does not combine with "
                         "--interleave or --mix")  # fmt: skip
    options = dict(strict=strict, ignore_zeros=ignore_zeros, allow_empty=allow_empty)
    if not interleaved and weights is None and parallel == 1:
        return read_samples(inputs, skips=skips, **options)  # type: ignore[arg-type]
    specs = expand_inputs(inputs)
    if weights is not None:
        parsed = parse_weights(weights) if isinstance(weights, str) else list(weights)
        if len(parsed) != len(specs):
            raise UsageError(f"--mix has {len(parsed)} weights for {len(specs)} inputs")
    if parallel > 1:
        check_local_files(specs)  # (read_samples checks its own)
        shared = _SharedSkips(skips) if skips is not None else None
        return read_ahead(specs, parallel, skips=shared, **options)
    streams = [read_samples([spec], skips=skips, **options) for spec in specs]  # type: ignore[arg-type]
    if interleaved:
        return interleave(streams)
    return mix(streams, parsed, seed=seed, until_all=until_all)
