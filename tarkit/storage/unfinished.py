"""The readers' side of a commit (:mod:`tarkit.storage.commit`): the local files that the
journal of an unfinished commit names, which a reader must refuse (they are a mix of two
sets until a writer finishes the commit).

A module of its own so that every tool reading local files can ask without importing
what commits (journals are parsed only where one lies beside or above the files).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence

from ..errors import OutputError
from .locations import location
from .sources import JOURNAL_LIMIT

JOURNAL_ENDING = ".commit.json"
# How many directories above a file the journal naming it may lie: that of a pattern
# with the shard number in up to this many directory levels (out/{shard:03d}/x.tar: 1).
JOURNAL_DEPTH = 3


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
        from .commit import Journal  # (only where a journal lies: readers start without it)

        entries = Journal.parse(data, journal)
    except (OSError, OutputError):
        return set()
    changed = [move.target for move in entries.moves] + entries.removals
    return {os.path.abspath(location(url).path) for url in changed}
