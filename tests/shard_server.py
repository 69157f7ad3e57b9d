"""The one HTTP server of the test suite: files on 127.0.0.1, with network faults on demand.

``files`` maps a path to bytes. Every answer carries ``Content-Length`` (``lengths = False``
leaves it out: the body then ends where the connection closes, and a cut body looks
whole), an ``ETag`` (a hash of the content) and ``Last-Modified`` (``validators = False``
leaves both out);
``Range: bytes=N-`` and ``bytes=N-M`` are honoured (``honour_ranges = False``: the whole
file, with 200, as some servers do) unless an ``If-Range`` no longer matches, which gets the
whole file with 200, as RFC 9110 says (``honour_if_range = False`` ignores ``If-Range``).

Records: ``hits`` counts GET requests per path, ``ranges`` lists ``(path, start)`` of every
range honoured, ``requests`` every ``(path, headers)``, ``sent`` the body bytes sent.

Faults strike the next requests of a path, one each, in order
(``server.fail("/a.tar", drop(1000), status(503))``):

- ``drop(n)``: send ``n`` bytes of the body, then close the connection;
- ``reset(n)``: send ``n`` bytes, then reset the connection (TCP RST);
- ``stall(n, seconds)``: send ``n`` bytes, then nothing for ``seconds`` (``stop()`` ends it);
- ``status(code, retry_after)``: answer ``code`` (with ``Retry-After`` when given), no body;
- ``replace(n, data)``: send ``n`` bytes, then give the path the content ``data`` and
  close the connection (the file changed while being read);
- ``trickle(n, every)``: send ``n`` bytes, then the rest 2 bytes at a time, one pair
  every ``every`` seconds (a slow-loris body; ``stop()`` ends it);
- ``slow_headers(every)``: send the status line and headers a byte at a time, one every
  ``every`` seconds, then the body.

``cut[path] = n``: no answer ever goes past byte ``n`` of the file (the connection closes
there, every time). ``gates[path] = (n, event)``: send ``n`` bytes, then wait for the event
(at most 20 s) before the rest. ``drop_every[path] = n``: every answer closes after ``n``
bytes of its body (a flaky network, for the benchmark).
"""

from __future__ import annotations

import email.utils
import hashlib
import http
import http.server
import re
import socket
import struct
import threading
from collections import Counter
from dataclasses import dataclass


@dataclass(frozen=True)
class Fault:
    kind: str  # drop, reset, stall, status, replace, trickle, slow_headers
    after: int = 0
    seconds: float = 0.0
    code: int = 0
    retry_after: str | None = None
    data: bytes = b""


def drop(after: int) -> Fault:
    return Fault("drop", after)


def reset(after: int) -> Fault:
    return Fault("reset", after)


def stall(after: int, seconds: float = 60.0) -> Fault:
    return Fault("stall", after, seconds=seconds)


def status(code: int, retry_after: str | int | None = None) -> Fault:
    return Fault("status", code=code, retry_after=None if retry_after is None else str(retry_after))


def replace(after: int, data: bytes) -> Fault:
    return Fault("replace", after, data=data)


def trickle(after: int, every: float = 0.05) -> Fault:
    return Fault("trickle", after, seconds=every)


def slow_headers(every: float = 0.05) -> Fault:
    return Fault("slow_headers", 1 << 62, seconds=every)


class ShardServer:
    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.hits: Counter[str] = Counter()
        self.ranges: list[tuple[str, int]] = []
        self.sent = 0
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.faults: dict[str, list[Fault]] = {}
        self.cut: dict[str, int] = {}
        self.drop_every: dict[str, int] = {}
        self.gates: dict[str, tuple[int, threading.Event]] = {}
        self.honour_ranges = True
        self.honour_if_range = True
        self.validators = True
        self.lengths = True
        self.stopping = threading.Event()
        self._versions: Counter[str] = Counter()
        self._etags: dict[str, tuple[bytes, str]] = {}
        self._lock = threading.Lock()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802
                server.serve(self)

            def log_message(self, *args: object) -> None:
                pass

            def finish(self) -> None:
                try:
                    super().finish()
                except OSError:
                    pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def fail(self, path: str, *faults: Fault) -> None:
        """Make the next requests of ``path`` meet ``faults``, one each, in order."""
        with self._lock:
            self.faults.setdefault(path, []).extend(faults)

    def put(self, path: str, data: bytes) -> None:
        """Give ``path`` new content (a new ETag and Last-Modified)."""
        with self._lock:
            self.files[path] = data
            self._versions[path] += 1

    def etag(self, path: str) -> str:
        data = self.files[path]
        known = self._etags.get(path)
        if known is None or known[0] is not data:  # hashing hundreds of MB takes a while
            known = (data, '"' + hashlib.sha256(data).hexdigest()[:20] + '"')
            self._etags[path] = known
        return known[1]

    def last_modified(self, path: str) -> str:
        return email.utils.formatdate(1_700_000_000 + self._versions[path], usegmt=True)

    def serve(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        path = handler.path
        with self._lock:
            self.hits[path] += 1
            self.requests.append((path, dict(handler.headers.items())))
            queue = self.faults.get(path)
            fault = queue.pop(0) if queue else None
            data = self.files.get(path)
        if fault is not None and fault.kind == "status":
            handler.send_response(fault.code)
            if fault.retry_after is not None:
                handler.send_header("Retry-After", fault.retry_after)
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        if data is None:
            handler.send_error(404)
            return
        etag, modified = self.etag(path), self.last_modified(path)
        start, end = 0, len(data)
        match = re.fullmatch(r"bytes=(\d+)-(\d*)", handler.headers.get("Range", ""))
        if_range = handler.headers.get("If-Range")
        fresh = if_range is None or not self.honour_if_range or if_range in (etag, modified)
        head: list[tuple[str, str]] = []
        if match and self.honour_ranges and fresh:
            start = int(match.group(1))
            if start >= len(data):
                handler.send_response(416)
                handler.send_header("Content-Range", f"bytes */{len(data)}")
                handler.send_header("Content-Length", "0")
                handler.end_headers()
                return
            if match.group(2):
                end = min(end, int(match.group(2)) + 1)
            self.ranges.append((path, start))
            code = 206
            head.append(("Content-Range", f"bytes {start}-{end - 1}/{len(data)}"))
        else:
            code = 200
        body = memoryview(data)[start:end]  # no copy: the benchmark serves hundreds of MB
        if self.lengths:
            head.append(("Content-Length", str(len(body))))
        else:
            head.append(("Connection", "close"))
            handler.close_connection = True
        if self.validators:
            head += [("ETag", etag), ("Last-Modified", modified)]
        if not self._send_head(handler, code, head, fault):
            return
        limit = len(body)
        if path in self.cut:
            limit = max(0, self.cut[path] - start)
        if path in self.drop_every:
            limit = min(limit, self.drop_every[path])
        if fault is not None:
            limit = min(limit, fault.after)
        gate = self.gates.get(path)
        try:
            if fault is not None and fault.kind == "trickle":
                handler.close_connection = True
                handler.wfile.write(body[: fault.after])
                for at in range(fault.after, len(body), 2):
                    handler.wfile.flush()
                    if self.stopping.wait(fault.seconds):
                        break
                    handler.wfile.write(body[at : at + 2])
                limit = len(body)
            elif gate is not None and gate[0] < limit:
                handler.wfile.write(body[: gate[0]])
                handler.wfile.flush()
                gate[1].wait(20)
                handler.wfile.write(body[gate[0] : limit])
            else:
                handler.wfile.write(body[:limit])
                with self._lock:
                    self.sent += limit
            handler.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            handler.close_connection = True
            return
        if limit == len(body):
            return
        handler.close_connection = True
        kind = fault.kind if fault is not None and limit == fault.after else "drop"
        if kind == "stall":
            self.stopping.wait(fault.seconds)  # type: ignore[union-attr]
        elif kind == "replace":
            self.put(path, fault.data)  # type: ignore[union-attr]
        elif kind == "reset":
            handler.connection.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
            )
            handler.connection.close()

    def _send_head(
        self,
        handler: http.server.BaseHTTPRequestHandler,
        code: int,
        head: list[tuple[str, str]],
        fault: Fault | None,
    ) -> bool:
        """Send the status line and headers, a byte at a time under ``slow_headers``;
        False when the client went away or the server stopped first."""
        if fault is None or fault.kind != "slow_headers":
            handler.send_response(code)
            for name, value in head:
                handler.send_header(name, value)
            handler.end_headers()
            return True
        lines = [f"HTTP/1.1 {code} {http.HTTPStatus(code).phrase}"]
        lines += [f"{name}: {value}" for name, value in head]
        text = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        try:
            for at in range(len(text)):
                if self.stopping.wait(fault.seconds):
                    return False
                handler.wfile.write(text[at : at + 1])
                handler.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            handler.close_connection = True
            return False
        return True

    def stop(self) -> None:
        self.stopping.set()
        for _, event in self.gates.values():
            event.set()
        self.httpd.shutdown()
        self.httpd.server_close()
