"""Slow servers for the HTTPS tests, on 127.0.0.1: a TLS server that spreads what it sends
over a given time, and a proxy that answers ``CONNECT`` a byte at a time.

:func:`certificate` makes a self-signed certificate for 127.0.0.1 with ``openssl`` (the
test is skipped, saying why, where there is none); clients trust it through
``SSL_CERT_FILE``.

:class:`SlowTlsServer` answers every ``GET`` with ``body``; it sends its TLS handshake
spread over ``handshake`` seconds and its status and headers over ``headers`` seconds (a
few chunks at even intervals), then the body at once. It speaks TLS through
``ssl.MemoryBIO`` so that it decides when each byte leaves.
"""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path

import pytest

CHUNKS = 20  # what the server sends in one step is cut into this many pieces


def certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate and its key for 127.0.0.1, in ``directory``."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl command to make a test certificate with")
    cert, key = directory / "cert.pem", directory / "key.pem"
    made = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    if made.returncode != 0:
        pytest.skip(f"openssl cannot make a test certificate: {made.stderr.strip()}")
    return cert, key


class _Server:
    """A server on 127.0.0.1 that serves each connection in a thread of its own."""

    scheme = "http"

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"{self.scheme}://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def stop(self) -> None:
        self.stopping.set()
        self.listener.close()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        raise NotImplementedError


class SlowTlsServer(_Server):
    scheme = "https"

    def __init__(self, cert: Path, key: Path, body: bytes, handshake: float, headers: float):
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(str(cert), str(key))
        self.body, self.handshake, self.headers = body, handshake, headers
        super().__init__()

    def _serve(self, conn: socket.socket) -> None:
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = self.context.wrap_bio(incoming, outgoing, server_side=True)
        conn.settimeout(0.01)
        request, shaken = b"", False
        try:
            while not self.stopping.is_set():
                self._receive(conn, incoming)
                if not shaken:
                    try:
                        tls.do_handshake()
                        shaken = True
                    except ssl.SSLWantReadError:
                        pass
                    self._send(conn, outgoing.read(), self.handshake)
                    continue
                self._send(conn, outgoing.read(), 0)  # (session tickets)
                try:
                    request += tls.read(65536)
                except ssl.SSLWantReadError:
                    continue
                if b"\r\n\r\n" in request:
                    break
            head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(self.body)}\r\n\r\n".encode()
            tls.write(head)
            self._send(conn, outgoing.read(), self.headers)
            tls.write(self.body)
            self._send(conn, outgoing.read(), 0)
            time.sleep(1)  # the client reads the body and closes
        except (OSError, ssl.SSLError):
            pass
        finally:
            conn.close()

    def _receive(self, conn: socket.socket, incoming: ssl.MemoryBIO) -> None:
        try:
            data = conn.recv(65536)
        except TimeoutError:
            return
        if not data:
            raise OSError("the client left")
        incoming.write(data)

    def _send(self, conn: socket.socket, data: bytes, spread: float) -> None:
        if not data:
            return
        step = -(-len(data) // CHUNKS)
        for start in range(0, len(data), step):
            if self.stopping.is_set():
                raise OSError("stopping")
            time.sleep(spread / CHUNKS)
            conn.sendall(data[start : start + step])


class TrickleProxy(_Server):
    """A proxy that answers ``CONNECT`` with a status line, then header lines a byte every
    ``every`` seconds, never ending them."""

    def __init__(self, every: float = 0.05) -> None:
        self.every = every
        super().__init__()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                request = b""
                while b"\r\n\r\n" not in request:
                    request += conn.recv(4096) or b"\r\n\r\n"
                answer = b"HTTP/1.1 200 Connection established\r\n" + b"X-Pad: " + b"a" * 10**6
                for byte in answer:
                    if self.stopping.is_set():
                        return
                    conn.sendall(bytes([byte]))
                    time.sleep(self.every)
            except OSError:
                return
