"""loading: training from shards with PyTorch (this folder alone imports torch).

:class:`ShardDataset` gives every sample exactly once per epoch over ranks and DataLoader
workers; :func:`loader` is a DataLoader over it that batches inside the workers.
:class:`IndexedDataset` is a map-style dataset over indexed shards (any sample by position
or key), and :class:`BlockSampler` samples map-style datasets in shuffled blocks, exactly
once per epoch.
"""

from .dataset import ShardDataset
from .indexed import IndexedDataset
from .loader import ShardLoader, loader
from .sampler import BlockSampler
from .skips import SkipCounts

__all__ = ["BlockSampler", "IndexedDataset", "ShardDataset", "ShardLoader", "SkipCounts", "loader"]
