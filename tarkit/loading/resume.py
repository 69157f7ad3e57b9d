"""Where a loaded state puts each worker: the same topology continues each worker where it
stood (exact resume); another starts a new generation over what is left (elastic).

A rank's state records its own workers exactly; on the other ranks (which load the same
checkpoint, as Lightning does under DDP) each worker's position is derived from the items
every rank delivered, since ranks move in step — exact as long as nothing was skipped
under ``handler="skip"``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import UsageError
from ..format.manifest import ShardInfo
from .plans import EpochPlan, Generation, Shuffling, Topology, WorkerPosition, derive_positions
from .state import LoaderState


def resume_point(
    state: LoaderState, topology: Topology, rank: int, worker: int,
    infos: Sequence[ShardInfo] | None,
) -> tuple[list[Generation], WorkerPosition | None]:  # fmt: skip
    """(generations before the current one, this worker's position in it) for ``state``."""
    generation = state.generation
    if generation is None:
        return list(state.history), None
    if generation.topology != topology:
        if infos is None:
            raise UsageError(
                "resuming on another topology (ranks, workers or batch size) needs a manifest "
                "(tarindex -o manifest.json): what is left of the epoch is found from it"
            )
        return [*state.history, generation], None  # elastic: a new generation from zero
    return list(state.history), _position(state, generation, rank, worker, infos)[0]


def rotation(
    state: LoaderState | None, topology: Topology, rank: int, infos: Sequence[ShardInfo] | None
) -> int:
    """How far a restored rank's workers turn: DataLoader worker ``i`` plays worker
    ``(i + rotation) % workers``, so that a new DataLoader, which always starts its round
    at worker 0, goes on with the worker that was next."""
    if state is None or state.generation is None or topology.workers == 1:
        return 0
    generation = state.generation
    if generation.topology != topology or len(state.covers) != topology.workers:
        return 0  # elastic (a new generation starts at worker 0), or a single worker's
    last = _position(state, generation, rank, 0, infos)[1]
    return 0 if last is None else (last + 1) % topology.workers


def _position(
    state: LoaderState, generation: Generation, rank: int, worker: int,
    infos: Sequence[ShardInfo] | None,
) -> tuple[WorkerPosition, int | None]:  # fmt: skip
    if rank == generation.rank and generation.workers is not None and worker in state.covers:
        return generation.workers[state.covers.index(worker)], generation.last_worker
    if infos is None:
        raise UsageError(
            f"the loader state was taken on rank {generation.rank}: restoring it on rank {rank} "
            "needs a manifest (tarindex -o manifest.json), from which each rank's position "
            "is derived"
        )
    topology = generation.topology
    total = sum(info.samples for info in infos)
    plan = EpochPlan(total, state.history, Shuffling(0, 1, 0, state.epoch))
    sizes = [len(plan.worker_runs(topology, rank, w)) for w in range(topology.workers)]
    positions, last = derive_positions(sizes, topology.batch_size, generation.delivered)
    return positions[worker], last


def check_worker_state(state: LoaderState, topology: Topology, worker: int) -> None:
    """Refuse a state a DataLoader worker cannot resume on its own (torchdata restores each
    worker from its own state, so nothing else may have changed)."""
    generation = state.generation
    if generation is None:
        return
    old = generation.topology
    for name, was, now in (
        ("number of DataLoader workers", old.workers, topology.workers),
        ("number of ranks", old.world, topology.world),
        ("batch_size", old.batch_size, topology.batch_size),
        ("drop_last", old.drop_last, topology.drop_last),
        ("equal_batches", old.equal, topology.equal),
    ):
        if was != now:
            raise UsageError(
                f"the loader state was taken with {name} {was}, this loader has {now}: a "
                "StatefulDataLoader restores each worker on its own state, so they must stay "
                "the same; to resume on another cluster, checkpoint tarkit.loader(...)'s "
                "state_dict(), whose load_state_dict resumes elastically"
            )
    if state.covers != [worker]:
        raise UsageError(
            f"the loader state covers workers {state.covers}, not only worker {worker}: give "
            "a loader's state to tarkit.loader(...).load_state_dict()"
        )
