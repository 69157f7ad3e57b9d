"""Byte sizes and counts as people write them on a command line: ``1e9``, ``500M``, ``-p 4``.

Suffixes follow GNU ``split`` and ``sort``: ``K``, ``M``, ``G``, ``T`` (and ``KiB``…) are
powers of 1024; ``KB``, ``MB``, ``GB``, ``TB`` are powers of 1000. A bare number, in any
notation Python reads as a float (``1e9``, ``2.5e6``), is a count of bytes.

>>> parse_size("64K"), parse_size("1e9"), parse_size("1.5MB")
(65536, 1000000000, 1500000)
>>> format_size(3 * 1024**3)
'3.0 GiB'

Counts of things done at once (``-p``, ``workers``) are checked by :func:`check_parallel`,
here because every layer takes one (``stream`` reads inputs ahead, ``processing`` runs
commands and workers) and this module is the one they all may import; so is the
``--on-error`` policy (:func:`check_on_error`: ``tarproc`` and ``tarkit map`` in
``processing``, ``tarkit shard`` in ``writing``).
"""

from __future__ import annotations

import math
import re

from .errors import UsageError

# The most any count read from data may say (a shard's samples, a dataset's, an epoch): far
# above any real dataset, and low enough that sums of such counts fit the int64 columns
# and shared memory they are kept in, and ``len()``'s range. Checked where a manifest or a
# state is read (:mod:`tarkit.format.manifest`, :mod:`tarkit.format.shard_table`,
# :mod:`tarkit.loading.state`, :mod:`tarkit.loading.sampler_state`).
MAX_COUNT = 1 << 62

_SIZE = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*")
_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kib": 1 << 10,
    "kb": 10**3,
    "m": 1 << 20,
    "mib": 1 << 20,
    "mb": 10**6,
    "g": 1 << 30,
    "gib": 1 << 30,
    "gb": 10**9,
    "t": 1 << 40,
    "tib": 1 << 40,
    "tb": 10**12,
}


def parse_size(text: str | int, what: str = "size") -> int:
    """Parse a byte size; raise :class:`~tarkit.errors.UsageError` naming ``what`` if bad.

    The result is rounded down to whole bytes and must be positive.

    >>> parse_size("500M")
    524288000
    >>> parse_size("1G") == 1 << 30
    True
    >>> parse_size(4096)
    4096
    >>> parse_size("ten")
    Traceback (most recent call last):
    ...
    tarkit.errors.UsageError: size 'ten': expected a number of bytes like 1e9, 500M, 1G or 64K
    """
    if isinstance(text, int):
        value = text
    else:
        match = _SIZE.fullmatch(text)
        unit = _UNITS.get(match.group(2).lower()) if match else None
        if match is None or unit is None:
            raise UsageError(
                f"{what} {text!r}: expected a number of bytes like 1e9, 500M, 1G or 64K"
            )
        number = float(match.group(1))
        if not math.isfinite(number):
            raise UsageError(f"{what} {text!r}: not a finite number")
        value = int(number * unit)
    if value <= 0:
        raise UsageError(f"{what} {text!r}: must be at least 1 byte")
    return value


def format_size(size: int) -> str:
    """A short human reading of a byte count, in powers of 1024.

    >>> format_size(512), format_size(1536), format_size(5 * 1024**2)
    ('512 B', '1.5 KiB', '5.0 MiB')
    """
    if size < 1024:
        return f"{size} B"
    value = float(size)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            break
    return f"{value:.1f} {unit}"


def check_parallel(value: int, option: str = "-p") -> int:
    """Return ``value``, a count of things done at once; raise :class:`~tarkit.errors.UsageError`
    naming ``option`` unless it is at least 1.

    >>> check_parallel(4)
    4
    >>> check_parallel(0, "workers")
    Traceback (most recent call last):
    ...
    tarkit.errors.UsageError: workers must be at least 1 (got 0)
    """
    if value < 1:
        raise UsageError(f"{option} must be at least 1 (got {value})")
    return value


ON_ERROR = ("fail", "skip", "keep")


def check_on_error(on_error: str, policies: tuple[str, ...] = ON_ERROR) -> str:
    """Return ``on_error`` if it is one of ``policies`` (what to do with an item that
    fails: ``fail``, ``skip``, ``keep``); else raise :class:`~tarkit.errors.UsageError`.

    >>> check_on_error("retry")
    Traceback (most recent call last):
    ...
    tarkit.errors.UsageError: --on-error must be one of fail, skip, keep (got 'retry')
    """
    if on_error not in policies:
        raise UsageError(f"--on-error must be one of {', '.join(policies)} (got {on_error!r})")
    return on_error
