"""The one exception tree of tarkit, and the one carrier of an error between processes.

Every message is written for the user: ``str(exc)`` is what a command prints after
``<tool>: error: ``. The command line maps the whole tree to exit status 2. Code that
must tell cases apart reads a class or a ``reason`` attribute, never the message::

    TarkitError
    ├── InputError        the data read is not a valid, unambiguous stream of samples;
    │   │                 reason: TRUNCATED, MISMATCH (with a manifest), STALE (an
    │   │                 index), UNTRUSTED (a location read out of a document), or None
    │   ├── TruncatedError    the input ends inside a header, inside member data, or
    │   │                     without the end-of-archive marker (reason: TRUNCATED)
    │   ├── HeaderError       a header tarkit or a downstream reader would misread
    │   ├── SampleError       members that do not form samples (duplicate field,
    │   │                     key that comes back later, skipped member under --strict)
    │   └── CompressionError  a compressed stream that is corrupt or cut short
    ├── SourceError       an input that cannot be opened or read (missing file, HTTP
    │                     error, failed ``pipe:`` command); reason: MISSING, CHANGED, or None
    ├── OutputError       an output that cannot be written (full disk, bad pattern)
    ├── UsageError        options that contradict each other or are malformed
    │   └── ExpressionError   a ``--where`` expression that does not parse (``column``)
    ├── EngineError       map_shards' engine cannot run (Ray missing, cluster unreachable)
    ├── CommandFailed     a command failed on a sample under ``--on-error fail`` (tarproc)
    ├── ShardFailure      why one shard of map_shards failed: input, output, sample key,
    │                     error; it comes back from worker processes
    ├── MapError          shards of map_shards failed after all their attempts
    ├── NotFound          the whole input was read without finding what was asked
    │                     for (``tarfirst``: a field or a key)
    └── StepFailed        a step of ``tarkit demo`` failed

One failed command travels as: :class:`CommandFailed` (raised by ``map_command``) →
:class:`ShardFailure` (the shard's failure, with the key, sent back by the worker) →
:class:`MapError` (``.failures``: one ShardFailure per shard that failed for good).

Outside the tree, never the error a user is told of::

    Terminated          SIGTERM came: a command unwinds as on Ctrl-C (a BaseException)
    WorkerTraceback     the traceback of an error in another process, chained as its cause
    _ConnectionFailed   one connection of a remote read failed: storage reconnects, or
                        gives up with a SourceError (storage/retrying.py)
    _CacheNameTaken     something the cache did not make holds a shard's name there: the
                        shard is read past the cache (storage/cache.py)
    _UnusualBatch       a batch the loader's collate does not take: torch's
                        ``default_collate`` does it (loading/collate.py)

The last three are control flow, private to the folder that raises and catches them;
each is raised deep inside a read or a recursion, where a return value would have to be
checked at every level.

Across processes: every tarkit error pickles whole, its class, message and attributes
(``reason`` included), by :meth:`TarkitError.__reduce__`. :class:`CarriedError` is the
one carrier of an error out of the process that raised it (``shard_dataset``'s workers,
the DataLoader's, ``map_shards``' through :meth:`ShardFailure.of`): a tarkit error as
itself, any other as its type name, message and traceback, in text.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any


class TarkitError(Exception):
    """Base of every error tarkit raises on purpose; ``str()`` is the user message."""

    def __reduce__(self) -> tuple[Any, ...]:
        # Whole, across processes: its class, args and every attribute (``reason`` too),
        # without calling ``__init__`` again, whose parameters are not its ``args``.
        return _rebuilt, (type(self), self.args, self.__dict__)


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


class OutputError(TarkitError):
    """An output cannot be written."""


class UsageError(TarkitError):
    """Options are malformed or contradict each other."""


class ExpressionError(UsageError):
    """A ``--where`` expression that does not parse: ``what`` is wrong at ``column``
    (counting from 1), where the text ``found`` is (None at the end)."""

    def __init__(self, what: str, column: int, found: str | None = None) -> None:
        self.what, self.column, self.found = what, column, found
        shown = f", found {found}" if found else ""
        super().__init__(f"--where: {what} at column {column}{shown}")


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
        """The failure ``exc`` causes, in the words :class:`CarriedError` gives it: a
        tarkit error's message, else its type name and message with its traceback."""
        carried = CarriedError(exc)
        trace = carried.traceback if carried.error is None else ""
        return cls(input, output, key, carried.message, trace, attempts)

    def __str__(self) -> str:
        where = f", sample {self.key!r}" if self.key is not None else ""
        # An input error names its source already: say the input once.
        return f"{self.input}{where}: {self.error.removeprefix(f'{self.input}: ')}"


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


class StepFailed(TarkitError):
    """A step of ``tarkit demo`` failed: its command exited non-zero, or the model it
    trained is not accurate enough."""


class Terminated(BaseException):
    """SIGTERM came: a command unwinds as on Ctrl-C, so that cleanup code runs (not an
    :class:`Exception`, so that ``except Exception`` lets it through, as it lets Ctrl-C)."""


class WorkerTraceback(Exception):
    """The traceback of an error raised in another process, chained as its cause (see
    :meth:`CarriedError.raised`)."""


class CarriedError:
    """An exception on its way out of the process that raised it (a worker's, a task's).

    A tarkit error travels as itself, ``error`` (it pickles whole); any other as text,
    since its class may not pickle or not exist on the other side: ``message`` is its type
    name and message. ``traceback`` is where it was raised, in text.

    >>> carried = CarriedError(ValueError("bad value"))
    >>> carried.message, carried.error
    ('ValueError: bad value', None)
    >>> str(carried.raised(lambda message: InputError(message, source="item 3")))
    'item 3: ValueError: bad value'
    """

    def __init__(self, exc: BaseException) -> None:
        from traceback import format_exception

        self.error = exc if isinstance(exc, TarkitError) else None
        self.message = str(exc) if self.error is not None else f"{type(exc).__name__}: {exc}"
        self.traceback = "".join(format_exception(type(exc), exc, exc.__traceback__))

    def raised(
        self, otherwise: Callable[[str], BaseException] = RuntimeError, where: str = "the worker"
    ) -> BaseException:
        """The exception to raise in this process: the tarkit error as it was, any other
        as ``otherwise(message)``. Its cause is the traceback ``where`` it was raised (a
        :class:`WorkerTraceback`): for any other error always (a bug, which the traceback
        finds), for a tarkit error under ``TARKIT_DEBUG=1`` (its message says the rest)."""
        exc = self.error if self.error is not None else otherwise(self.message)
        if self.error is None or os.environ.get("TARKIT_DEBUG"):
            exc.__cause__ = WorkerTraceback(f"in {where}:\n{self.traceback}")
        else:
            exc.__cause__ = None  # as ``raise exc from None``: no context either
        return exc


class _ConnectionFailed(Exception):
    """One connection of a remote read failed in a way a new one may not: ``cause`` in
    words, the server's ``Retry-After`` in seconds when it gave one, and ``slow`` when the
    connection used up its :class:`~tarkit.storage.retrying.WaitBudget` (then only 64 KiB
    received, not any byte, counts as progress: a trickle never resets the count of
    reconnections). Raised by the HTTP and fsspec connections, caught where a read
    reconnects (:mod:`tarkit.storage.retrying`)."""

    def __init__(self, cause: str, retry_after: float | None = None, slow: bool = False) -> None:
        super().__init__(cause)
        self.cause = cause
        self.retry_after = retry_after
        self.slow = slow


class _CacheNameTaken(Exception):
    """Something the cache did not make holds the name of a shard's file or lock
    (:mod:`tarkit.storage.cache`, which then reads the shard past the cache)."""


class _UnusualBatch(Exception):
    """A batch :func:`tarkit.loading.collate.collate` does not take: ``default_collate``
    does it instead."""


def _rebuilt(cls: type[TarkitError], args: tuple[Any, ...], state: dict[str, Any]) -> TarkitError:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error
