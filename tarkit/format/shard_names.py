"""Shard names: the names of a dataset's shards, in order, kept compact.

Names are what a manifest stores (relative to it, or paths and URLs as given). Shards
numbered consecutively (``train-000000.tar`` … ``train-999999.tar``) are one printf
pattern and the first number, however many there are; other names are kept as one UTF-8
blob and the end of each name rather than a list of strings.

>>> names = ShardNames.of(["s-09.tar", "s-10.tar", "s-11.tar"])
>>> names.pattern, names.first, len(names), names[2]
('s-%02d.tar', 9, 3, 's-11.tar')
>>> ShardNames.numbered("s-%02d.tar", 9, 92)[91]  # past the padding's width
's-100.tar'
>>> ShardNames.of(["a.tar", "b.tar"]).pattern is None
True
"""

from __future__ import annotations

import functools
import re
from array import array
from collections.abc import Iterator, Sequence
from itertools import accumulate

from ..errors import InputError

MAX_WIDTH = 20  # digits of padding a pattern may ask for
_PATTERN = re.compile(r"(?:[^%]|%%)*%(0[0-9]+)?d((?:[^%]|%%)*)", re.S)
_DIGITS = re.compile(r"[0-9]+")


def is_pattern(text: str) -> bool:
    """Whether ``text`` is a name pattern: one ``%d`` or ``%0Nd`` (N ≤ 20) and ``%%``.

    >>> is_pattern("train-%06d.tar"), is_pattern("100%%-%d.tar"), is_pattern("%s.tar")
    (True, True, False)
    """
    match = _PATTERN.fullmatch(text)
    return match is not None and (match.group(1) is None or int(match.group(1)) <= MAX_WIDTH)


class ShardNames:
    """The names of a dataset's shards in order: ``pattern % number`` for the numbers
    from ``first`` (``pattern`` is None for names that are not one pattern)."""

    __slots__ = ("pattern", "first", "_count", "_blob", "_ends")

    def __init__(
        self, pattern: str | None, first: int, count: int, blob: bytes | bytearray, ends: array
    ) -> None:  # fmt: skip
        self.pattern = pattern
        self.first = first
        self._count = count
        self._blob = blob
        self._ends = ends  # array("q"): where each name ends in the blob

    @classmethod
    def numbered(cls, pattern: str, first: int, count: int) -> ShardNames:
        """``count`` names of ``pattern`` (see :func:`is_pattern`) numbered from ``first``."""
        if not is_pattern(pattern) or first < 0 or count < 0:
            raise ValueError(f"not a name pattern numbered from {first}: {pattern!r}")
        return cls(pattern, first, count, b"", array("q"))

    @classmethod
    def listed(cls, names: Sequence[str]) -> ShardNames:
        """``names`` as they are, without looking for a pattern."""
        encoded = [name.encode("utf-8", "surrogatepass") for name in names]
        ends = array("q", accumulate(map(len, encoded)))
        return cls(None, 0, len(encoded), b"".join(encoded), ends)

    @classmethod
    def of(cls, names: Sequence[str]) -> ShardNames:
        """``names``, as a pattern when they are one numbered consecutively."""
        found = _detect(list(names))
        if found is None:
            return cls.listed(names)
        return cls.numbered(found[0], found[1], len(names))

    @classmethod
    def from_json(cls, value: object, count: int, source: str) -> ShardNames:
        """The names of a manifest's ``"names"`` (:meth:`to_json`) for ``count`` shards;
        raises :class:`~tarkit.errors.InputError` naming ``source`` when malformed."""
        if isinstance(value, dict) and set(value) == {"pattern", "first"}:
            pattern, first = value["pattern"], value["first"]
            if isinstance(pattern, str) and is_pattern(pattern) and _natural(first):
                return cls.numbered(pattern, first, count)
        elif isinstance(value, list) and all(type(name) is str for name in value):
            if len(value) == count:
                return cls.listed(value)
            raise InputError(f"{len(value)} names for {count} shards", source=source)
        raise InputError(
            'malformed "names": a list of names, or {"pattern": "name-%06d.tar", "first": 0}',
            source=source,
        )

    def to_json(self) -> dict[str, object] | list[str]:
        """The manifest's ``"names"``: the pattern form, or the list of names."""
        if self.pattern is not None:
            return {"pattern": self.pattern, "first": self.first}
        return list(self)

    def number(self, position: int) -> int:
        """The number of shard ``position``: in the pattern, else its position."""
        return self.first + position if self.pattern is not None else position

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, position: int) -> str:
        if not 0 <= position < self._count:
            raise IndexError(f"shard {position} of {self._count}")
        if self.pattern is not None:
            return self.pattern % (self.first + position)
        start = self._ends[position - 1] if position else 0
        return self._blob[start : self._ends[position]].decode("utf-8", "surrogatepass")

    def __iter__(self) -> Iterator[str]:
        if self.pattern is not None:
            return map(self.pattern.__mod__, range(self.first, self.first + self._count))
        return map(self.__getitem__, range(self._count))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ShardNames):
            return NotImplemented
        if self.pattern is not None and other.pattern is not None:
            return (self.pattern, self.first, len(self)) == (other.pattern, other.first, len(other))
        return len(self) == len(other) and list(self) == list(other)

    def __repr__(self) -> str:
        if self.pattern is not None:
            return f"ShardNames({self.pattern!r} from {self.first}, {self._count} shards)"
        return f"ShardNames({self._count} listed)"


class NamesBuilder:
    """Shard names given a run at a time (a manifest read in pieces), kept as a pattern as
    long as they fit one, so that a million numbered names never become a million strings.
    """

    def __init__(self) -> None:
        self._pending: list[str] = []  # the first names, until there are two to go by
        self._pattern: str | None = None
        self._first = 0
        self._count = 0
        self._blob: bytearray | None = None
        self._ends = array("q")

    def extend(self, names: Sequence[str]) -> None:
        """Add the next ``names`` (strings; TypeError for anything else)."""
        names = list(names)
        if self._pattern is None and self._blob is None:
            names = self._pending + names
            if len(names) < 2:
                self._pending = names
                return
            self._pending = []
            found = _detect(names)
            if found is not None:
                self._pattern, self._first = found
                self._count = len(names)
                return
            self._blob = bytearray()
        elif self._pattern is not None:
            start = self._first + self._count
            if names == numbered_names(self._pattern, start, start + len(names)):
                self._count += len(names)
                return
            earlier = numbered_names(self._pattern, self._first, start)
            self._pattern, self._blob = None, bytearray()
            self._add(earlier)
        self._add(names)

    def finish(self) -> ShardNames:
        """The names added."""
        if self._pending:
            return ShardNames.of(self._pending)
        if self._pattern is not None:
            return ShardNames(self._pattern, self._first, self._count, b"", array("q"))
        return ShardNames(None, 0, len(self._ends), self._blob or b"", self._ends)

    def _add(self, names: list[str]) -> None:
        assert self._blob is not None
        if not all(type(name) is str for name in names):
            raise TypeError("a shard name that is not a string")
        encoded = [name.encode("utf-8", "surrogatepass") for name in names]
        ends = accumulate(map(len, encoded), initial=len(self._blob))
        next(ends)  # the initial: where the names before end
        self._ends.extend(ends)
        self._blob += b"".join(encoded)


def _detect(names: list[str]) -> tuple[str, int] | None:
    """The pattern and first number of ``names`` when they are one pattern numbered
    consecutively, else None. The pattern is found in the first name's digits (its last
    run of digits that fits): padded to the run's width when it starts with a 0."""
    if not names or type(names[0]) is not str:
        return None
    first_name = names[0]
    for match in reversed(list(_DIGITS.finditer(first_name))):
        run = match.group()
        width = len(run) if run[0] == "0" and len(run) > 1 else 0
        if width > MAX_WIDTH:
            continue
        conversion = f"%0{width}d" if width else "%d"
        before, after = first_name[: match.start()], first_name[match.end() :]
        pattern = before.replace("%", "%%") + conversion + after.replace("%", "%%")
        first = int(run)
        if len(names) > 1 and pattern % (first + 1) != names[1]:
            continue
        if names == numbered_names(pattern, first, first + len(names)):
            return pattern, first
    return None


def numbers_in(pattern: str, lines: str) -> list[int]:
    """The numbers of the names ``pattern`` (see :func:`is_pattern`) makes among the
    lines of ``lines``: a directory's listing matched against a million names without
    making them, in one regular expression (each number once per line it makes).

    >>> numbers_in("s-%03d.tar", "s-012.tar s-12.tar s-1000.tar t.tar s-0120.tar".replace(" ", chr(10)))
    [12, 1000]
    >>> numbers_in("%d.tar", chr(10).join(["0.tar", "07.tar", "70.tar"]))
    [0, 70]
    """
    match = _PATTERN.fullmatch(pattern)
    assert match is not None, pattern
    suffix = match.group(2)
    head = pattern[: len(pattern) - len(suffix) - len(match.group(1) or "") - 2]
    width = int(match.group(1)) if match.group(1) else 1
    # Exactly as % formats: the padded width, or more digits without a leading zero.
    digits = f"([0-9]{{{width}}}|[1-9][0-9]{{{width},}})" if width > 1 else "(0|[1-9][0-9]*)"
    name = re.escape(head.replace("%%", "%")) + digits + re.escape(suffix.replace("%%", "%"))
    # Led by a literal (the line's start and the name's head), found by a fast search.
    return list(map(int, re.findall(f"\n{name}(?=\n)", f"\n{lines}\n")))


def numbered_names(pattern: str, start: int, stop: int) -> list[str]:
    """``[pattern % n for n in range(start, stop)]``, made a thousand at a time: within a
    thousand from 1,000 on, the names differ only in their last three digits, so each is
    one string addition rather than a formatting (a fifth of the time; a manifest of a
    million numbered names is checked against them).

    >>> numbered_names("s-%02d.tar", 998, 1001)
    ['s-998.tar', 's-999.tar', 's-1000.tar']
    """
    names = list(map(pattern.__mod__, range(start, min(stop, 1000))))
    start = max(start, 1000)
    if start < stop:
        match = _PATTERN.fullmatch(pattern)
        assert match is not None, pattern
        suffix = match.group(2).replace("%%", "%")
        tails = _tails(suffix)
        while start < stop:
            block = start - start % 1000
            full = pattern % block
            head = full[: len(full) - len(suffix) - 3]
            end = min(stop, block + 1000)
            names += map(head.__add__, tails[start - block : end - block])
            start = end
    return names


@functools.lru_cache(maxsize=8)
def _tails(suffix: str) -> list[str]:
    return [f"{k:03d}{suffix}" for k in range(1000)]


def _natural(value: object) -> bool:
    return type(value) is int and value >= 0
