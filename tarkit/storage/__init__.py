"""storage: the only code that parses a location or moves bytes in or out of one.

Nothing here knows the stream stages, the writers, the loader or the commands: they all
come here for bytes, and for what a manifest or a shard index at a location says.

:mod:`~tarkit.storage.locations` tells the kinds apart (stdio, file, ``pipe:``,
``http(s)://``, fsspec URLs), :mod:`~tarkit.storage.sources` opens inputs,
:mod:`~tarkit.storage.outputs` publishes outputs atomically (and
:mod:`~tarkit.storage.write_failures` says what a failed write names),
:mod:`~tarkit.storage.listing` lists, moves and removes the files already there,
:mod:`~tarkit.storage.filesystems` is the one fsspec opener,
:mod:`~tarkit.storage.manifests` reads and writes manifests,
:mod:`~tarkit.storage.commit` commits a set of files whole through a journal (followed
only within the set: :mod:`~tarkit.storage.commit_scope`; the files an unfinished one
names, which readers refuse: :mod:`~tarkit.storage.unfinished`),
:mod:`~tarkit.storage.shards` resolves which shards a source names,
:mod:`~tarkit.storage.ranges` reads byte ranges (one sample of an indexed shard),
:mod:`~tarkit.storage.indexed_shards` reads indexed shards by position or key (with
:mod:`~tarkit.storage.catalog`, which shards and where their indexes are, and
:mod:`~tarkit.storage.indexed_shard`, one shard and the checks of its samples),
:mod:`~tarkit.storage.cache` caches remote shards on local disk (filled by
:mod:`~tarkit.storage.downloads`), and :mod:`~tarkit.storage.retrying` (with
:mod:`~tarkit.storage.http` and :mod:`~tarkit.storage.timed_http`) makes remote reads
reconnect at the byte reached and bounds how long they wait.
"""

from typing import TYPE_CHECKING

# Each name is imported from its module on first use (PEP 562), so that a shell tool reading
# a file loads the sources and outputs it uses, not commits, manifests or fsspec's opener.
_HOMES = {
    "commit": ("Move", "commit_files", "finish_commit", "journal_above"),
    "commit_scope": ("CommitScope", "pending_name", "set_manifests"),
    "filesystems": ("ObjectInfo", "StorageOptions", "filesystem", "object_info"),
    "listing": (
        "files_below",
        "is_directory",
        "list_files",
        "move_file",
        "remove_directory",
        "remove_file",
    ),
    "locations": (
        "FILE",
        "FSSPEC",
        "HTTP",
        "PIPE",
        "STDIO",
        "Location",
        "display_name",
        "expand_inputs",
        "is_remote",
        "location",
        "relative_url",
        "resolve_url",
    ),
    "manifests": (
        "LISTED_INDEX",
        "ManifestFile",
        "index_pattern",
        "index_places",
        "load_manifest",
        "load_table",
        "manifest_at",
        "manifest_files",
        "manifest_urls",
        "save_manifest",
    ),
    "outputs": (
        "Publishing",
        "Sink",
        "StagedFile",
        "publish",
        "remove_stale_temp",
        "stdout_stream",
        "temp_place",
        "written_in_place",
    ),
    "ranges": ("RangeSource", "open_ranges"),
    "retrying": ("Reconnection", "RetryPolicy", "report_reconnections", "retry_policy"),
    "shards": (
        "LocalProblem",
        "check_local_files",
        "dataset_manifest",
        "local_problems",
        "names_shard_set",
        "resolve_shards",
    ),
    "sources": (
        "JOURNAL_LIMIT",
        "MANIFEST_LIMIT",
        "RECORD_LIMIT",
        "BoundedReader",
        "CountingReader",
        "HashingReader",
        "Source",
        "describe_exit",
        "open_source",
        "open_source_at",
        "read_bytes",
        "stored_matches",
    ),
    "write_failures": ("descriptor_failure", "write_failure"),
    "unfinished": ("JOURNAL_ENDING", "unfinished_files"),
}
_HOME = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> object:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from .commit import Move, commit_files, finish_commit, journal_above
    from .commit_scope import CommitScope, pending_name, set_manifests
    from .filesystems import ObjectInfo, StorageOptions, filesystem, object_info
    from .listing import (
        files_below,
        is_directory,
        list_files,
        move_file,
        remove_directory,
        remove_file,
    )
    from .locations import (
        FILE,
        FSSPEC,
        HTTP,
        PIPE,
        STDIO,
        Location,
        display_name,
        expand_inputs,
        is_remote,
        location,
        relative_url,
        resolve_url,
    )
    from .manifests import (
        LISTED_INDEX,
        ManifestFile,
        index_pattern,
        index_places,
        load_manifest,
        load_table,
        manifest_at,
        manifest_files,
        manifest_urls,
        save_manifest,
    )
    from .outputs import (
        Publishing,
        Sink,
        StagedFile,
        publish,
        remove_stale_temp,
        stdout_stream,
        temp_place,
        written_in_place,
    )
    from .ranges import RangeSource, open_ranges
    from .retrying import Reconnection, RetryPolicy, report_reconnections, retry_policy
    from .shards import (
        LocalProblem,
        check_local_files,
        dataset_manifest,
        local_problems,
        names_shard_set,
        resolve_shards,
    )
    from .sources import (
        JOURNAL_LIMIT,
        MANIFEST_LIMIT,
        RECORD_LIMIT,
        BoundedReader,
        CountingReader,
        HashingReader,
        Source,
        describe_exit,
        open_source,
        open_source_at,
        read_bytes,
        stored_matches,
    )
    from .unfinished import JOURNAL_ENDING, unfinished_files
    from .write_failures import descriptor_failure, write_failure

__all__ = [
    "BoundedReader",
    "CommitScope",
    "CountingReader",
    "FILE",
    "FSSPEC",
    "HTTP",
    "JOURNAL_ENDING",
    "LISTED_INDEX",
    "JOURNAL_LIMIT",
    "LocalProblem",
    "MANIFEST_LIMIT",
    "PIPE",
    "RECORD_LIMIT",
    "STDIO",
    "HashingReader",
    "Location",
    "ManifestFile",
    "Move",
    "ObjectInfo",
    "Reconnection",
    "RetryPolicy",
    "Publishing",
    "RangeSource",
    "Sink",
    "Source",
    "StagedFile",
    "StorageOptions",
    "check_local_files",
    "commit_files",
    "dataset_manifest",
    "describe_exit",
    "descriptor_failure",
    "display_name",
    "expand_inputs",
    "files_below",
    "index_pattern",
    "index_places",
    "filesystem",
    "finish_commit",
    "is_directory",
    "is_remote",
    "journal_above",
    "list_files",
    "load_manifest",
    "load_table",
    "local_problems",
    "location",
    "manifest_at",
    "manifest_files",
    "manifest_urls",
    "move_file",
    "names_shard_set",
    "object_info",
    "open_ranges",
    "open_source",
    "open_source_at",
    "pending_name",
    "publish",
    "read_bytes",
    "relative_url",
    "remove_directory",
    "remove_file",
    "remove_stale_temp",
    "report_reconnections",
    "resolve_shards",
    "resolve_url",
    "retry_policy",
    "save_manifest",
    "set_manifests",
    "stdout_stream",
    "stored_matches",
    "temp_place",
    "unfinished_files",
    "write_failure",
    "written_in_place",
]
