"""Servers that answer as no NATS server does, on loopback, each in a thread of the test process: the
console must pay for what one of them sends with that system alone."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

GOOD_INFO = b'INFO {"server_id":"HOSTILE","server_name":"hostile","version":"2.14.0","proto":1,"headers":true,' \
            b'"max_payload":1048576,"jetstream":true,"client_id":1}\r\n'


class _Threaded(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


class NatsLike:
    """A TCP server on a free loopback port: `greet` is written on accept; with `then`, once the client's
    first PING is read its PONG is sent and `then(sock)` writes whatever it writes."""

    def __init__(self, greet: bytes, then: Callable[[socket.socket], None] | None = None):
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                sock: socket.socket = self.request
                outer.accepted += 1
                try:
                    sock.sendall(greet)
                    if then is None:
                        while sock.recv(65536):  # held open, as a server that never says more
                            pass
                        return
                    seen = b""
                    while b"PING\r\n" not in seen:
                        chunk = sock.recv(65536)
                        if not chunk:
                            return
                        seen += chunk
                    sock.sendall(b"PONG\r\n")
                    then(sock)
                except OSError:
                    return

        self.accepted = 0
        self._server = _Threaded(("127.0.0.1", 0), Handler)
        self.url = f"nats://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> NatsLike:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def streams_a_huge_msg(size: int = 700_000_000, rate: int = 8 << 20, most: float = 30.0) -> Callable[[socket.socket], None]:
    """After the handshake: a MSG announcing `size` bytes, its payload streamed at `rate` bytes a second
    until the client hangs up (or `most` seconds)."""

    def then(sock: socket.socket) -> None:
        sock.sendall(b"MSG anything 1 %d\r\n" % size)
        chunk = b"x" * (1 << 20)
        sent, start = 0, time.monotonic()
        while sent < size and time.monotonic() - start < most:
            sock.sendall(chunk)
            sent += len(chunk)
            time.sleep(len(chunk) / rate)

    return then


class MonitorLike:
    """An HTTP server on a free loopback port answering every GET as `kind` says: "drip" (headers, then a
    byte a second), "huge" (`size` bytes of a JSON string, as fast as read), "redirect" (to `to`)."""

    def __init__(self, kind: str, size: int = 300 << 20, to: str = ""):
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                try:
                    if kind == "redirect":
                        self.send_response(302)
                        self.send_header("Location", to)
                        self.end_headers()
                        return
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    if kind == "drip":
                        for _ in range(600):
                            self.wfile.write(b" ")
                            self.wfile.flush()
                            time.sleep(1.0)
                    elif kind == "huge":
                        self.wfile.write(b'{"x":"')
                        chunk = b"y" * (1 << 20)
                        for _ in range(size >> 20):
                            self.wfile.write(chunk)
                        self.wfile.write(b'"}')
                except OSError:
                    return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> MonitorLike:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
