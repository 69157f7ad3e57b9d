"""Remote reads that survive the network: reconnect at the byte reached, never hang, never
mix versions.

A remote input (``http(s)://``, ``s3://`` and any fsspec URL) is read through a
:class:`ResumingStream`: when its connection drops, is reset, is too slow (``timeout``),
ends short of the object's length, or the server answers 408, 429 or 5xx, the
stream reconnects at the exact byte it had reached (an HTTP ``Range``, an fsspec seek),
so the bytes it delivers are those of an uninterrupted read. The rules
(:class:`RetryPolicy`, see docs/remote.md):

- at most ``retries`` reconnections in a row without progress (default 5,
  ``TARKIT_RETRIES``); once bytes arrive the count starts again, so a long read that
  drops every few hundred megabytes still finishes (after a connection that was too
  slow, it takes 64 KiB: a trickle is no progress);
- a connection that dropped after delivering bytes is reopened at once; a reconnection
  that fails waits ``0.5 s × 2^(n-1)`` (at most 30 s), times a random factor between
  0.5 and 1 (jitter, so that many readers do not come back together); a
  ``Retry-After`` header is honoured up to 60 s;
- ``timeout`` (T, default 30 s, ``TARKIT_TIMEOUT``) bounds every wait: connecting, and
  over HTTP(S) the whole answer's status and headers and each 64 KiB of a body
  (:class:`WaitBudget`), so a server that stalls, or trickles its headers or its body,
  is a reconnection, then an error, never a hang (fsspec back ends apply it per wait,
  see ``filesystems.py``);
- the object's validator (ETag, else Last-Modified, and its length) is remembered on the
  first connection and checked on every reconnection: an object that changed is a
  :class:`~tarkit.errors.SourceError` with reason ``CHANGED``, never a shard spliced
  from two versions.

Each reconnection is reported to a callback (:class:`Reconnection`): the caller's
``on_reconnect``, else the process's reporter (:func:`report_reconnections`; the
commands install one that prints a ``warning:`` line), else nobody. When the attempts
run out the read raises :class:`~tarkit.errors.SourceError`. The kinds of store plug in
as a :class:`Connector` (``http.py``, ``filesystems.py``).

>>> RetryPolicy(backoff=0.5).delay(3, None, jitter=1.0)
2.0
>>> RetryPolicy().delay(1, 120.0, jitter=1.0)
60.0
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Callable
from typing import NamedTuple, Protocol

from ..errors import SourceError, UsageError, _ConnectionFailed

DEFAULT_RETRIES = 5
DEFAULT_TIMEOUT = 30.0
RETRIES_ENV = "TARKIT_RETRIES"
TIMEOUT_ENV = "TARKIT_TIMEOUT"
CHUNK = 1 << 20
PACE = 64 << 10  # the bytes of a body each timeout's worth of waiting must bring


class Reconnection(NamedTuple):
    """One reconnection of a remote read: where it was, why, and how long it waits first.

    >>> str(Reconnection("http://h/x.tar", 1024, "connection reset", 1, 5, 0.0))
    'http://h/x.tar: reconnecting at byte 1024 after connection reset (attempt 1 of 5)'
    """

    url: str
    offset: int
    cause: str
    attempt: int
    retries: int
    delay: float

    def __str__(self) -> str:
        wait = f", in {self.delay:.1f} s" if self.delay >= 0.05 else ""
        return (
            f"{self.url}: reconnecting at byte {self.offset} after {self.cause} "
            f"(attempt {self.attempt} of {self.retries}{wait})"
        )


ReconnectReport = Callable[[Reconnection], object]
_process_report: ReconnectReport | None = None


def report_reconnections(report: ReconnectReport | None) -> ReconnectReport | None:
    """Make ``report`` the process's reporter of reconnections (None: nobody); return the
    previous one. A read opened with its own ``on_reconnect`` reports there instead."""
    global _process_report
    previous, _process_report = _process_report, report
    return previous


class RetryPolicy(NamedTuple):
    """How a remote read reconnects and how long it waits (see the module docstring).

    ``retries``: reconnections in a row without a byte received; ``timeout``: seconds to
    connect, to receive an answer's headers and each 64 KiB of its body
    (:class:`WaitBudget`); ``backoff``/``max_backoff``: the first wait after a
    failed reconnection and the cap of the doubling; ``max_retry_after``: the longest
    ``Retry-After`` obeyed; ``on_reconnect``: who is told of each reconnection.
    """

    retries: int = DEFAULT_RETRIES
    timeout: float = DEFAULT_TIMEOUT
    backoff: float = 0.5
    max_backoff: float = 30.0
    max_retry_after: float = 60.0
    on_reconnect: ReconnectReport | None = None

    def delay(self, failures: int, retry_after: float | None, jitter: float | None = None) -> float:
        """Seconds to wait before reconnection number ``failures`` of a run without data."""
        import random  # (not at import, which the shell tools wait for)

        base = min(self.max_backoff, self.backoff * 2 ** (failures - 1))
        wait = base * (random.uniform(0.5, 1.0) if jitter is None else jitter)
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.max_retry_after))
        return wait

    def report(self, event: Reconnection) -> None:
        report = self.on_reconnect or _process_report
        if report is not None:
            report(event)


def retry_policy(
    retries: int | None = None,
    timeout: float | None = None,
    on_reconnect: ReconnectReport | None = None,
    base: RetryPolicy | None = None,
) -> RetryPolicy:
    """The policy of a read: the arguments given, else ``base``'s (or ``TARKIT_RETRIES``
    and ``TARKIT_TIMEOUT``, read now), else the defaults (5 reconnections, 30 s).

    Raises :class:`~tarkit.errors.UsageError` for a negative count, a timeout that is not
    positive, or an environment variable that is not a number.
    """
    if base is None:
        base = RetryPolicy(
            retries=int(_from_env(RETRIES_ENV, DEFAULT_RETRIES, int)),
            timeout=_from_env(TIMEOUT_ENV, DEFAULT_TIMEOUT, float),
        )
    policy = base._replace(
        retries=base.retries if retries is None else retries,
        timeout=base.timeout if timeout is None else timeout,
        on_reconnect=on_reconnect or base.on_reconnect,
    )
    if not isinstance(policy.retries, int) or policy.retries < 0:
        raise UsageError(f"retries must be a whole number of 0 or more (got {policy.retries!r})")
    if not policy.timeout > 0:
        raise UsageError(f"timeout must be a number of seconds above 0 (got {policy.timeout!r})")
    return policy


def _from_env(name: str, default: float, kind: type) -> float:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = kind(text)
    except ValueError:
        what = "a whole number" if kind is int else "a number of seconds"
        raise UsageError(f"{name} must be {what}, not {text!r}") from None
    if value < 0 or (kind is float and value == 0):
        raise UsageError(
            f"{name} must be {'0 or more' if kind is int else 'above 0'}, not {text!r}"
        )
    return float(value)


class WaitBudget:
    """How long one connection may keep its reader waiting, ``timeout`` seconds (T) at a time.

    First the answer: its status and headers must all arrive within T of waiting
    (redirects included). Then the body: it starts with T of waiting, each byte received
    adds T per 64 KiB, and what is left never exceeds T. So a body that stops sending
    fails after T, one that sends fewer than 64 KiB per T (a trickle) runs out soon after,
    and no body is ever cut that keeps up 64 KiB per T (2.2 KB/s at the default 30 s).
    Only time spent waiting for the network counts (:meth:`waited`), never the reader's
    own pauses between reads.

    >>> budget = WaitBudget(2.0)
    >>> budget.answered(); budget.waited(1.5, 0); budget.left()
    0.5
    >>> budget.waited(0.1, 32 << 10); round(budget.left(), 3)
    1.4
    >>> budget.waited(1.5, 10); budget.left() <= 0, budget.cause()
    (True, 'body too slow: under 64 KiB per 2 s')
    """

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._left = timeout
        self._answered = False
        self._received = 0  # bytes of the answer before the body, or of the body
        self._stalled = True  # nothing came since the budget was last full

    def left(self) -> float:
        """Seconds the connection may still keep its reader waiting (0 or less: none)."""
        return self._left

    def answered(self) -> None:
        """The status and headers are in: the body's budget starts, full."""
        self._answered, self._left, self._received, self._stalled = True, self.timeout, 0, True

    def waited(self, seconds: float, received: int) -> None:
        """Charge a wait of ``seconds`` that brought ``received`` bytes."""
        self._left -= seconds
        if received:
            self._received += received
            if self._answered:
                earned = self._left + self.timeout * received / PACE
                self._left = min(self.timeout, earned)
                self._stalled = earned >= self.timeout

    def cause(self) -> str:
        """What was too slow, in words, once the budget has run out."""
        if not self._answered:
            if not self._received:
                return f"no answer within {self.timeout:g} s"
            return f"headers too slow: the answer was not complete within {self.timeout:g} s"
        if self._stalled:
            return f"no data for {self.timeout:g} s"
        return f"body too slow: under {PACE >> 10} KiB per {self.timeout:g} s"


def changed(url: str, how: str) -> SourceError:
    """The error of an object that changed between two parts of one read."""
    return SourceError(f"{url}: changed while being read ({how})", reason=SourceError.CHANGED)


class Connection(Protocol):
    """One open connection to a remote object, reading from the offset it was opened at."""

    def read(self, size: int) -> bytes:
        """Up to ``size`` bytes (b"" at the end of the body). Raises
        :class:`~tarkit.errors._ConnectionFailed` for a failure worth another try,
        SourceError for one that is not."""
        ...

    def seek(self, offset: int) -> bool:
        """Go to byte ``offset`` of the object in place if the connection can (True);
        False: the stream opens a new connection there instead."""
        ...

    def close(self) -> None: ...


class Connector(Protocol):
    """Opens connections to one remote object (an HTTP URL, an fsspec object).

    ``size`` is the object's length once known (None: the server did not say).
    ``seekable``: a connection can be opened anywhere cheaply (HTTP ranges may be
    ignored by a server, so HTTP says no).
    """

    name: str
    size: int | None
    seekable: bool

    def connect(self, offset: int, timeout: float) -> Connection:
        """A connection whose first byte is byte ``offset`` of the object.

        The first call learns the object's validator; later calls check it and raise
        :func:`changed` when it differs. Raises :class:`~tarkit.errors._ConnectionFailed`
        for a failure worth another try, :class:`~tarkit.errors.SourceError` for one that
        is not.
        """
        ...


class ResumingStream(io.RawIOBase):
    """The bytes of a remote object from byte ``start``, reconnecting at the byte reached.

    The first connection is made at once, so that an object that cannot be opened
    raises here (after its retries). See the module docstring for the rules.
    """

    def __init__(self, connector: Connector, policy: RetryPolicy, start: int = 0) -> None:
        self.connector = connector
        self.policy = policy
        self.name = connector.name
        self.position = start
        self.reconnections = 0
        self._connection: Connection | None = None
        self._failures = 0  # failures in a row without progress
        self._received = 0  # bytes received since the last failure
        self._connect()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return self.connector.seekable

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if not self.connector.seekable:
            raise io.UnsupportedOperation("seek")
        if whence == io.SEEK_CUR:
            offset += self.position
        elif whence == io.SEEK_END:
            if self.connector.size is None:
                raise io.UnsupportedOperation("seek from the end of an object of unknown size")
            offset += self.connector.size
        if offset != self.position:
            connection = self._connection
            if connection is None or not connection.seek(offset):
                self._drop()
            self.position = offset
        return self.position

    def read1(self, size: int = -1) -> bytes:  # type: ignore[override]
        size = size if size and size > 0 else CHUNK
        while True:
            connection = self._connection
            try:
                if connection is None:
                    self._connect()
                    continue
                data = connection.read(size)
            except _ConnectionFailed as failure:
                self._failed(failure)
                continue
            if data:
                self.position += len(data)
                self._received += len(data)
                return data
            expected = self.connector.size
            if expected is not None and self.position < expected:
                self._failed(
                    _ConnectionFailed(
                        f"connection closed after {self.position} of {expected} bytes"
                    )
                )
                continue
            return b""

    def read(self, size: int | None = -1) -> bytes:  # type: ignore[override]
        if size is not None and size >= 0:
            return self.read1(size) if size else b""
        return b"".join(iter(lambda: self.read1(CHUNK), b""))

    def readall(self) -> bytes:
        return self.read()

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def, override]
        data = self.read1(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._drop()
        super().close()

    def _connect(self) -> None:
        while True:
            try:
                self._connection = self.connector.connect(self.position, self.policy.timeout)
                return
            except _ConnectionFailed as failure:
                self._failed(failure)

    def _failed(self, failure: _ConnectionFailed) -> None:
        """Give up (SourceError), or report the reconnection and wait before it."""
        self._drop()
        progressed = self._received >= (PACE if failure.slow else 1)
        self._received = 0
        self._failures = 0 if progressed else self._failures
        self._failures += 1
        policy = self.policy
        if self._failures > policy.retries:
            tried = policy.retries
            after = "" if not tried else f" (gave up after {tried} reconnection{'s' * (tried > 1)})"
            raise SourceError(f"{self.name}: {failure.cause}{after}") from None
        delay = (
            0.0
            if progressed and failure.retry_after is None
            else policy.delay(self._failures, failure.retry_after)
        )
        self.reconnections += 1
        policy.report(
            Reconnection(
                self.name, self.position, failure.cause, self._failures, policy.retries, delay
            )
        )
        if delay:
            time.sleep(delay)

    def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            try:
                connection.close()
            except Exception:  # a broken connection may fail to close: it is gone anyway
                pass
