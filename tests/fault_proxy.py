"""A TCP proxy on 127.0.0.1 that breaks connections on demand (in front of moto's S3 server).

Every connection to ``proxy.url`` is forwarded to the upstream port. Faults strike the
answers (upstream to client), counted in bytes over all connections from the moment the
fault is armed: ``proxy.drop_after(n)`` closes the connection that carries byte ``n``
after forwarding the bytes before it, ``proxy.reset_after(n)`` resets it (TCP RST) and
``proxy.stall_after(n, seconds)`` stops forwarding on it for ``seconds`` (``stop()``
ends the wait), then closes it. Faults strike once each, in the order they were armed.
``refuse_answers = True`` closes every connection at the first byte of its answer.
"""

from __future__ import annotations

import socket
import struct
import threading
from dataclasses import dataclass


@dataclass
class _Fault:
    kind: str
    at: int
    seconds: float = 0.0


class FaultProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.forwarded = 0  # answer bytes forwarded, over all connections
        self.faults: list[_Fault] = []
        self.struck: list[str] = []
        self.refuse_answers = False
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def drop_after(self, count: int) -> None:
        self._arm("drop", count)

    def reset_after(self, count: int) -> None:
        self._arm("reset", count)

    def stall_after(self, count: int, seconds: float = 60.0) -> None:
        self._arm("stall", count, seconds)

    def _arm(self, kind: str, count: int, seconds: float = 0.0) -> None:
        with self._lock:
            self.faults.append(_Fault(kind, self.forwarded + count, seconds))
            self.faults.sort(key=lambda fault: fault.at)

    def stop(self) -> None:
        self.stopping.set()
        self._listener.close()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            except OSError:
                client.close()
                continue
            threading.Thread(target=self._requests, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._answers, args=(upstream, client), daemon=True).start()

    def _requests(self, client: socket.socket, upstream: socket.socket) -> None:
        try:
            while data := client.recv(1 << 16):
                upstream.sendall(data)
        except OSError:
            pass
        _close(upstream)

    def _answers(self, upstream: socket.socket, client: socket.socket) -> None:
        try:
            while data := upstream.recv(1 << 16):
                if self.refuse_answers:
                    break
                with self._lock:
                    start = self.forwarded
                    fault = self.faults[0] if self.faults else None
                    if fault is not None and fault.at < start + len(data):
                        self.faults.pop(0)
                        self.struck.append(fault.kind)
                        self.forwarded = max(start, fault.at)
                    else:
                        fault = None
                        self.forwarded += len(data)
                if fault is None:
                    client.sendall(data)
                    continue
                client.sendall(data[: max(0, fault.at - start)])
                if fault.kind == "stall":
                    self.stopping.wait(fault.seconds)
                if fault.kind == "reset":
                    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    client.close()  # with no lingering: an RST, not a FIN
                break
        except OSError:
            pass
        _close(client)
        _close(upstream)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
