"""Which shards a source names: brace patterns, globs, lists, manifests and directories,
resolved once, when a dataset is built or a command starts (``ShardDataset``, ``tarkit
verify``, ``tarkit stats``). Here in storage/, not in loading/, so that a command resolves
shards as the loader does without importing torch. And whether local shards can be read at
all (:func:`check_local_files`, the one check every reader of local files makes first: they
exist, are files, and are not a set whose commit was stopped midway).

A local glob (``wds/data-*.tar``) is expanded and sorted, as the shell would; a remote one
is refused with the brace form to write instead, since a listing of a bucket is neither
cheap nor the same for every rank while shards are added. Local shards that do not exist
are an error before anything is read, with the range padded as the files are when that
names them (``data-{0..3}.tar`` for ``data-000.tar``…: "did you mean
``data-{000..003}.tar``?"); a directory that holds no shards says what it holds.

>>> import os, tempfile
>>> directory = tempfile.mkdtemp()
>>> for name in ("b.tar", "a.tar", "notes.txt"):
...     open(os.path.join(directory, name), "wb").close()
>>> [os.path.basename(u) for u in resolve_shards(directory, None)[0]]
['a.tar', 'b.tar']
"""

from __future__ import annotations

import glob
import os
import re
import stat
import sys
from collections.abc import Sequence
from itertools import islice
from typing import TYPE_CHECKING, Literal, NamedTuple

from ..errors import InputError, SourceError, UsageError
from .listing import list_files, what_directory_holds
from .locations import expand_inputs, location

if TYPE_CHECKING:
    from ..format.manifest import Manifest, ShardInfo
    from ..format.shard_table import ShardEntries, ShardTable
    from .filesystems import StorageOptions
    from .manifests import ShardUrls

BUILD_INDEX = "tarindex SHARDS… -o DIR/manifest.json"  # what makes shards random-access


def resolve_shards(
    urls: str | Sequence[str] | None,
    manifest: str | Manifest | Literal[False] | None,
    storage_options: StorageOptions | None = None,
    *,
    missing_ok: bool = False,
    compact: bool = False,
) -> tuple[Sequence[str], Sequence[ShardInfo] | None]:
    """Shard URLs and, with a manifest, their entries (see :class:`ShardDataset`'s ``urls``).

    Without a manifest (None), a ``manifest.json`` beside the shards is used when it
    lists exactly those shards; ``manifest=False`` reads them without one. Raises :class:`~tarkit.errors.SourceError` when local shards
    do not exist (naming the first and how many; ``missing_ok`` leaves them to the
    caller, which reports each) and when a local glob matches nothing,
    :class:`~tarkit.errors.UsageError` when nothing is named, a named shard is not in
    the manifest or a remote location holds a glob, and
    :class:`~tarkit.errors.InputError` for a malformed manifest and for one whose shards
    the trust rule refuses (:func:`~tarkit.storage.manifest_urls`): shards the caller
    names (``pipe:`` ones too) are read with a manifest's counts, but a manifest's own
    entries never run a command, and a remote one's never name a local file.

    ``compact``: a manifest named alone gives its shards as :class:`ShardUrls` and its
    table's :class:`~tarkit.format.shard_table.ShardEntries`, never an object per shard (what
    ``ShardDataset`` opens a million shards with); else lists.
    """
    from .manifests import load_manifest, load_table, manifest_urls  # (not at every tool's start)

    beside = manifest is None
    if manifest is False:
        manifest = None
    if isinstance(urls, str) and manifest is None and names_shard_set(urls):
        if not os.path.isdir(urls):
            urls, manifest = None, urls
        else:
            listing = os.path.join(urls, "manifest.json")
            if beside and os.path.exists(listing):
                urls, manifest = None, listing
            else:
                from ..format.file_types import SHARD_ENDINGS  # not at every tool's start

                names = sorted(n for n in os.listdir(urls) if n.endswith(SHARD_ENDINGS))
                if not names:
                    holds = what_directory_holds(urls)
                    raise UsageError(f"{urls}: no tar shards in this directory{holds}")
                urls = [os.path.join(urls, n) for n in names]
    if isinstance(manifest, str) and compact and urls is None:
        return _table_shards(load_table(manifest, storage_options), missing_ok)
    if isinstance(manifest, str):
        manifest = load_manifest(manifest, storage_options)
    expanded = None
    specs = [urls] if isinstance(urls, str) else list(urls or [])
    if urls is not None:
        expanded = _expand_globs(expand_inputs(specs))
    if manifest is None:
        if not expanded or expanded == ["-"]:
            raise UsageError("ShardDataset needs shard URLs or a manifest")
        if not missing_ok:
            check_local_files(expanded, "shards", written=specs)
        manifest = _manifest_beside(expanded) if beside else None
        if manifest is None:
            return expanded, None
    for entry in manifest.shards:
        for listed in (entry.keys, entry.offsets):
            if listed is not None and len(listed) != entry.samples:
                raise InputError(
                    f"shard {entry.url} lists {len(listed)} keys or offsets for "
                    f"{entry.samples} samples",
                    source=manifest.location or "manifest",
                )
    if expanded is None:
        if not manifest.shards:
            raise UsageError(f"{manifest.location}: the manifest lists no shards")
        urls = manifest_urls(manifest)  # opened: the trust rule refuses what data may not name
        if not missing_ok:
            check_local_files(urls, "shards")
        return urls, list(manifest.shards)
    # The shards the caller named are opened; the manifest only gives their counts.
    named = manifest_urls(manifest, opened=False)
    entries = dict(zip((location(u).identity() for u in named), manifest.shards, strict=True))
    infos: list[ShardInfo] = []
    for url in expanded:
        info = entries.get(location(url).identity())
        if info is None:
            raise UsageError(f"{url}: not in the manifest {manifest.location or ''}".rstrip())
        infos.append(info)
    return expanded, infos


def _table_shards(table: ShardTable, missing_ok: bool) -> tuple[ShardUrls, ShardEntries]:
    """The shards of a manifest's ``table``, checked as :func:`resolve_shards` checks a
    manifest's entries (a version 1 entry's keys and offsets, one per sample; the trust
    rule; local shards that exist)."""
    for shard, (keys, offsets) in table.extras.items():
        for listed in (keys, offsets):
            if listed is not None and len(listed) != table.shard_samples(shard):
                raise InputError(
                    f"shard {table.name(shard)} lists {len(listed)} keys or offsets for "
                    f"{table.shard_samples(shard)} samples",
                    source=table.location or "manifest",
                )
    from .manifests import ShardUrls

    if not len(table):
        raise UsageError(f"{table.location}: the manifest lists no shards")
    urls = ShardUrls(table)
    if not missing_ok:
        check_local_files(urls, "shards")
    return urls, table.entries()


def dataset_manifest(source: str) -> str | None:
    """The manifest of the indexed dataset ``source`` names, for random access: itself
    (``.json``), its directory's (a local directory, or a URL ending in ``/``); None for
    shards. Raises :class:`~tarkit.errors.UsageError` for a local directory without
    ``manifest.json``.

    >>> dataset_manifest("https://host/data/"), dataset_manifest("data/train-000.tar")
    ('https://host/data/manifest.json', None)
    >>> dataset_manifest("s3://bucket/manifest.json"), dataset_manifest("pipe:cat a.json")
    ('s3://bucket/manifest.json', None)
    """
    where = location(source)
    if source.endswith(".json") and (where.is_file or where.remote):
        return source
    if where.is_file and os.path.isdir(where.path):
        manifest = os.path.join(where.path, "manifest.json")
        if not os.path.isfile(manifest):
            raise UsageError(f"{source}: a directory without manifest.json{_instead(where.path)}")
        return manifest
    if where.remote and source.endswith("/"):
        return source + "manifest.json"
    return None


def _instead(directory: str) -> str:
    """What to do with a directory named as a dataset that has no manifest: index the
    shards it holds, or (holding none) make shards of what it holds."""
    from ..format.file_types import SHARD_ENDINGS  # only for this error

    if any(name.endswith(SHARD_ENDINGS) for name in os.listdir(directory)):
        return f" (build one and the shards' indexes with {BUILD_INDEX})"
    return what_directory_holds(directory)


def names_shard_set(source: str) -> bool:
    """Whether ``source`` names a set of shards (a manifest, a directory) rather than
    shards themselves: what :func:`resolve_shards` resolves alone.

    >>> names_shard_set("data/manifest.json"), names_shard_set("data/train-{000..009}.tar")
    (True, False)
    """
    return source.endswith(".json") or os.path.isdir(source)


def check_local_files(
    specs: Sequence[str], what: str = "inputs", written: Sequence[str] | None = None
) -> None:
    """Raise :class:`~tarkit.errors.SourceError` (reason ``MISSING``) when a local path
    among ``specs`` (``what`` they are) cannot be read as a shard: it does not exist
    (naming the first, and how many do not), it is a directory, or it is part of a set
    whose commit was stopped midway (reason ``UNFINISHED``:
    :func:`~tarkit.storage.unfinished.unfinished_files`). Before any work starts, not once
    per attempt in a worker; a typo or a brace range past the last shard fails here.
    Other locations are not asked here. :func:`local_problems` says it shard by shard.
    For shards resolved from ``written`` (the specs as the user wrote them), a missing
    one is always counted, and a range that names none of its files gets the range that
    would (:func:`padded_range`).

    >>> check_local_files(["/no/such/a.tar", "/no/such/b.tar", "s3://b/x.tar"])
    Traceback (most recent call last):
    ...
    tarkit.errors.SourceError: /no/such/a.tar: no such file (2 of 3 inputs do not exist)
    """
    problems = list(local_problems(specs).values())
    if not problems:
        return
    # A set stopped in its commit, or a directory, is the cause of any missing file.
    causes = [p for what in ("unfinished", "directory") for p in problems if p.what == what]
    first = (causes or problems)[0]
    shards = written is not None  # (resolve_shards: shards as the user named them)
    if first.what != "missing" or (len(specs) == 1 and not shards):
        raise first.error()
    hints = [hint for spec in written or () if (hint := padded_range(spec)) is not None]
    guess = f"; did you mean {hints[0]}?" if hints else ""
    n, do = len(problems), "does" if len(problems) == 1 and not shards else "do"
    raise SourceError(
        f"{first.spec}: no such {'shard' if shards else 'file'} ({n} of {len(specs)} {what} "
        f"{do} not exist){guess}",
        reason=SourceError.MISSING,
    )


class LocalProblem(NamedTuple):
    """Why a local file cannot be read as a shard: ``what`` is ``missing``,
    ``directory`` or ``unfinished`` (``journal``: the journal of the commit that was
    stopped); :meth:`error` is the error that says so."""

    spec: str
    what: str
    journal: str | None = None

    def text(self) -> str:
        """The problem in words, without the file's name."""
        if self.what == "missing":
            return "no such file"
        if self.what == "directory":
            return f"is a directory, not a shard{what_directory_holds(self.spec)}"
        return (
            f"part of a set whose commit was stopped midway ({self.journal}), so the files "
            "there are a mix of two runs: run the writer again (with any mode) to finish "
            "it, then read them"
        )

    def error(self) -> SourceError:
        reason = SourceError.UNFINISHED if self.what == "unfinished" else SourceError.MISSING
        return SourceError(f"{self.spec}: {self.text()}", reason=reason)


def local_problems(specs: Sequence[str]) -> dict[str, LocalProblem]:
    """The local files among ``specs`` that cannot be read as shards, in their order,
    each with its problem (see :func:`check_local_files`): one ``stat`` per file, one
    listing per directory (and the few above it) for the journals; a manifest's shards
    numbered in one directory, one listing of it instead (:func:`_numbered_problems`)."""
    # (ShardUrls come only from a manifest's table: without manifests imported, none is)
    urls_type = getattr(sys.modules.get(f"{__package__}.manifests"), "ShardUrls", None)
    if urls_type is not None and isinstance(specs, urls_type):
        if (numbered := _numbered_problems(specs)) is not None:
            return numbered
    problems: dict[str, LocalProblem] = {}
    files = [spec for spec in specs if location(spec).is_file]
    if files:  # (commits are imported here: a tool reading stdin starts without them)
        from .unfinished import unfinished_files

        for spec, journal in unfinished_files(files).items():
            problems[spec] = LocalProblem(spec, "unfinished", journal)
    for spec in specs:
        where = location(spec)
        if not where.is_file or spec in problems:
            continue
        try:
            if stat.S_ISDIR(os.stat(where.path).st_mode):
                problems[spec] = LocalProblem(spec, "directory")
        except FileNotFoundError:
            problems[spec] = LocalProblem(spec, "missing")
        except OSError:
            continue  # (opening it says what is wrong)
    order = {spec: i for i, spec in enumerate(specs)}
    return dict(sorted(problems.items(), key=lambda item: order[item[0]]))


def _numbered_problems(urls: ShardUrls) -> dict[str, LocalProblem] | None:
    """:func:`local_problems` of a manifest's local shards numbered by one pattern in one
    directory, from one listing of it (read a few thousand names at a time, their numbers
    found by one regular expression, the journals of unfinished commits among them too),
    rather than a ``stat`` per file, which at a million shards takes many seconds; None
    for other shards."""
    from ..format.shard_names import numbers_in
    from .unfinished import JOURNAL_ENDING, journals_above

    pattern = urls.pattern
    where = location(urls[0])
    if pattern is None or not where.is_file:
        return None
    directory = os.path.dirname(os.path.abspath(where.path))
    first, count = urls.names.first, len(urls)
    tail = pattern.rpartition("/")[2]
    listed: bytearray | None = None  # which shards are there, once some are missing
    problems: dict[int, LocalProblem] = {}  # by position
    while True:
        present, journals = 0, []
        try:
            with os.scandir(directory) as entries:
                while chunk := list(islice(entries, _LISTED)):
                    names = "\n".join([entry.name for entry in chunk if not entry.is_dir()])
                    journals += [n for n in _hidden(names) if n.endswith(JOURNAL_ENDING)]
                    numbers = numbers_in(tail, names)  # each once: a name is listed once
                    if listed is not None:
                        for number in numbers:
                            if first <= number < first + count:
                                listed[number - first] = 1
                        folders = "\n".join([e.name for e in chunk if e.is_dir()])
                        for number in numbers_in(tail, folders):
                            if first <= number < first + count:
                                shard = number - first
                                listed[shard] = 1
                                problems[shard] = LocalProblem(urls[shard], "directory")
                    elif numbers and first <= min(numbers) and max(numbers) < first + count:
                        present += len(numbers)
                    else:
                        present += sum(first <= n < first + count for n in numbers)
        except FileNotFoundError:
            pass  # every shard is missing
        except OSError:
            return None  # not listable: each file is asked
        if present == count or listed is not None:
            break
        listed = bytearray(count)  # some are missing: which (listed again), and why
    missing = listed.find(0) if listed is not None else -1
    while missing >= 0:
        problems[missing] = LocalProblem(urls[missing], "missing")
        missing = listed.find(0, missing + 1)  # type: ignore[union-attr]
    above = {directory: [os.path.join(directory, name) for name in journals]}
    for journal, changed in journals_above(directory, above).items():
        names = "\n".join(os.path.basename(p) for p in changed if os.path.dirname(p) == directory)
        for number in numbers_in(tail, names):
            if first <= number < first + count:
                shard = number - first
                problems[shard] = LocalProblem(urls[shard], "unfinished", journal)
    return {problem.spec: problem for _, problem in sorted(problems.items())}


_LISTED = 1 << 14  # names of a directory matched at a time


def _hidden(listing: str) -> list[str]:
    """The names starting with a dot among the lines of ``listing`` (a few among a
    million: found by searching, not by a step per line).

    >>> _hidden(chr(10).join([".a", "b", ".c.commit.json", "d"]))
    ['.a', '.c.commit.json']
    """
    text, names = "\n" + listing, []
    start = text.find("\n.")
    while start != -1:
        end = text.find("\n", start + 1)
        names.append(text[start + 1 : end if end != -1 else None])
        start = text.find("\n.", start + 1)
    return names


def _expand_globs(urls: list[str]) -> list[str]:
    """``urls`` with each local glob replaced by the files it matches, sorted (a file
    whose very name holds ``*``, ``?`` or ``[`` is itself); a glob that matches nothing
    is a SourceError, one in a remote location a UsageError that shows the brace form."""
    expanded: list[str] = []
    for url in urls:
        where = location(url)
        if where.remote and "*" in where.path.partition("?")[0]:  # a query is no glob
            example = url.replace("*", "{000000..000099}", 1).replace("*", "")
            raise UsageError(
                f"{url}: a glob names local shards only (a remote listing is slow, and "
                f"can differ between ranks): name remote shards as a brace range, such "
                f"as {example}, or by their manifest"
            )
        if not where.is_file or not glob.has_magic(where.path) or os.path.exists(where.path):
            expanded.append(url)
            continue
        found = list_files(url)
        if not found:
            raise SourceError(f"{url}: no shard matches this glob", reason=SourceError.MISSING)
        expanded.extend(found)
    return expanded


_RANGE = re.compile(r"\{([0-9]+)\.\.([0-9]+)\}")


def padded_range(spec: str) -> str | None:
    """``spec`` with its numeric brace range padded as the local files it means are
    numbered, when ``spec`` names none of them and the padded range names some; else
    None. Only a spec with one range (and no other braces) is guessed at.

    >>> import os, tempfile
    >>> directory = tempfile.mkdtemp()
    >>> for n in range(4):
    ...     open(os.path.join(directory, f"data-{n:03d}.tar"), "wb").close()
    >>> padded_range(os.path.join(directory, "data-{0..3}.tar")).endswith("data-{000..003}.tar")
    True
    """
    where = location(spec)
    match = _RANGE.search(spec)
    if not where.is_file or match is None or spec.count("{") != 1:
        return None
    head, tail = spec[: match.start()], spec[match.end() :]
    if any(os.path.exists(location(u).path) for u in expand_inputs([spec])):
        return None
    prefix = location(head).path if head else ""
    widths: dict[int, int] = {}  # digit runs of the files there, by their width as a padding
    pattern = glob.escape(prefix) + "[0-9]*" + glob.escape(tail)
    for name in glob.glob(pattern):
        digits = name[len(prefix) : len(name) - len(tail)]
        if digits.isdigit():
            width = len(digits) if digits[0] == "0" and len(digits) > 1 else 0
            widths[width] = widths.get(width, 0) + 1
    low, high = int(match.group(1)), int(match.group(2))
    for width in sorted(widths, key=lambda w: -widths[w]):
        if width and max(len(str(low)), len(str(high))) > width:
            continue
        guess = f"{head}{{{low:0{width}d}..{high:0{width}d}}}{tail}"
        if guess != spec and any(os.path.exists(location(u).path) for u in expand_inputs([guess])):
            return guess
    return None


def _manifest_beside(urls: Sequence[str]) -> Manifest | None:
    """The ``manifest.json`` in the directory of the local shards ``urls`` when it lists
    exactly those shards (so that ``len()`` works without naming it); else None."""
    places = [location(u) for u in urls]
    directories = {os.path.dirname(os.path.abspath(p.path)) for p in places if p.is_file}
    if len(directories) != 1 or not all(p.is_file for p in places):
        return None
    beside = os.path.join(directories.pop(), "manifest.json")
    if not os.path.isfile(beside):
        return None
    from .manifests import load_manifest, manifest_urls

    try:
        manifest = load_manifest(beside)
    except (InputError, SourceError):
        return None  # not a tarkit manifest: the shards are read without one
    listed = {location(u).identity() for u in manifest_urls(manifest, opened=False)}
    if listed != {p.identity() for p in places} or len(manifest.shards) != len(urls):
        return None
    return manifest
