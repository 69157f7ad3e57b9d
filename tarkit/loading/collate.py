"""torch's ``default_collate``, without its per-element dispatch, for the usual batches.

A batch of the loader is almost always a list of dicts, tuples or lists whose leaves are
bytes, strings, numbers, numpy arrays or tensors of one shape. :func:`collate` builds what
``default_collate`` builds for those — the same structure (a tuple becomes a list, a
dict keeps the first sample's key order, a column of bytes or strings stays the list or
tuple it was), the same dtypes and values — with one type check per sample and column
and one copy per column, into tensors it asks ``allocate`` for (a DataLoader worker's
reused shared memory: :mod:`~tarkit.loading.transport`). Anything else (numpy scalars,
named tuples, other mappings, tensors of several shapes or dtypes, arrays of strings…)
goes to ``default_collate`` itself, so its result, or its error, is exactly torch's.

>>> import numpy
>>> batch = [{"__key__": "a", "x": numpy.ones(2, "uint8"), "y": 1},
...          {"__key__": "b", "x": numpy.zeros(2, "uint8"), "y": 2}]
>>> collate(batch)
{'__key__': ['a', 'b'], 'x': tensor([[1, 1],
        [0, 0]], dtype=torch.uint8), 'y': tensor([1, 2])}
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import default_collate

from ..errors import _UnusualBatch

Allocate = Callable[[tuple[int, ...], torch.dtype], torch.Tensor]

_NUMERIC_KINDS = frozenset("biufc")  # numpy kinds torch takes (not strings or objects)
_TORCH_DTYPES: dict[np.dtype[Any], torch.dtype] = {}


def empty(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A new tensor of ``shape`` and ``dtype`` (what ``default_collate`` allocates)."""
    return torch.empty(shape, dtype=dtype)


def collate(batch: list[Any], allocate: Allocate = empty) -> Any:
    """``default_collate(batch)``: the same result, or the same error."""
    try:
        return _collate(batch, allocate)
    except (_UnusualBatch, LookupError, TypeError, ValueError, RuntimeError):
        return default_collate(batch)


def _collate(batch: Sequence[Any], allocate: Allocate) -> Any:
    elem = batch[0]
    kind = type(elem)
    if kind is bytes or kind is str:
        return batch  # default_collate gives the column itself, list or tuple
    if kind is np.ndarray:
        return _stack_arrays(batch, elem, allocate)
    if kind is torch.Tensor:
        return _stack_tensors(batch, elem, allocate)
    if kind is int or kind is bool:
        return torch.tensor(batch)
    if kind is float:
        return torch.tensor(batch, dtype=torch.float64)
    if kind is dict:
        for item in batch:
            if type(item) is not dict:
                raise _UnusualBatch
        return {key: _collate([item[key] for item in batch], allocate) for key in elem}
    if kind is tuple or kind is list:
        size = len(elem)
        for item in batch:
            if type(item) is not kind or len(item) != size:
                raise _UnusualBatch
        return [_collate(column, allocate) for column in zip(*batch, strict=True)]
    raise _UnusualBatch


def _stack_arrays(batch: Sequence[Any], elem: np.ndarray, allocate: Allocate) -> torch.Tensor:
    dtype, shape = elem.dtype, elem.shape
    if dtype.kind not in _NUMERIC_KINDS or not dtype.isnative:
        raise _UnusualBatch
    for item in batch:
        if type(item) is not np.ndarray or item.dtype != dtype or item.shape != shape:
            raise _UnusualBatch
    torch_dtype = _TORCH_DTYPES.get(dtype)
    if torch_dtype is None:
        torch_dtype = _TORCH_DTYPES[dtype] = torch.from_numpy(np.empty(0, dtype)).dtype
    out = allocate((len(batch), *shape), torch_dtype)
    np.stack(batch, out=out.numpy())
    return out


def _stack_tensors(batch: Sequence[Any], elem: torch.Tensor, allocate: Allocate) -> torch.Tensor:
    dtype, shape = elem.dtype, elem.shape
    for item in batch:
        if (
            type(item) is not torch.Tensor
            or item.dtype != dtype
            or item.shape != shape
            or item.device.type != "cpu"
            or item.layout != torch.strided
            or item.requires_grad
            or item.is_quantized
            or not item.is_contiguous()
        ):
            raise _UnusualBatch
    out = allocate((len(batch), *shape), dtype)
    torch.stack(list(batch), 0, out=out)
    return out
