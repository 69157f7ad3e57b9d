"""urllib with every wait for an HTTP answer bounded by a :class:`~tarkit.storage.retrying.WaitBudget`.

``urllib`` gives each socket operation its own timeout, so a server that sends its headers
or its body a few bytes at a time keeps a reader waiting for ever. :func:`open_url` opens a
URL as ``urllib.request.urlopen`` does (proxies from the environment, redirects, the default
TLS checks), but every answer on its connections (a proxy's answer to ``CONNECT`` too) is
read by :class:`_TimedReader`, which lets each receive wait only as long as the budget has
left and charges it the time waited, and the TLS handshake runs within what the budget has
left and is charged to it (:class:`_TimedContext`): the handshake, the proxy's answer and
the answer's status and headers (over every redirect) within one budget, then the body at
the budget's pace. Only the TCP connection has a timeout of its own (the budget's length).
Imported when a URL is first opened: the shell tools start faster without urllib.
"""

from __future__ import annotations

import functools
import http.client
import io
import ssl
import time
import urllib.request
from typing import Any

from .retrying import WaitBudget


def open_url(request: urllib.request.Request, budget: WaitBudget) -> Any:
    """The response to ``request``, its headers read; the body is then read within ``budget``.

    Raises as ``urlopen`` does; a budget that runs out raises :class:`TimeoutError`
    (``budget.cause()`` says what was too slow).
    """
    opener = urllib.request.build_opener(_Handler(budget))
    response = opener.open(request, timeout=budget.timeout)
    budget.answered()
    return response


class _TimedConnection(http.client.HTTPConnection):
    """An HTTP connection whose answers (a proxy's to ``CONNECT`` too) are read within
    ``budget``."""

    def __init__(self, host: str, *, budget: WaitBudget, **options: Any) -> None:
        super().__init__(host, **options)
        self.budget = budget
        # http.client makes every answer it reads with response_class, from the socket.
        self.response_class = functools.partial(_timed_response, budget=budget)  # type: ignore[assignment]


class _TimedHttpsConnection(_TimedConnection, http.client.HTTPSConnection):
    """An HTTPS connection whose TLS handshake and answers are within ``budget``."""

    def __init__(self, host: str, *, budget: WaitBudget, **options: Any) -> None:
        super().__init__(host, budget=budget, context=_TimedContext.default(budget), **options)


def _timed_response(sock: Any, *args: Any, budget: WaitBudget, **kwargs: Any) -> Any:
    """An answer read from ``sock`` within ``budget``."""
    return http.client.HTTPResponse(_TimedSocket(sock, budget), *args, **kwargs)  # type: ignore[arg-type]


class _TimedContext(ssl.SSLContext):
    """The default TLS settings (``ssl.create_default_context``'s), with each handshake
    run within what :attr:`budget` has left and charged to it: a server that sends its
    handshake a few bytes at a time keeps the reader waiting no longer than the budget.
    """

    budget: WaitBudget

    @classmethod
    def default(cls, budget: WaitBudget) -> _TimedContext:
        context = cls(ssl.PROTOCOL_TLS_CLIENT)  # (hostnames and certificates checked)
        context.load_default_certs()
        context.budget = budget
        return context

    def wrap_socket(self, sock: Any, *args: Any, **kwargs: Any) -> ssl.SSLSocket:  # type: ignore[override]
        kwargs["do_handshake_on_connect"] = False
        tls = super().wrap_socket(sock, *args, **kwargs)
        left = self.budget.left()
        if left <= 0:
            raise TimeoutError("timed out")
        tls.settimeout(left)  # one deadline for the whole handshake, however it trickles
        started = time.monotonic()
        try:
            tls.do_handshake()
        finally:
            self.budget.waited(time.monotonic() - started, 0)
        return tls


class _Handler(urllib.request.HTTPHandler, urllib.request.HTTPSHandler):
    """Opens ``http://`` and ``https://`` URLs with connections read within ``budget``."""

    def __init__(self, budget: WaitBudget) -> None:
        super().__init__()
        self.budget = budget

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_TimedConnection, req, budget=self.budget)  # type: ignore[arg-type]

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_TimedHttpsConnection, req, budget=self.budget)  # type: ignore[arg-type]


class _TimedSocket:
    """A socket whose reading side (``makefile``, what ``http.client`` reads an answer
    from) waits within a budget; everything else is the socket's own."""

    def __init__(self, sock: Any, budget: WaitBudget) -> None:
        self._sock = sock
        self._budget = budget

    def makefile(self, mode: str = "rb", *args: Any, **kwargs: Any) -> io.BufferedReader:
        return io.BufferedReader(_TimedReader(self._sock, self._budget))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class _TimedReader(io.RawIOBase):
    """Reads a socket, each receive waiting only as long as the budget has left."""

    def __init__(self, sock: Any, budget: WaitBudget) -> None:
        self._sock = sock
        # The socket's own file: while it is open, closing the connection leaves the
        # socket open for the answer, as http.client expects.
        self._file = sock.makefile("rb", buffering=0)
        self._budget = budget

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        left = self._budget.left()
        if left <= 0:
            raise TimeoutError("timed out")
        self._sock.settimeout(left)
        started, count = time.monotonic(), None
        try:
            count = self._file.readinto(buffer)
        finally:
            self._budget.waited(time.monotonic() - started, count or 0)
        return count

    def close(self) -> None:
        if not self.closed:
            self._file.close()
        super().close()
