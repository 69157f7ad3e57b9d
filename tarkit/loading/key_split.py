"""A split by key in the loader: ``ShardDataset(split=KeySplit(0.9, seed=1))``.

The rule is :class:`tarkit.seeds.KeySplit`'s, the one ``tarcat --fraction`` (``--invert``)
uses, so the loader reads exactly the samples that ``tarcat`` would copy, with no copy of
the data. Each worker drops the samples the split leaves out as they come out of its
shuffle buffer, before ``decode``, ``map`` and batching: they are neither delivered nor
skipped (a bad shard under ``handler="skip"`` counts the samples it took with it on the
split's side only, when their keys are known: :class:`~tarkit.loading.reading.PieceReader`).
Positions, and so checkpoints, go on counting every sample of the shards (a dropped sample
is *taken* without an item), which keeps exact and elastic resume exact.

What the split changes, refused rather than made up:

- ``len()`` is not known before reading (:func:`no_length`): which samples a split keeps
  is read from their keys;
- ``equal_batches`` and mixtures (:func:`check_split`): both need each rank's (each
  source's) count of kept samples in advance;
- a resume that would derive a rank's positions from the items delivered, as ranks that
  did not take the state do (:func:`check_resumable`): under a split, ranks do not move in
  step, so each rank resumes from its own state.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..errors import UsageError
from ..seeds import KeySplit
from .epoch_layout import Topology
from .state import LoaderState


def check_split(split: KeySplit | None, *, mixture: bool, equal_batches: bool) -> None:
    """Refuse ``split`` where a count of kept samples would be needed before reading."""
    if split is None:
        return
    if not isinstance(split, KeySplit):
        raise UsageError(f"split= takes a tarkit.KeySplit(fraction, seed, invert), not {split!r}")
    if mixture:
        raise UsageError(
            "split= takes one source, not a mixture: make each source's split with "
            "tarcat --fraction F --seed S [--invert] and mix those"
        )
    if equal_batches:
        raise UsageError(
            "equal_batches needs every rank's number of samples before reading, and split= "
            "knows it only from the keys read: make the split's shards with tarcat "
            "--fraction F --seed S [--invert] (and tarindex) to train on them with equal "
            "batches"
        )


def kept(samples: Iterator[dict[str, Any]], split: KeySplit) -> Iterator[dict[str, Any]]:
    """The samples (webdataset dicts) on ``split``'s side, in order."""
    keeps = split.test()
    return (sample for sample in samples if keeps(sample["__key__"]))


def no_length() -> TypeError:
    """What ``len()`` of a dataset with a split raises."""
    return TypeError(
        "len() of a ShardDataset with split= is not known before reading: the split keeps "
        "each sample by a hash of its key (about fraction x the samples)"
    )


def check_resumable(state: LoaderState, topology: Topology, rank: int, worker: int) -> None:
    """Refuse ``state`` when resuming it on ``worker`` of ``rank`` of ``topology`` would need
    positions that the state does not record: under a split they cannot be derived from
    the items delivered, since ranks and workers keep different numbers of samples."""
    current = state.generation
    if current is None:
        return
    same = current.topology == topology
    if same and current.rank != rank:
        raise UsageError(
            f"the loader state was taken on rank {current.rank}: with split= the position "
            f"of rank {rank} cannot be derived from it (the split keeps a different number "
            "of samples on each rank): resume each rank from its own state_dict()"
        )
    if same and worker not in state.covers:
        raise UsageError(
            f"the loader state covers workers {state.covers}: with split= the position of "
            f"worker {worker} cannot be derived from it: resume from the loader's "
            "state_dict(), which covers all its workers"
        )
    for generation in [*state.history, *([] if same else [current])]:
        if generation.topology.world > 1:
            raise UsageError(
                "resuming on other ranks, workers or batch size with split= needs every "
                f"rank's position, and this state records only rank {generation.rank}'s "
                f"of a run over {generation.topology.world} ranks: resume on the same "
                "ranks, workers and batch size, each rank from its own state_dict()"
            )
