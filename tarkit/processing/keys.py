"""A sample's key on its way to a command: whether ``TARKIT_KEY`` can hold it, and how
messages show a key or member name too long to read.

A key is passed in the command's environment, where one string may hold at most 32 pages
(Linux): a longer key is bad input for its sample (:func:`key_problem`, :func:`key_error`),
which ``on_error`` then decides on, never an "Argument list too long" from the shell.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..errors import InputError
from ..format.samples import Sample

BAD_KEY = "bad key"  # a Rejection's status: the key cannot be passed to the command
KEY_VARIABLE = "TARKIT_KEY"


def key_room(env: Mapping[str, str], text: str) -> int:
    """The longest key, in bytes, that ``TARKIT_KEY`` can pass to the command ``text`` run
    with ``env``.

    One string of a program's environment may hold at most 32 pages, its ``NAME=`` and
    final NUL included (Linux), and the arguments and the environment together at most
    ``ARG_MAX`` bytes, pointers included. Some room is kept for tarkit's own lines.
    """
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
    one_string = 32 * page - len(KEY_VARIABLE) - 2
    try:
        everything = os.sysconf("SC_ARG_MAX")
    except (AttributeError, ValueError, OSError):
        everything = 32 * page
    used = sum(len(os.fsencode(k)) + len(os.fsencode(v)) + 10 for k, v in env.items())
    used += len(os.fsencode(text)) + 4096  # the script around it, the argument list, marks
    return max(0, min(one_string, everything - used))


def key_problem(key: str, room: int) -> str | None:
    """Why ``key`` cannot go to the command in ``TARKIT_KEY`` (``room``: :func:`key_room`),
    or None if it can.

    >>> key_problem("cat7", 131060) is None
    True
    >>> key_problem("k" * 200, 100)
    "the key is too long for the command's environment (TARKIT_KEY holds at most 100 bytes)"
    """
    if len(key) * 4 <= room or len(os.fsencode(key)) <= room:
        return None
    return (
        f"the key is too long for the command's environment ({KEY_VARIABLE} holds at most "
        f"{room} bytes)"
    )


def key_error(sample: Sample, problem: str) -> InputError:
    """The :class:`InputError` of a sample whose key cannot be passed (``problem``)."""
    first = sample.members[0]
    return InputError(
        f"sample {shown_key(sample.key)}: {problem}",
        source=sample.source,
        offset=first.offset,
        member=shortened(first.name),
    )


def shown_key(key: str) -> str:
    """``repr(key)`` for a message: cut in the middle if too long to read, with its length.

    >>> shown_key("cat7")
    "'cat7'"
    >>> shown_key("k" * 30 + "x" * 200)
    "'kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkxxxxxxxxxx…xxxxxxxxxxxxxxxxxxxx' (230 bytes)"
    """
    short = shortened(key)
    if short == key:
        return repr(key)
    return f"{short!r} ({len(os.fsencode(key))} bytes)"


def shortened(text: str, limit: int = 100) -> str:
    """``text``, or if longer than ``limit`` its first 40 and last 20 characters.

    >>> shortened("x" * 50 + ".txt", limit=20)
    'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx…xxxxxxxxxxxxxxxx.txt'
    """
    if len(text) <= limit:
        return text
    return f"{text[:40]}…{text[-20:]}"
