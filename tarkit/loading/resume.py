"""Where a loaded state puts each worker: the same topology continues each worker where it
stood (exact resume); another starts a new generation over what is left (elastic).

A rank's state records its own workers exactly; on the other ranks (which load the same
checkpoint, as Lightning does under DDP) each worker's position is derived from the items
every rank delivered, since ranks move in step — exact as long as nothing was skipped
under ``handler="skip"``.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import UsageError
from .epoch_layout import Generation, Topology, WorkerPosition
from .state import LoaderState

# (generations before, the checkpointed one, a rank) → that rank's workers' positions
# derived from the items delivered, and the worker of the last item.
Derive = Callable[[list[Generation], Generation, int], tuple[list[WorkerPosition], int | None]]


def resume_point(
    state: LoaderState, topology: Topology, rank: int, worker: int, derive: Derive | None
) -> tuple[list[Generation], WorkerPosition | None]:
    """(generations before the current one, this worker's position in it) for ``state``;
    ``derive`` is None without sample counts."""
    generation = state.generation
    if generation is None:
        return list(state.history), None
    if generation.topology != topology:
        if derive is None:
            raise UsageError(
                "resuming on another topology (ranks, workers or batch size) needs a manifest "
                "(tarindex -o manifest.json): what is left of the epoch is found from it"
            )
        if generation.workers is not None and len(state.covers) != generation.topology.workers:
            raise UsageError(
                f"the loader state covers workers {state.covers} of "
                f"{generation.topology.workers}: a single DataLoader worker's state resumes "
                "only on its own topology; to resume on another, checkpoint "
                "tarkit.loader(...)'s state_dict()"
            )
        return [*state.history, generation], None  # elastic: a new generation from zero
    return list(state.history), _position(state, generation, rank, worker, derive)[0]


def rotation(
    state: LoaderState | None, topology: Topology, rank: int, derive: Derive | None
) -> int:
    """How far a restored rank's workers turn: DataLoader worker ``i`` plays worker
    ``(i + rotation) % workers``, so that a new DataLoader, which always starts its round
    at worker 0, goes on with the worker that was next."""
    if state is None or state.generation is None or topology.workers == 1:
        return 0
    generation = state.generation
    if generation.topology != topology or len(state.covers) != topology.workers:
        return 0  # elastic (a new generation starts at worker 0), or a single worker's
    last = _position(state, generation, rank, 0, derive)[1]
    return 0 if last is None else (last + 1) % topology.workers


def last_worker(state: LoaderState, rank: int, derive: Derive | None) -> int | None:
    """The worker of the last item ``rank`` delivered before ``state`` was taken."""
    if state.generation is None:
        return None
    return _position(state, state.generation, rank, 0, derive)[1]


def _position(
    state: LoaderState, generation: Generation, rank: int, worker: int, derive: Derive | None
) -> tuple[WorkerPosition, int | None]:
    if rank == generation.rank and generation.workers is not None and worker in state.covers:
        return generation.workers[state.covers.index(worker)], generation.last_worker
    if derive is None:
        raise UsageError(
            f"the loader state was taken on rank {generation.rank}: restoring it on rank {rank} "
            "needs a manifest (tarindex -o manifest.json), from which each rank's position "
            "is derived"
        )
    positions, last = derive(list(state.history), generation, rank)
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
