"""tarkit's collate gives what torch's default_collate gives: structure, types, dtypes and
values, or the same error."""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest
import torch
from loader_data import same
from torch.utils.data import default_collate

from tarkit.loading.collate import collate

Point = namedtuple("Point", "x y")


BATCHES = {
    "dicts of bytes, keys and numbers": [
        {"__key__": f"k{i}", "jpg": bytes([i]) * 3, "cls": i, "w": i / 2} for i in range(3)
    ],
    "tuples of arrays and ints": [(np.full((2, 3), i, np.uint8), i) for i in range(4)],
    "lists of tensors": [[torch.full((2,), float(i)), torch.tensor(i)] for i in range(3)],
    "float32 and bool arrays": [
        (np.ones(2, np.float32) * i, np.array([i % 2 == 0])) for i in range(3)
    ],
    "bools": [True, False, True],
    "a tuple column of bytes": (b"a", b"bc"),
    "numpy scalars": [np.float32(1.5), np.float32(2.5)],
    "named tuples": [Point(1, 2.0), Point(3, 4.0)],
    "nested dicts": [{"a": {"b": np.zeros(2, np.int64)}} for _ in range(2)],
}


@pytest.mark.parametrize("batch", BATCHES.values(), ids=BATCHES.keys())
def test_collate_equals_default_collate(batch):
    assert same(collate(list(batch) if isinstance(batch, list) else batch), default_collate(batch))


@pytest.mark.parametrize(
    "batch",
    [
        [np.zeros((2, 2)), np.zeros((3, 2))],
        [{"a": 1}, {"b": 2}],
        [(1, 2), (1,)],
        [np.array(["a"]), np.array(["b"])],
    ],
    ids=["shapes differ", "keys differ", "lengths differ", "arrays of strings"],
)
def test_collate_raises_what_default_collate_raises(batch):
    with pytest.raises(Exception) as torchs:
        default_collate(batch)
    with pytest.raises(type(torchs.value)) as ours:
        collate(batch)
    assert str(ours.value) == str(torchs.value)
