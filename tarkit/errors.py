"""The one exception tree of tarkit.

Every message is written for the user: ``str(exc)`` is what a command prints after
``<tool>: error: ``. The command line maps the whole tree to exit status 2::

    TarkitError
    ├── InputError        the data read is not a valid, unambiguous stream of samples
    │   ├── TruncatedError    the input ends inside a header, inside member data, or
    │   │                     without the end-of-archive marker
    │   ├── HeaderError       a header tarkit or a downstream reader would misread
    │   ├── SampleError       members that do not form samples (duplicate field,
    │   │                     key that comes back later, skipped member under --strict)
    │   └── CompressionError  a compressed stream that is corrupt or cut short
    ├── SourceError       an input that cannot be opened or read (missing file, HTTP
    │                     error, failed ``pipe:`` command)
    ├── OutputError       an output that cannot be written (full disk, bad pattern)
    ├── UsageError        options that contradict each other or are malformed
    └── NotFound          the whole input was read without finding what was asked
                          for (``tarfirst``: a field or a key)
"""

from __future__ import annotations


class TarkitError(Exception):
    """Base of every error tarkit raises on purpose; ``str()`` is the user message."""


class InputError(TarkitError):
    """The input is not a valid stream of samples.

    ``source`` names the input, ``offset`` is the byte position in the (decompressed)
    tar stream, ``member`` the member name when one is known.

    >>> str(InputError("bad header checksum", source="a.tar", offset=1024, member="x.jpg"))
    'a.tar: bad header checksum (byte 1024, member x.jpg)'
    """

    def __init__(
        self,
        what: str,
        *,
        source: str = "-",
        offset: int | None = None,
        member: str | None = None,
    ) -> None:
        self.what = what
        self.source = source
        self.offset = offset
        self.member = member
        super().__init__(what)

    def __str__(self) -> str:
        where = []
        if self.offset is not None:
            where.append(f"byte {self.offset}")
        if self.member is not None:
            where.append(f"member {self.member}")
        suffix = f" ({', '.join(where)})" if where else ""
        return f"{self.source}: {self.what}{suffix}"


class TruncatedError(InputError):
    """The input ends before the archive does."""


class HeaderError(InputError):
    """A header block is corrupt, malformed or ambiguous."""


class SampleError(InputError):
    """Members do not group into well-formed samples."""


class CompressionError(InputError):
    """A compressed input is corrupt or cut short."""


class SourceError(TarkitError):
    """An input cannot be opened or read to its end."""


class OutputError(TarkitError):
    """An output cannot be written."""


class UsageError(TarkitError):
    """Options are malformed or contradict each other."""


class NotFound(TarkitError):
    """No sample matched: the whole input was read without finding the field or key."""
