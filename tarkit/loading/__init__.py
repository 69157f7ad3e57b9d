"""loading: training from shards with PyTorch.

Importing anything of this folder imports torch; elsewhere torch is imported only inside
the functions that need it (``format/encoding.py``, ``writing/workers.py``, ``demo.py``),
so ``import tarkit`` and the shell tools never load it. Which shards a source names is
:mod:`tarkit.storage.shards`' and the tar reading :mod:`tarkit.format`'s: the epochs,
their layouts, shuffle, batching and hand-over to the main process are this folder's.

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
