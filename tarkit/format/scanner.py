"""The compiled member scanner and the switch between it and the pure-Python reader.

The reader (:func:`~tarkit.format.tar.read_members`) and the grouping
(:func:`~tarkit.format.samples.group_samples`) are pure Python. The per-member work on the
common case, a run of ordinary ustar/GNU/v7 headers of regular files, costs a few
microseconds there; ``_scan`` (``_scan.c``, a small CPython extension) does it in a fraction
of that: it checks each header (octal fields, checksum, type, name), splits key and field,
groups members into samples and hands back finished samples as spans of the read buffer,
so that copying them unchanged is a few large writes. Every header it does not take whole
(extension headers, other member types, base-256 numbers, a checksum that does not add up,
a zero block, a member cut by the end of the buffer, a key seen before, fields that may
repeat) it leaves to the Python code, which raises every error.

Every rule is in Python, and the C code re-checks a subset of them to decide that a header
is ordinary enough to take whole: the type flag, the octal fields, the unsigned checksum,
the ustar magic of a name with a prefix, the member complete in the buffer, the key/field
split of the name, a key not seen before and fields surely distinct. A header that fails
any of them goes to Python, so the scanner only ever accepts less than the Python reader
and never words an error. The two are held to that on every test and fuzz case: every
reader test runs both ways (the ``reader`` fixture of tests/conftest.py), and the mutation
fuzzer (fuzz/mutations.py ``disagreement``, run in CI by tests/robustness/test_fuzz.py)
reads every case with both, whole and in small pieces, and compares output, samples and
error (class, message, offset, member).

Why the CPython C API rather than Cython: the scanner is a few hundred lines that only
read bytes and build tuples, lists, strings and instances of two Python classes, which the
C API does directly (and lets it fill ``Sample``'s slots without calling ``__init__``);
Cython would add a build dependency, and its version to pin, to every install from source,
while the C API needs only a C compiler and Python's headers, which ``bin/setup`` installs.
The extension is optional (``setup.py``): without a compiler tarkit installs and the pure
reader runs. A test (tests/format/test_scanner.py) fails when the built module is older
than ``_scan.c``: rebuild with ``pip install -e .``.

``TARKIT_PURE=1`` in the environment makes tarkit use the pure-Python reader even when the
extension is built (the tests run everything both ways). :data:`compiled` is the extension
module, or None when the pure reader runs.
"""

from __future__ import annotations

import os
from types import ModuleType


def _load() -> ModuleType | None:
    if os.environ.get("TARKIT_PURE", "") not in ("", "0"):
        return None
    try:
        from . import _scan  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _scan


compiled: ModuleType | None = _load()


def implementation() -> str:
    """Which reader runs: ``"compiled"`` or ``"pure"``."""
    return "pure" if compiled is None else "compiled"
