"""Shard patterns: the name of each shard, the files that already match, and what a
writer does with the files an earlier run left under its pattern.

A pattern names numbered shards with ``%06d`` or ``{shard:06d}``. It is parsed once,
where the user's string enters (a writer, ``shard_dataset``, the cluster run), into a
:class:`ShardPattern`: the names of its shards, the files that match it and the names
beside them, checked by :meth:`ShardPattern.parse`; nothing downstream parses the text
again.

A second run into the same pattern must not leave a mix of two runs' shards behind (20
new shards and 80 old ones read as one dataset with every sample twice), so every writer
of numbered shards takes a ``mode``:

- ``create`` (the default): refuse to start while files match the pattern, naming how
  many and the first (:func:`refuse_existing`).
- ``overwrite``: write the new set, each shard first under a hidden pending name
  (:func:`pending_name`); once every shard is complete, the set is committed whole
  through a journal (:mod:`tarkit.storage.commit`): the shards take their names, the
  other files that match the pattern are removed, the manifest is published last. A run
  that fails or is interrupted before the commit removes its pending shards: the old
  set is left as it was; one stopped during the commit (``kill -9``) is finished by the
  next run into the pattern, whatever its mode (:func:`settle_earlier_run`), as far as
  its journal stays within the pattern's files (:class:`PatternFiles`). The records
  of the old shards go with them, and the new shards' records (:func:`record_path`)
  take their names in the same commit; so does any manifest beside the old set that
  lists its shards alone (:func:`replaced_files`): a manifest of files that are gone.
- ``resume``: keep the complete shards of an interrupted run and continue after them,
  once the input is found to hold them (:mod:`tarkit.writing.kept`); a file matching
  the pattern that is not one of those shards is refused.

Only shard numbers from the writer's ``start`` on count, so ``start`` appends a new set
after an old one. A pattern matches a file when the file's name is the pattern with
digits where the shard number goes, however many (``s-%03d.tar`` matches ``s-0001.tar``):
:func:`existing_shards` lists them, locally or in an object store.

>>> glob, regex = pattern_glob("out/s-%03d.tar")
>>> glob, bool(regex.fullmatch("out/s-1200.tar")), bool(regex.fullmatch("out/s-x.tar"))
('out/s-*.tar', True, False)
"""

from __future__ import annotations

import glob as globbing
import os
import re
import string
from dataclasses import dataclass, field
from functools import cached_property

from ..errors import OutputError, UsageError
from ..format.compression import compression_for
from ..format.index import SUFFIX as INDEX_SUFFIX
from ..storage import (
    JOURNAL_ENDING,
    StorageOptions,
    finish_commit,
    list_files,
    location,
    pending_name,
    remove_file,
    set_manifests,
)

CREATE, OVERWRITE, RESUME = "create", "overwrite", "resume"
MODES = (CREATE, OVERWRITE, RESUME)

_PRINTF = re.compile(r"%(%|[-+ 0#]*\d*(?:\.\d+)?([diouxXs]))")
_DIGITS = {"x": ("[0-9a-f]+", 16), "X": ("[0-9A-F]+", 16), "o": ("[0-7]+", 8)}


@dataclass(frozen=True)
class ShardPattern:
    """A shard pattern, parsed once where the user's string enters (:meth:`parse`, which
    checks it): the name of each shard (:meth:`name`), the glob and regex of the files
    that match it and the shard number of each (:meth:`number`), and the names beside
    its shards (:attr:`journal`; the patterns :attr:`records`, :attr:`indexes`,
    :attr:`pending`). ``ShardPattern(text)`` parses without the check: for patterns made
    from a checked one, and for functions that also take the text.

    >>> pattern = ShardPattern.parse("out/s-%03d.tar")
    >>> pattern.name(7), pattern.glob, pattern.number("out/s-1200.tar")
    ('out/s-007.tar', 'out/s-*.tar', 1200)
    >>> pattern.records.text, pattern.pending.text
    ('out/.s-%03d.tar.shard.json', 'out/.s-%03d.tar.pending')
    """

    text: str
    # (literal text, conversion of the shard number after it, or None at the end)
    pieces: tuple[tuple[str, str | None], ...] = field(init=False, repr=False, compare=False)
    glob: str = field(init=False, repr=False, compare=False)
    regex: re.Pattern[str] = field(init=False, repr=False, compare=False)  # a group per number
    bases: tuple[int, ...] = field(init=False, repr=False, compare=False)  # of each group

    def __post_init__(self) -> None:
        pieces = _pieces(self.text)
        glob_parts, regex_parts, bases = [], [], []
        for literal, conversion in pieces:
            glob_parts.append(globbing.escape(literal))
            regex_parts.append(re.escape(literal))
            if conversion is not None:
                digits, base = _DIGITS.get(conversion, (r"[0-9]+", 10))
                glob_parts.append("*")
                regex_parts.append(f"({digits})")
                bases.append(base)
        # (frozen: set once, here)
        object.__setattr__(self, "pieces", tuple(pieces))
        object.__setattr__(self, "glob", "".join(glob_parts))
        object.__setattr__(self, "regex", re.compile("".join(regex_parts)))
        object.__setattr__(self, "bases", tuple(bases))

    @classmethod
    def parse(cls, pattern: str | ShardPattern) -> ShardPattern:
        """The user's ``pattern``, parsed; raise :class:`UsageError` unless it names a
        different file per shard (a :class:`ShardPattern` is returned as it is).

        >>> ShardPattern.parse("out.tar")
        Traceback (most recent call last):
        ...
        tarkit.errors.UsageError: shard pattern 'out.tar' has no shard number: use one %06d or {shard:06d}, as in shard-%06d.tar
        """
        if isinstance(pattern, ShardPattern):
            return pattern
        parsed = cls(pattern)
        first: str | None
        second: str | None
        try:
            first, second = parsed.name(0), parsed.name(1)
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):
            first = second = None
        if first is None or first == second:
            what = "is malformed" if "%" in pattern or "{" in pattern else "has no shard number"
            raise UsageError(
                f"shard pattern {pattern!r} {what}: use one %06d or {{shard:06d}}, as in "
                "shard-%06d.tar"
            )
        if first.endswith(("/", os.sep)):
            raise UsageError(f"shard pattern {pattern!r} names a directory, not a file")
        return parsed

    @classmethod
    def of(cls, pattern: str | ShardPattern) -> ShardPattern:
        """``pattern`` as a :class:`ShardPattern`, unchecked (for functions that take the
        text too)."""
        return pattern if isinstance(pattern, ShardPattern) else cls(pattern)

    def __str__(self) -> str:
        return self.text

    def name(self, number: int) -> str:
        """The name of shard ``number``: the pattern takes ``%06d`` or ``{shard:06d}``.

        >>> ShardPattern("s3://b/train-{shard:04d}.tar.gz").name(12)
        's3://b/train-0012.tar.gz'
        """
        if "{shard" in self.text:
            return self.text.format(shard=number)
        return self.text % number

    def number(self, url: str) -> int | None:
        """The shard number of the file ``url`` when it matches the pattern (with the same
        number wherever the pattern has one); else None."""
        match = self.regex.fullmatch(url)
        if match is None:
            return None
        numbers = {int(text, base) for text, base in zip(match.groups(), self.bases, strict=True)}
        return numbers.pop() if len(numbers) == 1 else None

    @cached_property
    def prefix(self) -> str:
        """The file name of the pattern up to the shard number.

        >>> ShardPattern("out/train-%06d.tar").prefix, ShardPattern("s3://b/{shard:04d}.tar").prefix
        ('train-', '')
        """
        return _pieces(location(self.text).basename)[0][0]

    @cached_property
    def journal(self) -> str:
        """Where the commit of an overwrite into the pattern keeps its journal: a hidden
        name in the shards' directory (for a pattern with the shard number in a directory,
        the deepest directory above every shard), so that it names them all from there.

        >>> ShardPattern("out/s-%06d.tar").journal, ShardPattern("s3://b/{shard:03d}/x.tar").journal
        ('out/.s-%06d.tar.commit.json', 's3://b/.{shard:03d}_x.tar.commit.json')
        """
        head, slash, _ = self.pieces[0][0].rpartition("/")
        rest = self.text[len(head) + len(slash) :]
        return f"{head}{slash}.{rest.replace('/', '_')}{JOURNAL_ENDING}"

    @cached_property
    def records(self) -> ShardPattern:
        """The pattern of the shards' records (:func:`record_path`)."""
        return ShardPattern(record_path(self.text))

    @cached_property
    def indexes(self) -> ShardPattern:
        """The pattern of the shards' indexes (``NAME.idx``)."""
        return ShardPattern(self.text + INDEX_SUFFIX)

    @cached_property
    def pending(self) -> ShardPattern:
        """The pattern of the names the files wait under until a commit (:func:`pending_name`)."""
        return ShardPattern(pending_name(self.text))

    @cached_property
    def target(self) -> ShardPattern:
        """The pattern where its shards are, whoever writes them: a local one made absolute
        (:meth:`~tarkit.storage.Location.identity`), so that workers on other nodes or in
        another directory write where the driver means and two specs of one place agree."""
        return ShardPattern(location(self.text).identity())

    @cached_property
    def compression(self) -> str | None:
        """The compression its shards get (:func:`~tarkit.format.compression.compression_for`)."""
        return compression_for(self.text)


def shard_name(pattern: str, number: int) -> str:
    """The name of shard ``number`` of ``pattern`` (:meth:`ShardPattern.name`).

    >>> shard_name("shard-%06d.tar", 3)
    'shard-000003.tar'
    """
    return ShardPattern(pattern).name(number)


def check_pattern(pattern: str) -> None:
    """Raise :class:`UsageError` unless ``pattern`` names a different file per shard
    (:meth:`ShardPattern.parse`)."""
    ShardPattern.parse(pattern)


def check_mode(mode: str) -> str:
    """Return ``mode`` if it is one of :data:`MODES`; else raise :class:`UsageError`.

    >>> check_mode("append")
    Traceback (most recent call last):
    ...
    tarkit.errors.UsageError: mode must be one of create, overwrite, resume (got 'append')
    """
    if mode not in MODES:
        raise UsageError(f"mode must be one of {', '.join(MODES)} (got {mode!r})")
    return mode


@dataclass(frozen=True)
class ExistingShard:
    """A file that matches a shard pattern: its shard number and location."""

    number: int
    url: str


def _pieces(pattern: str) -> list[tuple[str, str | None]]:
    """(literal text, conversion of the shard number after it, or None at the end)."""
    pieces: list[tuple[str, str | None]] = []
    if "{shard" in pattern:
        text = ""
        for literal, name, spec, _ in string.Formatter().parse(pattern):
            text += literal
            if name is not None:
                pieces.append((text, (spec or "d")[-1:]))
                text = ""
        pieces.append((text, None))
        return pieces
    position, text = 0, ""
    for match in _PRINTF.finditer(pattern):
        text += pattern[position : match.start()]
        position = match.end()
        if match.group(1) == "%":
            text += "%"
            continue
        pieces.append((text, match.group(2)))
        text = ""
    pieces.append((text + pattern[position:], None))
    return pieces


def pattern_glob(pattern: str) -> tuple[str, re.Pattern[str]]:
    """The glob that finds the files of a shard pattern, and the regex that checks one
    (a group per shard number in it): :attr:`ShardPattern.glob` and ``regex``."""
    parsed = ShardPattern(pattern)
    return parsed.glob, parsed.regex


def existing_shards(
    pattern: str | ShardPattern, start: int = 0, storage_options: StorageOptions | None = None
) -> list[ExistingShard]:
    """The files that match the shard ``pattern`` with a number from ``start`` on, in
    number order. Raises :class:`~tarkit.errors.SourceError` when the store cannot be
    listed."""
    pattern = ShardPattern.of(pattern)
    found = []
    for url in list_files(pattern.glob, storage_options):
        number = pattern.number(url)
        if number is not None and number >= start:
            found.append(ExistingShard(number, url))
    return sorted(found, key=lambda shard: (shard.number, shard.url))


def record_path(shard: str) -> str:
    """Where the record of ``shard`` lives (:mod:`tarkit.writing.shard_records`):
    ``.NAME.shard.json`` beside it (of a shard pattern: the pattern of the records,
    :attr:`ShardPattern.records`). Under ``overwrite`` a new shard's record waits under
    its :func:`pending_name`, as the shard does, and takes its name in the same commit.

    >>> record_path("out/train-000003.tar"), record_path("s3://b/train-%06d.tar")
    ('out/.train-000003.tar.shard.json', 's3://b/.train-%06d.tar.shard.json')
    """
    where = location(shard)
    return where.sibling(f".{where.basename}.shard.json")


def replaced_files(
    pattern: ShardPattern, existing: list[ExistingShard], start: int,
    storage_options: StorageOptions | None = None,
) -> list[str]:  # fmt: skip
    """What an overwrite into ``pattern`` replaces: the ``existing`` shards (from number
    ``start`` on), the records of shards of those numbers, which describe the old set
    (:func:`record_path`), and the manifests beside the set that list its files alone
    (:func:`~tarkit.storage.set_manifests`: one the new set's does not replace would
    describe files that are gone)."""
    records = existing_shards(pattern.records, start, storage_options)
    stale = set_manifests(pattern.journal, PatternFiles(pattern), storage_options)
    return [shard.url for shard in existing] + [record.url for record in records] + stale


def journal_name(pattern: str) -> str:
    """Where the commit of an overwrite into ``pattern`` keeps its journal
    (:attr:`ShardPattern.journal`)."""
    return ShardPattern(pattern).journal


def remove_pending(pattern: ShardPattern, storage_options: StorageOptions | None = None) -> None:
    """Remove the pending shards (and their pending records and indexes) an overwrite
    killed before its commit left behind."""
    for staged in (pattern, pattern.records, pattern.indexes):
        for found in existing_shards(staged.pending, 0, storage_options):
            remove_file(found.url, storage_options)


class PatternFiles:
    """The files of the set of a shard pattern (a :class:`~tarkit.storage.CommitScope`):
    the files that match it, and beside each its record (:func:`record_path`) and its
    index (``NAME.idx``). All that a journal found at the pattern's place may touch.

    >>> files = PatternFiles("out/s-%03d.tar")
    >>> [files.holds(f"out/{name}") for name in ("s-007.tar", ".s-007.tar.shard.json",
    ...                                          "s-007.tar.idx", "notes.txt", "s-x.tar")]
    [True, True, True, False, False]
    """

    def __init__(self, pattern: str | ShardPattern) -> None:
        where = ShardPattern.of(pattern).target
        self.regexes = [kind.regex for kind in (where, where.records, where.indexes)]

    def holds(self, url: str) -> bool:
        identity = location(url).identity()
        return any(regex.fullmatch(identity) for regex in self.regexes)


def settle_earlier_run(
    pattern: ShardPattern, storage_options: StorageOptions | None = None
) -> bool:
    """Before a writer looks at what lies under ``pattern``: finish the commit of an
    overwrite that was stopped after its journal was written (its new set takes its
    place, :func:`~tarkit.storage.finish_commit`, as far as the journal stays within
    :class:`PatternFiles`), then remove the pending shards of one stopped before (its old
    set stays). Whether a commit was finished (:func:`finished_earlier` says it in words:
    the caller tells the user). Every writer of numbered shards calls it first, whatever
    its mode."""
    finished = finish_commit(pattern.journal, PatternFiles(pattern), storage_options)
    remove_pending(pattern, storage_options)
    return finished


def finished_earlier(pattern: ShardPattern) -> str:
    """What a writer tells the user when it finished the commit of an earlier run
    (:func:`settle_earlier_run`)."""
    return (
        f"finished the commit of an earlier overwrite into {pattern.text} that was stopped "
        f"midway ({pattern.journal}): its new set is in place"
    )


def _files(found: list[ExistingShard], plural: str, singular: str) -> str:
    """``3 files match`` / ``1 file matches``: the count, the noun and the verb."""
    return f"{len(found)} files {plural}" if len(found) != 1 else f"1 file {singular}"


def refuse_existing(
    pattern: ShardPattern, found: list[ExistingShard], start: int = 0
) -> OutputError:
    """The error of a ``create`` writer that found files matching its pattern."""
    numbers = f" (shard numbers from {start} on)" if start else ""
    return OutputError(
        f"{pattern.text}: {_files(found, 'already match', 'already matches')} the output "
        f"pattern{numbers}, first "
        f"{found[0].url}: writing now would mix two runs' shards. Pass --overwrite "
        "(mode='overwrite') to replace them once the new shards are complete, or --resume "
        "(mode='resume') to continue the run that wrote them"
    )


def refuse_strangers(pattern: ShardPattern, found: list[ExistingShard]) -> OutputError:
    """The error of a ``resume`` writer that found files that are not its run's shards."""
    return OutputError(
        f"{pattern.text}: {_files(found, 'match', 'matches')} the output pattern but "
        f"{'are' if len(found) != 1 else 'is'} not a complete shard of the run being resumed "
        "(shards follow each other from the first number), first "
        f"{found[0].url}: they come from another run. Remove them, or pass --overwrite "
        "(mode='overwrite') to write the whole set anew"
    )
