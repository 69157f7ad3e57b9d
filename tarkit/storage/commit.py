"""A set of files committed whole: staged files take their names, the files they replace
go, and a manifest is published last, through a journal that the next run finishes.

A writer that replaces a set of files (``mode="overwrite"``: new shards and their indexes
under pending names, old ones to remove, a manifest listing the new set) must never leave
a mix of the two sets, whatever stops it. :func:`commit_files` does it in this order:

1. the journal (a hidden ``.NAME.commit.json`` in the files' directory) is published
   atomically, listing every move, every removal and the bytes of the manifest's files
   (its columns file, then its JSON). It is written only once every new file is
   complete, so from that moment the new set is whole (in the staged files) and the
   commit only goes forward;
2. the manifest at the manifest's place is removed, so that no reader takes the old
   manifest for files that are changing under it;
3. each staged file takes its name (a local rename; on an object store a copy within
   the store and a delete), then the replaced files are removed;
4. the manifest's files are published, its JSON last: the set is committed;
5. the journal is removed.

A run stopped anywhere in 2–5 (SIGKILL, a crash, a failed request) leaves the journal:
:func:`finish_commit`, which every writer calls before it looks at its place, does steps
2–5 again (each is idempotent: a move whose staged file is gone is taken as done when the
target has the journal's size). A run stopped before step 1 leaves no journal and the old
set as it was; the writer removes its staged files (or the next run does). While a local
commit runs, SIGINT and SIGTERM are held and delivered once it is done, so Ctrl-C gives
the old set or the new one, not a journal to finish (a second Ctrl-C stops it at once:
on a slow disk a commit of thousands of files can take seconds). On an object store a commit copies
every object, which can take minutes: signals are not held there, and a commit they stop
is finished by the next run.

A journal is data found in the output place, which someone else may have written (an
output directory copied from elsewhere, a shared one): the run that finishes it follows
it only as far as its own set goes (:mod:`tarkit.storage.commit_scope`: names inside the
journal's directory, no link out of it, staged copies moved onto files of the set, files
of the set or stale manifests of it removed, a manifest of the set beside the journal),
and refuses the whole journal otherwise. A manifest elsewhere (in another directory) is
removed and published by the commit itself, not through the journal: a commit finished
by the next run leaves none there (the next run that writes one writes it).

Readers of local files refuse a set that a journal names (:func:`unfinished_files`,
looking in each file's directory and the few above it, where the journal of a pattern
with the shard number in a directory lies): they would read a mix. A reader by manifest
finds none while a commit is unfinished.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import glob
import json
import os
import signal
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

from ..errors import OutputError
from .commit_scope import CommitScope, beside, inside, refusal
from .filesystems import StorageOptions, object_info
from .listing import move_file, remove_file
from .locations import location, relative_url, resolve_url
from .outputs import publish
from .sources import JOURNAL_LIMIT, read_bytes

JOURNAL_ENDING = ".commit.json"
JOURNAL_FORMAT, JOURNAL_VERSION = "tarkit-commit", 2  # 2: the manifest's files, base64
HELD = (signal.SIGINT, signal.SIGTERM)
# How many directories above a file the journal naming it may lie: that of a pattern
# with the shard number in up to this many directory levels (out/{shard:03d}/x.tar: 1).
JOURNAL_DEPTH = 3

ManifestBytes = tuple[str, bytes]  # where a file of the manifest goes, and its bytes


@dataclass(frozen=True)
class Move:
    """A complete staged file ``source`` that takes the name ``target``; ``size``: its
    bytes (how a finished move is recognised)."""

    source: str
    target: str
    size: int


@dataclass(frozen=True)
class Journal:
    """What a commit does: the staged files that take their names, the files removed,
    and the files of the manifest published last, its JSON last of all (none, or a
    manifest outside the journal's directory: empty)."""

    moves: list[Move]
    removals: list[str]
    manifest: list[ManifestBytes]

    def to_bytes(self, journal: str) -> bytes:
        """The journal's file at ``journal``: every location relative to it. Raises
        :class:`~tarkit.errors.OutputError` for one outside its directory (a bug)."""
        entries = {
            "format": JOURNAL_FORMAT,
            "version": JOURNAL_VERSION,
            "moves": [
                [_named(journal, m.source), _named(journal, m.target), m.size] for m in self.moves
            ],  # fmt: skip
            "remove": [_named(journal, url) for url in self.removals],
            "manifest": [
                [_named(journal, where), base64.b64encode(data).decode("ascii")]
                for where, data in self.manifest
            ],
        }
        # ASCII: a name that is not UTF-8 survives as a \udcXX escape.
        return (json.dumps(entries, ensure_ascii=True) + "\n").encode("ascii")

    @classmethod
    def parse(cls, data: bytes, journal: str) -> Journal:
        """The journal read from ``journal``; raises :class:`~tarkit.errors.OutputError`
        when it is not one, or names a file outside its directory."""
        try:
            entries = json.loads(data)
            version = entries["version"]
            if entries["format"] != JOURNAL_FORMAT or version not in (1, JOURNAL_VERSION):
                raise ValueError("another format")
            moves = [
                Move(_resolved(journal, source), _resolved(journal, target), int(size))
                for source, target, size in entries["moves"]
            ]
            removals = [_resolved(journal, url) for url in entries["remove"]]
            manifest = entries["manifest"]
            if version == 1:  # one JSON manifest as text, or null
                manifest = [] if manifest is None else [(manifest[0], manifest[1].encode())]
            else:
                manifest = [
                    (where, base64.b64decode(data, validate=True)) for where, data in manifest
                ]
            manifest = [(_resolved(journal, where), data) for where, data in manifest]
        except (ValueError, KeyError, TypeError, AttributeError, UnicodeError, binascii.Error):
            raise OutputError(
                f"{journal}: not the journal of a tarkit commit, or one naming files outside "
                "its directory: remove it by hand if nothing else wrote it"
            ) from None
        return cls(moves, removals, manifest)


def commit_files(
    journal: str,
    moves: Sequence[Move],
    removals: Sequence[str],
    manifest: Sequence[ManifestBytes] = (),
    storage_options: StorageOptions | None = None,
) -> None:
    """Commit a set (the module docstring): the staged files of ``moves`` take their
    names, ``removals`` (those not also a target) are removed, and the files of
    ``manifest`` (location and bytes: its columns file, then its JSON) are published
    last, in order, through ``journal``. The files must lie in the journal's directory
    or below it; the manifest may lie anywhere (its files in one directory).

    Raises :class:`~tarkit.errors.OutputError` when a step fails; the journal then stays
    and the next :func:`finish_commit` completes the set.
    """
    targets = {location(move.target).identity() for move in moves}
    gone = [url for url in removals if location(url).identity() not in targets]
    outside = any(not beside(journal, where) for where, _ in manifest)
    entries = Journal(list(moves), gone, [] if outside else list(manifest))
    data = entries.to_bytes(journal)
    with _held_signals(not location(journal).remote):
        try:
            publish(journal, data, storage_options)
        except BaseException:  # no journal: the old set stays, the staged files go
            for move in entries.moves:
                with contextlib.suppress(OutputError):
                    remove_file(move.source, storage_options)
            raise
        _apply(journal, entries, storage_options, manifest if outside else ())


def finish_commit(
    journal: str, scope: CommitScope, storage_options: StorageOptions | None = None
) -> bool:
    """Complete the commit an interrupted run left at ``journal``, if any: whether there
    was one. ``scope`` is the set of the run that finishes it: a journal that does
    anything the commit of that set never does (the module docstring) is refused whole.
    Raises :class:`~tarkit.errors.OutputError` when it cannot be completed (a file it
    needs is gone), is refused, or is not a journal."""
    data = read_bytes(journal, storage_options, limit=JOURNAL_LIMIT)
    if data is None:
        return False
    entries = Journal.parse(data, journal)
    moves = [(move.source, move.target) for move in entries.moves]
    refused = refusal(journal, moves, entries.removals, entries.manifest, scope, storage_options)
    if refused is not None:
        raise OutputError(
            f"{journal}: not followed: {refused}, which the commit of these files never "
            "does. Someone else wrote this journal? Remove it by hand (after a look at "
            "what it names)"
        )
    with _held_signals(not location(journal).remote):
        _apply(journal, entries, storage_options)
    return True


def journal_above(urls: Sequence[str], name: str) -> str | None:
    """The journal called ``name`` of a commit of ``urls``: in the deepest directory
    above them all (local files: as an absolute path); None when they are not in one
    store.

    >>> journal_above(["/d/a/x.tar", "/d/b/y.tar"], ".j.commit.json")
    '/d/.j.commit.json'
    >>> journal_above(["s3://b/o/x", "s3://b/o/y"], ".j"), journal_above(["s3://b/x", "gs://c/y"], ".j")
    ('s3://b/o/.j', None)
    """
    places = [location(url) for url in urls]
    if all(place.is_file for place in places):
        heads = [os.path.dirname(os.path.abspath(place.path)) for place in places]
        return os.path.join(os.path.commonpath(heads), name)
    if not all(place.remote for place in places):
        return None
    common = os.path.commonprefix([url.rpartition("/")[0].split("/") for url in urls])
    if len(common) < 3 or not common[0].endswith(":") or common[1]:  # scheme://store
        return None
    return "/".join([*common, name])


def unfinished_files(urls: Sequence[str]) -> dict[str, str]:
    """The local files among ``urls`` that the journal of an unfinished commit names,
    each with that journal: a mix of two sets until a writer finishes it. Journals are
    looked for in each file's directory and the :data:`JOURNAL_DEPTH` directories above
    it (one listing per directory)."""
    by_directory: dict[str, list[tuple[str, str]]] = {}  # directory: (url, absolute path)
    for url in urls:
        where = location(url)
        if where.is_file:
            path = os.path.abspath(where.path)
            by_directory.setdefault(os.path.dirname(path), []).append((url, path))
    listed: dict[str, list[str]] = {}  # directory: the journals in it
    named: dict[str, set[str]] = {}  # journal: the absolute paths it changes
    found: dict[str, str] = {}
    for directory, files in by_directory.items():
        for journal, changed in journals_above(directory, listed, named).items():
            for url, path in files:
                if path in changed:
                    found.setdefault(url, journal)
    return found


def journals_above(
    directory: str,
    listed: dict[str, list[str]] | None = None,
    named: dict[str, set[str]] | None = None,
) -> dict[str, set[str]]:
    """The journals of unfinished commits in the local ``directory`` (absolute) and the
    :data:`JOURNAL_DEPTH` directories above it, each with the absolute paths it changes;
    ``listed`` and ``named`` keep the listings and journals read, for the next call."""
    listed = {} if listed is None else listed
    named = {} if named is None else named
    journals: list[str] = []
    for _ in range(JOURNAL_DEPTH + 1):
        if directory not in listed:
            pattern = os.path.join(glob.escape(directory), f".*{JOURNAL_ENDING}")
            listed[directory] = glob.glob(pattern)
        journals += listed[directory]
        directory, child = os.path.dirname(directory), directory
        if directory == child:
            break
    for journal in journals:
        if journal not in named:
            named[journal] = _changed_files(journal)
    return {journal: named[journal] for journal in journals}


def _changed_files(journal: str) -> set[str]:
    """The absolute paths of the files the local journal ``journal`` changes (its moves'
    targets, its removals); none when it is gone (the commit ended) or is not one."""
    try:
        with open(journal, "rb") as stream:
            data = stream.read(JOURNAL_LIMIT + 1)
        if len(data) > JOURNAL_LIMIT:
            return set()  # larger than any tarkit writes: not a journal
        entries = Journal.parse(data, journal)
    except (OSError, OutputError):
        return set()
    changed = [move.target for move in entries.moves] + entries.removals
    return {os.path.abspath(location(url).path) for url in changed}


def _named(journal: str, url: str) -> str:
    """How the journal names ``url``: relative to it, in its directory or below; raises
    :class:`~tarkit.errors.OutputError` for a location elsewhere (a bug: a commit's files
    lie there)."""
    head, _, name = url.rpartition("/")
    # Beside it, as nearly all are: what relative_url says, without its path arithmetic.
    named = name if head == journal.rpartition("/")[0] else relative_url(journal, url)
    if not inside(named):
        raise OutputError(f"{url}: not in the directory of the commit journal {journal}")
    return named


def _resolved(journal: str, named: object) -> str:
    """Where ``named``, read from the journal at ``journal``, is; a location that is
    not inside the journal's directory raises ValueError."""
    if not isinstance(named, str) or not inside(named):
        raise ValueError("not a location inside the journal's directory")
    return resolve_url(journal, named)


def _apply(
    journal: str, entries: Journal, storage_options: StorageOptions | None,
    outside: Sequence[ManifestBytes] = (),
) -> None:  # fmt: skip
    """Steps 2–5 of the module docstring (``outside``: the files of a manifest outside
    the journal's directory, removed and published here too). Raises
    :class:`~tarkit.errors.OutputError` when one fails (the journal stays, for the next
    run) or a file the commit needs is gone."""
    manifest = entries.manifest or outside
    try:
        if manifest:
            remove_file(manifest[-1][0], storage_options)  # the JSON: the commit point
        lost = _moves(entries, storage_options)
        if lost is None:
            for url in entries.removals:
                remove_file(url, storage_options)
            for where, data in manifest:
                publish(where, data, storage_options)
            remove_file(journal, storage_options)
    except OutputError as exc:
        raise OutputError(
            f"{exc} (the commit of a new set stopped midway: the next run into these files, "
            "with any mode, finishes it)"
        ) from None
    if lost is not None:
        raise OutputError(
            f"{lost.target}: cannot finish the commit of {journal}: neither the new file "
            f"nor its staged copy {lost.source} is there; remove the journal and the files "
            "by hand and write the set again"
        )


def _moves(entries: Journal, storage_options: StorageOptions | None) -> Move | None:
    """Give each staged file its name; stop at a move whose files are gone, and return it."""
    for move in entries.moves:
        if _size(move.source, storage_options) is not None:
            move_file(move.source, move.target, storage_options)
        elif _size(move.target, storage_options) != move.size:
            return move
    return None


def _size(spec: str, storage_options: StorageOptions | None) -> int | None:
    """The bytes of the file or object ``spec``; None when there is none."""
    where = location(spec)
    if where.remote:
        found = object_info(spec, storage_options)
        return None if found is None else found.size
    try:
        return os.path.getsize(where.path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise OutputError(f"{spec}: cannot read its details: {exc.strerror}") from None


@contextlib.contextmanager
def _held_signals(hold: bool) -> Iterator[None]:
    """Hold SIGINT and SIGTERM until the block ends, then deliver the first that came
    (to the handler that was in place); a second one acts at once (the journal lets the
    next run finish what is stopped). Only the main thread can; elsewhere, and without
    ``hold``, signals act at once.

    Handlers, not the signal mask (as :mod:`tarkit.processing.jobs` holds them for the
    microseconds of a start): a commit can take seconds, and a masked signal cannot be
    told from a second one, which must still stop it."""
    if not hold or threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    before: dict[int, Any] = {number: signal.getsignal(number) for number in HELD}
    held = [number for number, handler in before.items() if handler is not None]

    def restore() -> None:
        for number in held:
            signal.signal(number, before[number])

    def note(number: int, frame: FrameType | None) -> None:
        if not arrived:
            arrived.append(number)
            return
        arrived.clear()  # a second signal: the one before is delivered now, with it
        restore()
        handler = before[number]
        if callable(handler):
            handler(number, frame)
        else:
            signal.raise_signal(number)

    for number in held:
        signal.signal(number, note)
    try:
        yield
    finally:
        restore()
        if arrived:
            signal.raise_signal(arrived[0])
