"""HTTP(S) objects for :class:`~tarkit.storage.retrying.ResumingStream`.

:class:`HttpObject` connects with ``urllib`` within a
:class:`~tarkit.storage.retrying.WaitBudget` of ``timeout`` (:mod:`.timed_http`): the
connection, the answer's headers, and the body at its pace. A reconnection asks for ``Range: bytes=N-`` with ``If-Range`` set to the
validator learnt on the first connection (a strong ETag, else Last-Modified), and checks
the answer (a ranged read of a sample asks for ``bytes=N-M`` alike, see
:mod:`~tarkit.storage.ranges`):

- ``206``: the range must start at N, and the reply's ETag, Last-Modified and total
  length must be those of the first connection;
- ``200`` (the server ignored the range, or the validator no longer matched): if the
  validator and length still match, the first N bytes are read and dropped; if not, the
  object changed;
- ``408``, ``429``, ``500``, ``502``, ``503``, ``504``: another try (``Retry-After``
  honoured); ``404``/``410`` on a reconnection: the object changed (it is gone); other
  statuses are errors.

A refused or reset connection, a budget run out, and a body that ends before its length are
worth another try; a host that does not exist, a certificate that does not verify and
a URL urllib cannot use are not.

>>> retry_after("7"), retry_after(None), retry_after("soon")
(7.0, None, None)
"""

from __future__ import annotations

import re
import time
from typing import Any

from ..errors import SourceError, _ConnectionFailed
from .retrying import WaitBudget, changed

RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")


def retry_after(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (seconds or an HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    import email.utils  # here: shell tools start faster without it

    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class HttpObject:
    """One HTTP(S) URL: opens connections at byte offsets and checks the object stays the same."""

    seekable = False

    def __init__(self, url: str) -> None:
        self.name = url
        self.size: int | None = None
        self.etag: str | None = None
        self.modified: str | None = None
        self._known = False  # validators learnt from a first answer

    def connect(self, offset: int, timeout: float, stop: int | None = None) -> _HttpConnection:
        """A connection from byte ``offset`` (to ``stop``, excluded, when given: one
        ``Range: bytes=offset-(stop-1)`` request, whose answer may end at the object's
        end, before ``stop``)."""
        import http.client
        import urllib.error
        import urllib.request

        from .timed_http import open_url

        headers = {}
        if offset or stop is not None:
            headers["Range"] = f"bytes={offset}-{'' if stop is None else stop - 1}"
            if_range = self._if_range()
            if if_range is not None:
                headers["If-Range"] = if_range
        request = urllib.request.Request(self.name, headers=headers)
        budget = WaitBudget(timeout)
        try:
            response = open_url(request, budget)
        except urllib.error.HTTPError as exc:
            exc.close()
            total = _total(exc.headers)
            if exc.code == 416 and not self._known and total is not None:
                # Bytes from the end on (a range past it: none, the object is shorter).
                if total == offset or (stop is not None and total < offset):
                    self._known, self.size = True, total
                    return _HttpConnection(None, budget)
            raise self._status_error(exc.code, str(exc.reason), exc.headers, offset) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            raise self._connect_error(exc, budget) from None
        try:
            return self._accept(response, offset, budget)
        except BaseException:
            response.close()
            raise

    def _if_range(self) -> str | None:
        if self.etag is not None and not self.etag.startswith("W/"):
            return self.etag  # If-Range needs a strong validator
        return self.modified

    def _accept(self, response: Any, offset: int, budget: WaitBudget) -> _HttpConnection:
        headers = response.headers
        length = _number(headers.get("Content-Length"))
        if response.status == 206:
            match = _CONTENT_RANGE.fullmatch(headers.get("Content-Range", "").strip())
            if match is None or int(match.group(1)) != offset:
                raise SourceError(
                    f"{self.name}: the server answered a request for bytes from {offset} "
                    f"with {headers.get('Content-Range')!r}"
                )
            total = None if match.group(3) == "*" else int(match.group(3))
            skip = 0
        elif response.status == 200:
            total, skip = length, offset
        else:
            raise SourceError(f"{self.name}: HTTP {response.status} {response.reason}")
        self._check(headers.get("ETag"), headers.get("Last-Modified"), total)
        connection = _HttpConnection(response, budget)
        while skip:  # the server ignored the range: read past the bytes already delivered
            data = connection.read(min(skip, 1 << 20))
            if not data:
                if self.size is not None and offset >= self.size:
                    raise SourceError(f"{self.name}: input ends before byte {offset}")
                raise _ConnectionFailed(f"connection closed before byte {offset}")
            skip -= len(data)
        return connection

    def _check(self, etag: str | None, modified: str | None, total: int | None) -> None:
        """Remember the object's validators on the first answer; compare them later."""
        if not self._known:
            self._known = True
            self.etag, self.modified, self.size = etag, modified, total
            return
        if etag != self.etag:
            raise changed(self.name, f"its ETag was {self.etag}, now {etag}")
        if self.etag is None and modified != self.modified:
            raise changed(self.name, f"it was last modified {self.modified}, now {modified}")
        if self.size is not None and total is not None and total != self.size:
            raise changed(self.name, f"it was {self.size} bytes long, now {total}")

    def _status_error(self, code: int, reason: str, headers: Any, offset: int) -> Exception:
        if code in RETRY_STATUSES:
            return _ConnectionFailed(
                f"HTTP {code} {reason}", retry_after(headers.get("Retry-After"))
            )
        if self._known and code in (404, 410, 412, 416):
            return changed(self.name, f"HTTP {code} {reason}")
        if code == 416:
            return SourceError(f"{self.name}: input ends before byte {offset}")
        missing = SourceError.MISSING if code in (404, 410) else None
        return SourceError(f"{self.name}: HTTP {code} {reason}", reason=missing)

    def _connect_error(self, exc: Exception, budget: WaitBudget) -> Exception:
        import http.client
        import socket
        import ssl

        reason = getattr(exc, "reason", exc)  # a URLError wraps the cause
        if isinstance(reason, TimeoutError):
            return _ConnectionFailed(budget.cause(), slow=True)
        final = isinstance(reason, ssl.SSLCertVerificationError) or (
            isinstance(reason, socket.gaierror) and reason.errno == socket.EAI_NONAME
        )
        if not final and isinstance(reason, (OSError, http.client.HTTPException)):
            return _ConnectionFailed(f"cannot connect: {reason}")
        return SourceError(f"{self.name}: cannot connect: {reason}")


class _HttpConnection:
    """An HTTP response body read by chunks; its failures raise
    :class:`~tarkit.errors._ConnectionFailed`."""

    def __init__(self, response: Any, budget: WaitBudget) -> None:
        self._response = response
        self._budget = budget

    def read(self, size: int) -> bytes:
        import http.client

        if self._response is None:  # an empty range
            return b""
        try:
            return bytes(self._response.read1(size))
        except TimeoutError:
            raise _ConnectionFailed(self._budget.cause(), slow=True) from None
        except ConnectionResetError:
            raise _ConnectionFailed("connection reset") from None
        except http.client.IncompleteRead:
            raise _ConnectionFailed("connection closed early") from None
        except (OSError, http.client.HTTPException) as exc:
            raise _ConnectionFailed(f"connection failed: {exc}") from None

    def seek(self, offset: int) -> bool:
        return False  # a new request for a byte range

    def close(self) -> None:
        if self._response is not None:
            self._response.close()


def _total(headers: Any) -> int | None:
    """The object's length from a 416 answer's ``Content-Range: bytes */N``."""
    match = re.fullmatch(r"bytes\s+\*/(\d+)", (headers.get("Content-Range") or "").strip())
    return int(match.group(1)) if match else None


def _number(text: str | None) -> int | None:
    return int(text) if text is not None and text.strip().isdigit() else None
