"""An HTTP server on 127.0.0.1 for loader and cache tests: byte ranges, hit counts, gates.

``files`` maps a path to bytes. ``hits`` counts GET requests per path. ``gates[path] =
(n, event)`` sends the first ``n`` bytes of that file, then waits (at most 20 s) for the
event before sending the rest. ``truncate[path] = n`` sends only ``n`` bytes of a body
while announcing its full length. ``honour_ranges = False`` answers range requests with
the whole file, as some servers do.

``Server`` (the ``http_server`` fixture of conftest) is the plain one: it serves ``files`` (path →
bytes) and, under ``/cut/<path>``, sends a full Content-Length but closes the connection
halfway.
"""

from __future__ import annotations

import http.server
import re
import threading
from collections import Counter


class ShardServer:
    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.hits: Counter[str] = Counter()
        self.ranges: list[tuple[str, int]] = []
        self.gates: dict[str, tuple[int, threading.Event]] = {}
        self.truncate: dict[str, int] = {}
        self.honour_ranges = True
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802
                server.hits[self.path] += 1
                data = server.files.get(self.path)
                if data is None:
                    self.send_error(404)
                    return
                start = 0
                match = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", ""))
                if match and server.honour_ranges:
                    start = int(match.group(1))
                    server.ranges.append((self.path, start))
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                body = data[start:]
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                body = body[: server.truncate.get(self.path, len(body))]
                gate = server.gates.get(self.path)
                try:
                    if gate is not None:
                        self.wfile.write(body[: gate[0]])
                        self.wfile.flush()
                        gate[1].wait(20)
                        body = body[gate[0] :]
                    self.wfile.write(body)
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass
                if self.path in server.truncate:
                    self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def stop(self) -> None:
        for _, event in self.gates.values():
            event.set()
        self.httpd.shutdown()
        self.httpd.server_close()


class Server:
    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                cut = self.path.startswith("/cut/")
                data = server.files.get(self.path[4:] if cut else self.path)
                if data is None:
                    self.send_error(404, "Not Found")
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data[: len(data) // 2] if cut else data)
                self.wfile.flush()
                self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
