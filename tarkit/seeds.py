"""Seeds and seeded draws that are the same in every process, run, machine and
``PYTHONHASHSEED``: every random order tarkit makes (shard orders, shuffle buffers, mixing
schedules) is seeded here, and the key split (:func:`in_split`, :class:`KeySplit`) that
``tarcat --fraction`` and ``ShardDataset(split=)`` share is drawn here."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .errors import UsageError


def stable_seed(*parts: object) -> int:
    """A 64-bit seed from ``parts``.

    >>> stable_seed(0, "shards", 3)
    14844141190811795105
    """
    import hashlib  # here, not at the top: OpenSSL's start-up is the tools' to skip

    text = "\x1f".join(str(part) for part in parts).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")


def in_split(key: str, fraction: float, seed: int = 0) -> bool:
    """Whether the sample ``key`` is in the share ``fraction`` of the split seeded ``seed``.

    It is when the 8-byte BLAKE2b digest of the UTF-8 text ``f"{seed}:{key}"`` (a key
    that is not UTF-8 as tarkit reads it, surrogate escapes back to its bytes), read as a
    big-endian integer, is below ``fraction × 2**64``. The key alone decides: the same
    answer in any order, shard, process, machine or Python version; with one seed, a
    smaller fraction keeps a subset of what a larger one keeps. For many keys,
    :func:`split_test` prepares the test once.

    >>> [in_split(key, 0.6, seed=1) for key in ("a", "b", "c", "d")]
    [True, False, False, True]
    """
    return split_test(fraction, seed)(key)


def split_test(fraction: float, seed: int = 0, invert: bool = False) -> Callable[[str], bool]:
    """:func:`in_split` as a function of the key (with ``invert``, its complement), with the
    seed's part of the digest and the bound computed once: about 1 µs a key.

    >>> keep = split_test(0.6, seed=1, invert=True)
    >>> [keep(key) for key in ("a", "b", "c", "d")]
    [False, True, True, False]
    """
    # For an integer draw, draw < fraction × 2**64 exactly when draw < ceil(fraction × 2**64)
    # (a float times a power of two is exact).
    import hashlib

    bound = math.ceil(fraction * 2.0**64)
    copy = hashlib.blake2b(f"{seed}:".encode(), digest_size=8).copy

    def test(key: str) -> bool:
        draw = copy()
        draw.update(key.encode("utf-8", "surrogateescape"))
        return (int.from_bytes(draw.digest(), "big") < bound) is not invert

    return test


class KeySplit:
    """One side of a split by key: the samples :func:`in_split` keeps (``fraction`` of
    them, seeded ``seed``), or with ``invert`` exactly the others.

    Raises :class:`~tarkit.errors.UsageError` for a fraction outside 0…1 or a seed that
    is not an integer.

    >>> train, val = KeySplit(0.6, seed=1), KeySplit(0.6, seed=1, invert=True)
    >>> [train.keeps(key) for key in "abcd"], [val.keeps(key) for key in "abcd"]
    ([True, False, False, True], [False, True, True, False])
    """

    # A plain class, not a dataclass: the shell tools import this module, and dataclasses
    # (with inspect and ast) costs them more start-up than all their own code.
    __slots__ = ("fraction", "seed", "invert")
    fraction: float
    seed: int
    invert: bool

    def __init__(self, fraction: float, seed: int = 0, invert: bool = False) -> None:
        import numbers

        if not isinstance(fraction, numbers.Real) or not 0 <= fraction <= 1:
            raise UsageError(f"a split's fraction must be between 0 and 1 (got {fraction!r})")
        if not isinstance(seed, numbers.Integral) or isinstance(seed, bool):
            raise UsageError(f"a split's seed must be an integer (got {seed!r})")
        # Plain numbers (numpy's too), as a loader state records them in JSON.
        object.__setattr__(self, "fraction", float(fraction))
        object.__setattr__(self, "seed", int(seed))
        object.__setattr__(self, "invert", bool(invert))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r}: a KeySplit is frozen")

    def __repr__(self) -> str:
        return f"KeySplit(fraction={self.fraction!r}, seed={self.seed!r}, invert={self.invert!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, KeySplit):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __reduce__(self) -> tuple[type[KeySplit], tuple[float, int, bool]]:
        return KeySplit, self._fields()

    def _fields(self) -> tuple[float, int, bool]:
        return self.fraction, self.seed, self.invert

    def keeps(self, key: str) -> bool:
        """Whether the sample ``key`` is on this side of the split."""
        return self.test()(key)

    def test(self) -> Callable[[str], bool]:
        """:meth:`keeps` prepared once, for many keys (:func:`split_test`)."""
        return split_test(self.fraction, self.seed, self.invert)

    def to_json(self) -> dict[str, Any]:
        """The split as JSON types (a loader state records it)."""
        return {"fraction": self.fraction, "seed": self.seed, "invert": self.invert}
