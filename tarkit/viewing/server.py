"""The viewer's HTTP server: the page, its JSON answers, and the fields' bytes, guarded.

The standard library's :class:`~http.server.ThreadingHTTPServer` serves a fixed set of
addresses, read-only (GET and HEAD):

- ``/`` and ``/static/view.js``, ``/static/view.css``: the page, from the package;
- ``/api/info``, ``/api/page?start=&count=&where=``, ``/api/find?key=&start=``,
  ``/api/stats``: JSON (:class:`~tarkit.viewing.pages.Pages`,
  :class:`~tarkit.viewing.summary.Summary`);
- ``/field/POSITION/FIELD``: the bytes of a field of the sample at a position (``?as=png``
  for an image a browser does not draw). A request names a sample and a field, never a
  path: nothing else of the machine is reachable.

What guards it, since a shard's bytes are not trusted and the server is on the user's
machine:

- every field is served with the content type of its extension (text ones as
  ``text/plain``, unknown ones as ``application/octet-stream`` to download),
  ``X-Content-Type-Options: nosniff`` and ``Content-Security-Policy: default-src 'none';
  sandbox``, so that an SVG or HTML field opened on its own runs nothing;
- the page has a strict policy (:data:`PAGE_POLICY`: its own script and style only, no
  inline script, no other origin) and puts every value in the document as text;
- the ``Host`` header must name this machine (an IP address, ``localhost``, or the name
  it was started with), so that another site cannot reach it through a name that it
  points here (DNS rebinding); nothing is sent to another origin (no CORS, and
  ``Cross-Origin-Resource-Policy: same-origin``), and nothing changes state.
"""

from __future__ import annotations

import ipaddress
import json
import re
import socket
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.resources import files
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from ..errors import NotFound, TarkitError, UsageError
from . import fields
from .pages import Pages
from .summary import Summary

PAGE_POLICY = (
    "default-src 'none'; img-src 'self' data:; media-src 'self'; style-src 'self'; "
    "script-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
FIELD_POLICY = "default-src 'none'; sandbox"
STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/static/view.js": ("view.js", "text/javascript; charset=utf-8"),
    "/static/view.css": ("view.css", "text/css; charset=utf-8"),
}
_RANGE = re.compile(r"bytes=(\d*)-(\d*)")
_POSITION = re.compile(r"\d{1,18}")


class ViewServer(ThreadingHTTPServer):
    """The viewer's server, listening on ``host``:``port`` (0: a free port) from its
    making; :attr:`url` is its address. Call ``serve_forever()``, then ``server_close()``
    and :meth:`close`. ``report`` is told, in a line, of a request that failed by a bug.

    Raises :class:`~tarkit.errors.UsageError` when it cannot listen there.
    """

    daemon_threads = True
    request_queue_size = 64  # a page opening asks for 50 things at once

    def __init__(
        self,
        pages: Pages,
        summary: Summary,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        report: Callable[[str], None] | None = None,
    ) -> None:
        self.pages = pages
        self.summary = summary
        self.report = report
        self.loopback = _is_loopback(host)
        self.host_names = {"localhost", host.lower().strip("[]")}
        if not self.loopback:
            self.host_names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
        self.static = {
            path: ((files(__package__) / "static" / name).read_bytes(), kind)
            for path, (name, kind) in STATIC.items()
        }
        if ":" in host:
            self.address_family = socket.AF_INET6
        try:
            super().__init__((host.strip("[]"), port), _Handler)
        except (OSError, OverflowError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise UsageError(f"cannot listen on {host} port {port}: {why}") from None

    @property
    def url(self) -> str:
        """The page's address (a wildcard address shown as this machine's loopback)."""
        host, port = str(self.server_address[0]), self.server_address[1]
        if ipaddress.ip_address(host).is_unspecified:
            host = "127.0.0.1" if self.address_family == socket.AF_INET else "::1"
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}/"

    def allows(self, host: str | None) -> bool:
        """Whether a request's ``Host`` header names this machine (see the module
        docstring); a request without one (HTTP/1.0) is not a browser's."""
        if host is None:
            return True
        name = host.strip().lower()
        if name.startswith("["):
            name = name[1 : name.find("]")] if "]" in name else ""
        else:
            name = name.rsplit(":", 1)[0] if name.count(":") == 1 else name
        if name in self.host_names:
            return True
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return False
        return True

    def close(self) -> None:
        """Close the samples' shards (after ``server_close()``)."""
        self.pages.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client gone mid-answer; a bug is reported by the handler


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class _Handler(BaseHTTPRequestHandler):
    server: ViewServer
    protocol_version = "HTTP/1.1"  # connections kept open: a page is 50 requests
    disable_nagle_algorithm = True  # headers and body in two writes: not 40 ms apart
    timeout = 120  # seconds an idle kept-open connection holds its thread

    def version_string(self) -> str:
        return "tarkit-view"

    def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
        self._answer(send_body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(send_body=False)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass  # the library prints nothing

    def _answer(self, send_body: bool) -> None:
        self.send_body = send_body
        try:
            if not self.server.allows(self.headers.get("Host")):
                self._send_text(403, "this server answers only requests to this machine's "
                                     "own names (Host header refused)")  # fmt: skip
                return
            url = urlsplit(self.path)
            query = parse_qs(url.query, keep_blank_values=True)
            if url.path in self.server.static:
                body, kind = self.server.static[url.path]
                self._send(200, body, kind, policy=PAGE_POLICY)
            elif url.path.startswith("/api/"):
                self._send_json(self._api(url.path, query))
            elif url.path.startswith("/field/"):
                self._field(url.path, query)
            else:
                self._send_text(404, f"no such page: {url.path}")
        except NotFound as exc:
            self._send_json({"error": str(exc)}, 404)
        except UsageError as exc:
            self._send_json({"error": str(exc)}, 400)
        except TarkitError as exc:
            self._send_json({"error": str(exc)}, 500)
        except (ConnectionError, TimeoutError):
            self.close_connection = True
        except Exception as exc:  # a bug: answered and reported, the server goes on
            if self.server.report is not None:
                self.server.report(f"{self.path}: {type(exc).__name__}: {exc}")
            self._send_json({"error": f"internal error: {type(exc).__name__}: {exc}"}, 500)

    # -- routes ---------------------------------------------------------------------

    def _api(self, path: str, query: dict[str, list[str]]) -> Any:
        pages = self.server.pages
        if path == "/api/info":
            return pages.info()
        if path == "/api/page":
            where = _one(query, "where")
            return pages.page(
                _number(query, "start", 0),
                _number(query, "count", pages.per_page),
                where if where else None,
            )
        if path == "/api/find":
            key = _one(query, "key")
            if key is None:
                raise UsageError("find needs a key")
            return pages.find(key, _number(query, "start", 0))
        if path == "/api/stats":
            return self.server.summary.state()
        raise NotFound(f"no such page: {path}")

    def _field(self, path: str, query: dict[str, list[str]]) -> None:
        _, _, position, name = path.split("/", 3) if path.count("/") >= 3 else ("", "", "", "")
        if not _POSITION.fullmatch(position) or not name:
            raise NotFound(f"no such page: {path}")
        field = unquote(name, errors="surrogateescape")
        key, field, data = self.server.pages.field(int(position), field)
        kind = fields.content_type(field, data[: 4 * fields.TEXT_CHARS])
        if _one(query, "as") == "png" and fields.extension(field) in fields.CONVERTED_IMAGES:
            converted = fields.as_png(data)
            if converted is None:
                raise UsageError(f"sample {position} ({key}): field {field} is not an image "
                                 "that can be read")  # fmt: skip
            data, kind, field = converted, "image/png", field + ".png"
        shown = quote(f"{key.rsplit('/', 1)[-1]}.{field}".encode("utf-8", "surrogateescape"))
        disposition = "attachment" if kind == fields.BINARY else "inline"
        headers = {"Content-Disposition": f"{disposition}; filename*=UTF-8''{shown}",
                   "Accept-Ranges": "bytes"}  # fmt: skip
        span = _range(self.headers.get("Range"), len(data))
        if span is None:
            self._send(200, data, kind, headers=headers)
        elif span[0] >= len(data):
            self._send(416, b"", kind, headers={"Content-Range": f"bytes */{len(data)}"})
        else:
            start, stop = span
            headers["Content-Range"] = f"bytes {start}-{stop - 1}/{len(data)}"
            self._send(206, data[start:stop], kind, headers=headers)

    # -- answers --------------------------------------------------------------------

    def _send_json(self, value: Any, status: int = 200) -> None:
        body = json.dumps(value).encode("ascii")  # any name, escaped: valid everywhere
        self._send(status, body, "application/json")

    def _send_text(self, status: int, text: str) -> None:
        self._send(status, text.encode("utf-8") + b"\n", fields.TEXT)

    def _send(
        self,
        status: int,
        body: bytes,
        kind: str,
        *,
        policy: str = FIELD_POLICY,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Security-Policy", policy)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("X-Frame-Options", "DENY")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Cross-Origin-Resource-Policy", "same-origin")
        self.send_header("Cache-Control", "no-store")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.send_body and body:
            self.wfile.write(body)


def _one(query: dict[str, list[str]], name: str) -> str | None:
    values = query.get(name)
    return values[-1] if values else None


def _number(query: dict[str, list[str]], name: str, default: int) -> int:
    value = _one(query, name)
    if value is None or value == "":
        return default
    if not _POSITION.fullmatch(value):
        raise UsageError(f"{name} must be a whole number (got {value!r})")
    return int(value)


def _range(header: str | None, size: int) -> tuple[int, int] | None:
    """The one byte range ``header`` asks for, as (start, stop) within ``size`` bytes;
    None to send the whole (no header, several ranges, or one not understood); a start
    at or past ``size`` is returned as is (not satisfiable)."""
    if header is None:
        return None
    match = _RANGE.fullmatch(header.strip())
    if match is None or not (match[1] or match[2]):
        return None
    if not match[1]:  # the last N bytes
        return max(0, size - int(match[2])), size
    start = int(match[1])
    stop = size if not match[2] else min(size, int(match[2]) + 1)
    if match[2] and stop <= start:
        return None
    return start, stop
