"""Locations: every kind of place tarkit reads from or writes to, told apart in one place.

A location is what a user writes where tarkit takes an input or an output:

=========  ===============================================  ===============================
kind       written as                                       read and written through
=========  ===============================================  ===============================
``stdio``  ``-``                                            stdin, stdout
``file``   a path, ``file:PATH`` or ``file://PATH``         the local file system
``pipe``   ``pipe:CMD``                                     a shell command's stdout (input)
``http``   ``http://…``, ``https://…``                      HTTP GET (input)
``fsspec`` any other ``scheme://…`` (``s3://``, ``gs://``…)  fsspec
=========  ===============================================  ===============================

Nothing else in tarkit looks at the text of a location to tell its kind: it asks
:func:`location` (or :func:`is_remote`), so every caller agrees.

>>> location("s3://b/x.tar").kind, location("pipe:cat x.tar").kind, location("-").kind
('fsspec', 'pipe', 'stdio')
>>> location("file:data/x.tar").path, location("https://h/x.tar").remote
('data/x.tar', True)
>>> expand_inputs(["data-{000..002}.tar"])
['data-000.tar', 'data-001.tar', 'data-002.tar']
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Sequence
from typing import NamedTuple

from ..errors import InputError, UsageError

STDIO, FILE, PIPE, HTTP, FSSPEC = "stdio", "file", "pipe", "http", "fsspec"


class Location(NamedTuple):
    """A parsed location: ``spec`` as written, its ``kind`` and its ``path``.

    ``path`` is the local path of a file (without ``file:``), the command of a pipe, the
    URL itself for http and fsspec, and ``-`` for stdio.
    """

    spec: str
    kind: str
    path: str

    @property
    def remote(self) -> bool:
        """Fetched over a network (http, fsspec): worth caching, and worth retrying."""
        return self.kind in (HTTP, FSSPEC)

    @property
    def is_file(self) -> bool:
        """A path of the local file system."""
        return self.kind == FILE

    @property
    def name(self) -> str:
        """How messages name it: ``<stdin>`` for ``-``, else as written."""
        return "<stdin>" if self.kind == STDIO else self.spec

    @property
    def basename(self) -> str:
        """The last component of a path or URL (a pipe's or stdin's whole spec)."""
        if self.kind in (FILE, HTTP, FSSPEC):
            return posixpath.basename(self.path.rstrip("/")) or self.path
        return self.spec

    def sibling(self, name: str) -> str:
        """The location of a file called ``name`` in the same directory (or URL prefix).

        >>> location("out/x-000.tar").sibling(".x-000.tar.map.json")
        'out/.x-000.tar.map.json'
        >>> location("s3://b/d/s-%d.tar").sibling("classes.json")
        's3://b/d/classes.json'
        >>> location("x.tar").sibling("classes.json")
        'classes.json'
        """
        head, slash, _ = self.spec.rpartition("/")
        return f"{head}/{name}" if slash else name

    def identity(self) -> str:
        """What two specs for the same place share: a file's absolute path, else the spec.

        >>> location("file:/d/x.tar").identity() == location("/d/x.tar").identity()
        True
        """
        return os.path.abspath(self.path) if self.kind == FILE else self.spec


def location(spec: str) -> Location:
    """Parse ``spec`` (see the module docstring for the kinds).

    >>> location("file:///data/x.tar").path
    '/data/x.tar'
    """
    if spec == "-":
        return Location(spec, STDIO, "-")
    if spec.startswith("pipe:"):
        return Location(spec, PIPE, spec[5:])
    if spec.startswith("file://"):
        return Location(spec, FILE, spec[7:])
    if spec.startswith("file:"):
        return Location(spec, FILE, spec[5:])
    if spec.startswith(("http://", "https://")):
        return Location(spec, HTTP, spec)
    if "://" in spec:
        return Location(spec, FSSPEC, spec)
    return Location(spec, FILE, spec)


def is_remote(spec: str) -> bool:
    """Whether ``spec`` is fetched over a network (http, https, fsspec URLs).

    >>> is_remote("s3://b/x.tar"), is_remote("/data/x.tar"), is_remote("pipe:curl -s http://h/x")
    (True, False, False)
    """
    return location(spec).remote


def display_name(spec: str) -> str:
    """How messages name an input: ``<stdin>`` for ``-``."""
    return location(spec).name


def expand_inputs(specs: Sequence[str]) -> list[str]:
    """Brace-expand every input; no input at all means stdin.

    A ``pipe:`` command keeps its braces (the shell has its own). Raises
    :class:`~tarkit.errors.UsageError` for unbalanced braces (``a{b``).

    >>> expand_inputs([])
    ['-']
    """
    expanded: list[str] = []
    for spec in specs:
        if location(spec).kind == PIPE or not any(c in spec for c in "{}\\"):
            expanded.append(spec)  # (nothing to expand: braceexpand is not even imported)
            continue
        from braceexpand import braceexpand

        try:
            expanded.extend(braceexpand(spec))
        except ValueError:  # braceexpand's UnbalancedBracesError
            raise UsageError(
                f"{spec}: unbalanced braces (write \\{{ or \\}} for a literal brace)"
            ) from None
    return expanded or ["-"]


def relative_url(manifest: str | None, shard: str) -> str:
    """How a manifest at ``manifest`` names the shard at ``shard``.

    A local shard beside or below a local manifest is named relative to it; a remote one
    below a remote manifest's "directory" likewise; anything else as given (a local
    shard elsewhere, or in a remote manifest, by its absolute path). The inverse of
    :func:`resolve_url`.

    >>> relative_url("out/manifest.json", "out/shard-000000.tar")
    'shard-000000.tar'
    >>> relative_url("m.json", "s3://bucket/x.tar")
    's3://bucket/x.tar'
    >>> relative_url("s3://bucket/d/m.json", "s3://bucket/d/x.tar")
    'x.tar'
    >>> relative_url("m.json", "pipe:cat x.tar")
    'pipe:cat x.tar'
    >>> relative_url("/d/m.json", "/d/..x.tar.pending"), relative_url("/d/m.json", "/x.tar")
    ('..x.tar.pending', '/x.tar')
    """
    target, base = location(shard), location(manifest) if manifest is not None else None
    if target.kind not in (FILE, HTTP, FSSPEC) or base is None:
        return shard
    if target.remote:
        prefix = posixpath.dirname(base.spec) + "/"
        if base.remote and shard.startswith(prefix):
            return shard[len(prefix) :]
        return shard
    if base.remote:  # a local shard in a remote manifest: only an absolute path finds it
        return os.path.abspath(target.path)
    directory = os.path.dirname(os.path.abspath(base.path))
    absolute = os.path.abspath(target.path)
    relative = os.path.relpath(absolute, directory)
    if relative == os.pardir or relative.startswith(os.pardir + os.sep):
        return absolute
    return relative.replace(os.sep, "/")


def resolve_url(
    document: str | None, url: str, where: str = "an entry", *, opened: bool = True
) -> str:
    """Where the location ``url``, read out of the document at ``document`` (a manifest, a
    plan), is: relative to the document's own directory (or URL prefix), else as written,
    a local file as its path.

    The trust rule (docs/remote.md): a location the user typed is trusted, ``pipe:``
    included, and is what ``document=None`` means. A location read out of a document never
    runs a command nor reads stdin; a remote document (a URL, or a command's output, whose
    author may be anyone) names only remote locations: relative to it, or absolute on a
    network scheme (:data:`NETWORK_SCHEMES`, or the document's own), never a local path;
    a local document may name local paths. Anything else raises
    :class:`~tarkit.errors.InputError` naming the document and ``where`` the entry is
    (``reason`` :attr:`~tarkit.errors.InputError.UNTRUSTED`). With ``opened=False`` the
    result is only compared with locations the caller named itself and never opened, so
    it is not refused.

    >>> resolve_url("/data/m.json", "shard-0.tar")
    '/data/shard-0.tar'
    >>> resolve_url("http://h/d/m.json", "s-0.tar")
    'http://h/d/s-0.tar'
    >>> resolve_url("http://h/d/m.json", "/etc/passwd", "shard 0")
    Traceback (most recent call last):
    ...
    tarkit.errors.InputError: http://h/d/m.json: shard 0: '/etc/passwd' is a local path, and a remote document names only remote locations (relative to it, or http(s)://, s3://…)
    """
    if document is None:
        return url
    base, named = location(document), location(url)
    refused = _untrusted(base, named) if opened else None
    if refused is not None:
        shown = url if len(url) <= 300 else url[:300] + "…"
        raise InputError(f"{where}: {shown!r} {refused}", source=document,
                         reason=InputError.UNTRUSTED)  # fmt: skip
    if named.kind != FILE:
        return url
    if base.remote and not url.startswith("file:") and not os.path.isabs(named.path):
        return posixpath.join(posixpath.dirname(base.spec), named.path)
    if os.path.isabs(named.path) or not base.is_file:
        return named.path
    return os.path.join(os.path.dirname(os.path.abspath(base.path)), named.path)


# The schemes a remote document may name absolutely besides its own: web servers and object
# stores. Not file:, local:// or memory:// (this machine), nor the fsspec wrappers through
# which another URL is read, a local one included (tar://, zip://, reference://, the
# caches, a chain of URLs joined by ``::``).
NETWORK_SCHEMES = frozenset(
    {"http", "https", "s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "hf", "oss", "oci"}
)


def _untrusted(base: Location, named: Location) -> str | None:
    """Why a document at ``base`` may not name ``named`` (None: it may)."""
    if named.kind == PIPE:
        return (
            "is a command, and a location read from a file never runs one: give pipe: "
            "inputs yourself (an argument, a Python string) if you mean them"
        )
    if named.kind == STDIO:
        return "is stdin, which a location read from a file never names"
    if base.is_file:
        return None  # a local document may name local paths, and any URL
    remote_only = (
        "a remote document names only remote locations (relative to it, or http(s)://, s3://…)"
    )
    if named.kind == FILE:
        relative = not named.spec.startswith("file:") and not os.path.isabs(named.path)
        if relative and base.remote:
            return None
        return f"is a local path, and {remote_only}"
    scheme = named.spec.split("://", 1)[0].lower()
    if "::" in named.spec or (scheme not in NETWORK_SCHEMES and scheme != _scheme(base)):
        return f"reaches this machine's files or wraps another URL, and {remote_only}"
    return None


def _scheme(where: Location) -> str | None:
    return where.spec.split("://", 1)[0].lower() if where.remote else None
