"""Which rank of a job this process is, and of how many: from ``torch.distributed`` when
it is initialised, else from the ``RANK`` and ``WORLD_SIZE`` environment variables (as
``torchrun`` sets them), else rank 0 of 1; a dataset's ``rank=``/``world_size=`` override
them."""

from __future__ import annotations

import os

import torch

from ..errors import UsageError


def distributed_rank() -> tuple[int, int]:
    """(rank, world size): from ``torch.distributed`` when initialised, else RANK/WORLD_SIZE."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    try:
        return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        raise UsageError("RANK and WORLD_SIZE must be integers") from None


def rank_and_world(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """(rank, world size): the given ones, else the detected ones; UsageError when the
    rank is not in the world."""
    detected = distributed_rank()
    rank = detected[0] if rank is None else rank
    world = detected[1] if world_size is None else world_size
    if world < 1 or not 0 <= rank < world:
        raise UsageError(f"rank {rank} is not in a world of size {world}")
    return rank, world
