"""Seeds that are the same in every process, run and ``PYTHONHASHSEED``: every random
order tarkit makes (shard orders, shuffle buffers, mixing schedules) is seeded here."""

from __future__ import annotations

import hashlib


def stable_seed(*parts: object) -> int:
    """A 64-bit seed from ``parts``.

    >>> stable_seed(0, "shards", 3)
    14844141190811795105
    """
    text = "\x1f".join(str(part) for part in parts).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")
