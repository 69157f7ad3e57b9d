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
    ├── EngineError       map_shards' engine cannot run (Ray missing, cluster unreachable)
    ├── CommandFailed     a command failed on a sample under ``--on-error fail`` (tarproc)
    ├── ShardFailure      why one shard of map_shards failed: input, output, sample key,
    │                     error; picklable, it comes back from worker processes
    ├── MapError          shards of map_shards failed after all their attempts
    └── NotFound          the whole input was read without finding what was asked
                          for (``tarfirst``: a field or a key)

One failed command travels as: :class:`CommandFailed` (raised by ``map_command``) →
:class:`ShardFailure` (the shard's failure, with the key, sent back by the worker) →
:class:`MapError` (``.failures``: one ShardFailure per shard that failed for good).
"""

from __future__ import annotations

from typing import Any


class TarkitError(Exception):
    """Base of every error tarkit raises on purpose; ``str()`` is the user message."""


class InputError(TarkitError):
    """The input is not a valid stream of samples.

    ``source`` names the input, ``offset`` is the byte position in the (decompressed)
    tar stream, ``member`` the member name when one is known. ``reason`` classifies the
    error for code that must tell cases apart (never the message): :attr:`TRUNCATED`
    for an input that ends too early (every :class:`TruncatedError`, and a compressed
    stream cut short), :attr:`MISMATCH` for a shard that differs from its manifest,
    :attr:`STALE` for a shard that changed after it was indexed (a sample read by its
    index is not the one recorded), :attr:`UNTRUSTED` for a location read out of a
    manifest or a plan that the trust rule refuses (a command, or a local path named by a
    remote document).

    >>> str(InputError("bad header checksum", source="a.tar", offset=1024, member="x.jpg"))
    'a.tar: bad header checksum (byte 1024, member x.jpg)'
    """

    TRUNCATED = "truncated"
    MISMATCH = "manifest mismatch"
    STALE = "stale index"
    UNTRUSTED = "untrusted location"
    reason: str | None = None

    def __init__(
        self,
        what: str,
        *,
        source: str = "-",
        offset: int | None = None,
        member: str | None = None,
        reason: str | None = None,
    ) -> None:
        self.what = what
        self.source = source
        self.offset = offset
        self.member = member
        if reason is not None:
            self.reason = reason
        super().__init__(what)

    def __reduce__(self) -> tuple[Any, ...]:
        # Whole, across processes (a DataLoader worker's error): not only the message.
        fields = (self.what, self.source, self.offset, self.member, self.reason)
        return _rebuild_input_error, (type(self), *fields)

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

    reason = InputError.TRUNCATED


class HeaderError(InputError):
    """A header block is corrupt, malformed or ambiguous."""


class SampleError(InputError):
    """Members do not group into well-formed samples."""


class CompressionError(InputError):
    """A compressed input is corrupt or cut short."""


class SourceError(TarkitError):
    """An input cannot be opened or read to its end.

    ``reason`` classifies it for code that must tell cases apart (never the message):
    :attr:`MISSING` for a file or object that does not exist, :attr:`CHANGED` for a
    remote object that changed between two parts of one read, :attr:`UNFINISHED` for a
    file of a set whose commit was stopped midway (a mix of two runs), else None.
    """

    MISSING = "missing"
    CHANGED = "changed"
    UNFINISHED = "unfinished"

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason

    def __reduce__(self) -> tuple[object, ...]:
        return _rebuild_source_error, (str(self), self.reason)


class OutputError(TarkitError):
    """An output cannot be written."""


class UsageError(TarkitError):
    """Options are malformed or contradict each other."""


class NotFound(TarkitError):
    """No sample matched: the whole input was read without finding the field or key."""


class EngineError(TarkitError):
    """The engine cannot run: Ray is not installed, the cluster cannot be reached…"""


class CommandFailed(TarkitError):
    """The command failed on a sample under the ``fail`` policy.

    ``rejection`` is the :class:`~tarkit.processing.commands.Rejection` (key, status,
    reason, stderr), ``source`` the input the sample came from.
    """

    def __init__(self, rejection: Any, source: str) -> None:
        self.rejection = rejection
        self.source = source
        super().__init__(f"{source}: sample {rejection.key!r}: {rejection.describe()}")

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.rejection, self.source)


class ShardFailure(TarkitError):
    """Why a shard failed: the sample (key, None before the first one) and the error.

    A mapper raises it to name the sample that failed; the shard task fills in
    ``output`` and ``attempts`` and sends it back (it pickles). ``error`` is the
    message, ``traceback`` the Python traceback of an unexpected exception (else
    empty). ``final`` marks a failure that another attempt would repeat (a local input
    file that is corrupt), so it is not retried.

    >>> str(ShardFailure("in.tar", "out.tar", "k1", "in.tar: command exited with status 3"))
    "in.tar, sample 'k1': command exited with status 3"
    """

    def __init__(
        self, input: str, output: str, key: str | None, error: str, traceback: str = "",
        attempts: int = 1, final: bool = False,
    ) -> None:  # fmt: skip
        self.input = input
        self.output = output
        self.key = key
        self.error = error
        self.traceback = traceback
        self.attempts = attempts
        self.final = final
        super().__init__(input, key, error)

    @classmethod
    def of(
        cls, exc: BaseException, input: str, output: str = "", key: str | None = None,
        attempts: int = 1,
    ) -> ShardFailure:  # fmt: skip
        """The failure ``exc`` causes: its message (a tarkit error), else its type and
        message with the traceback."""
        if isinstance(exc, TarkitError):
            return cls(input, output, key, str(exc), "", attempts)
        import traceback

        trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return cls(input, output, key, f"{type(exc).__name__}: {exc}", trace, attempts)

    def __str__(self) -> str:
        where = f", sample {self.key!r}" if self.key is not None else ""
        # An input error names its source already: say the input once.
        return f"{self.input}{where}: {self.error.removeprefix(f'{self.input}: ')}"

    def __reduce__(self) -> tuple[Any, ...]:
        fields = (self.input, self.output, self.key, self.error, self.traceback)
        return type(self), (*fields, self.attempts, self.final)


class MapError(TarkitError):
    """Some shards failed after all their attempts; the others were done.

    ``failures`` says, for each failed shard, the input, the sample key (when one was
    being mapped) and the error (:class:`ShardFailure`); ``result`` is the
    :class:`~tarkit.processing.driver.MapResult` of the rest.
    """

    def __init__(self, failures: list[ShardFailure], result: Any) -> None:
        self.failures = failures
        self.result = result
        super().__init__(failures, result)

    def __str__(self) -> str:
        total = len(self.result.outputs)
        attempts = self.failures[0].attempts
        tries = "1 attempt" if attempts == 1 else f"{attempts} attempts"
        head = f"{len(self.failures)} of {total} shards failed after {tries}"
        if len(self.failures) == 1:
            return f"{head}: {self.failures[0]}"
        others = ", ".join(f.input for f in self.failures[1:4])
        more = ", …" if len(self.failures) > 4 else ""
        return f"{head}; first {self.failures[0]}; also {others}{more}"


def _rebuild_source_error(message: str, reason: str | None) -> SourceError:
    return SourceError(message, reason=reason)


def _rebuild_input_error(
    cls: type[InputError], what: str, source: str, offset: int | None, member: str | None,
    reason: str | None,
) -> InputError:  # fmt: skip
    return cls(what, source=source, offset=offset, member=member, reason=reason)
