"""loading: training from shards with PyTorch (this folder alone imports torch).

:class:`ShardDataset` gives every sample exactly once per epoch over ranks and DataLoader
workers; :func:`loader` is a DataLoader over it that batches inside the workers.
"""

from .dataset import ShardDataset
from .loader import ShardLoader, loader
from .skips import SkipCounts

__all__ = ["ShardDataset", "ShardLoader", "SkipCounts", "loader"]
