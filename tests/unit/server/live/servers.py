"""Real HTTP servers for the live-cluster tests: a stand-in head dashboard
(stdlib ThreadingHTTPServer), our Flask app under werkzeug's threaded server, and
a minimal app with only the blueprints under test (no index cache needed)."""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast

from flask import Flask
from werkzeug.serving import make_server

from runtime.server.app import install_nosniff
from runtime.server.config import ServerConfig
from runtime.server.context import EXTENSION, Services
from runtime.server.errors import register_error_handlers
from runtime.server.live.discovery import LiveDirectory
from runtime.server.metrics import ServerMetrics
from runtime.storage.config import StorageConfig

BIG_SIZE = 24 * 1024 * 1024
GZIP_BODY = gzip.compress(b'{"compressed": true}' * 1000)


@dataclass
class Seen:
    method: str
    path: str
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)


@dataclass
class Upstream:
    """A head dashboard stand-in on a loopback port; ``seen`` records every request."""

    server: ThreadingHTTPServer
    seen: list[Seen] = field(default_factory=list)
    gap: float = 0.6  # seconds between chunks of the slow streams
    #: Extra fixed answers by path (status, headers, body): what a hostile head sends.
    routes: dict[str, tuple[int, list[tuple[str, str]], bytes]] = field(default_factory=dict)
    trickle: float = 0.15  # seconds between the bytes of /trickle and /trickle-headers
    #: /wait answers once this is set (at most 10 s): requests held by a slow head.
    released: threading.Event = field(default_factory=threading.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def last(self) -> Seen:
        return self.seen[-1]


def _handler(upstream: Upstream) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _body(self) -> bytes:
            if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                out = b""
                while True:
                    size = int(self.rfile.readline().strip().split(b";")[0], 16)
                    if size == 0:
                        self.rfile.readline()
                        return out
                    out += self.rfile.read(size)
                    self.rfile.readline()
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _send(self, status: int, body: bytes, headers: list[tuple[str, str]] | None = None) -> None:
            self.send_response(status)
            for name, value in headers or [("Content-Type", "application/json")]:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _chunks(self, parts: list[bytes], gap: float) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for n, part in enumerate(parts):
                if n:
                    time.sleep(gap)
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")

        def _trickle_body(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", "40")
            self.end_headers()
            try:
                for _ in range(40):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(upstream.trickle)
            except OSError:
                pass

        def _trickle_headers(self) -> None:
            try:
                for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"x" * 40 + b"\r\nContent-Length: 2\r\n\r\n{}":
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(upstream.trickle)
            except OSError:
                pass
            self.close_connection = True

        def _handle(self) -> None:
            body = self._body()
            seen = Seen(self.command, self.path, list(self.headers.items()), body)
            upstream.seen.append(seen)
            path = self.path.split("?", 1)[0]
            if path in upstream.routes:
                status, headers, fixed = upstream.routes[path]
                return self._send(status, fixed, headers)
            if path == "/trickle":  # 40 bytes, one at a time: never trips a read timeout
                return self._trickle_body()
            if path == "/trickle-headers":  # the head itself, one byte at a time
                return self._trickle_headers()
            if path == "/wait":
                upstream.released.wait(10)
                return self._send(200, b"{}")
            if path == "/big":
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(BIG_SIZE))
                self.end_headers()
                block = bytes(range(256)) * 4096  # 1 MiB
                for _ in range(BIG_SIZE // len(block)):
                    self.wfile.write(block)
                return
            if path in ("/slow", "/api/v0/logs/stream"):
                return self._chunks([b"tick %d\n" % n for n in range(3)], upstream.gap)
            if path == "/slow-headers":
                time.sleep(upstream.gap)
                return self._send(200, b"{}")
            if path == "/stall":  # headers at once, then the body after a gap
                self.send_response(200)
                self.send_header("Content-Length", "10")
                self.end_headers()
                self.wfile.write(b"12345")
                self.wfile.flush()
                time.sleep(upstream.gap)
                self.wfile.write(b"67890")
                return
            if path == "/gzip":
                return self._send(200, GZIP_BODY, [("Content-Type", "application/json"), ("Content-Encoding", "gzip")])
            if path == "/redirect":
                return self._send(302, b"", [("Location", f"{upstream.url}/target?x=1")])
            if path == "/hop":
                return self._send(
                    200,
                    b"hop",
                    [
                        ("Content-Type", "text/plain"),
                        ("Connection", "X-Hop-Header"),
                        ("X-Hop-Header", "must-not-pass"),
                        ("Keep-Alive", "timeout=5"),
                        ("Set-Cookie", "a=1; Path=/"),
                        ("Set-Cookie", "b=2; Path=/"),
                        ("X-Custom", "kept"),
                    ],
                )
            if path == "/ray-login":  # Ray's /api/authenticate answer: sets its token cookie
                return self._send(
                    200,
                    b"{}",
                    [
                        ("Content-Type", "application/json"),
                        ("Set-Cookie", "ray-authentication-token=leaked; HttpOnly; Path=/"),
                        ("Set-Cookie", "other=1; Path=/"),
                    ],
                )
            if path.startswith("/status/"):
                return self._send(int(path.rsplit("/", 1)[1]), b'{"from": "upstream"}')
            echo = {"method": self.command, "path": self.path, "body_len": len(body)}
            self._send(200, json.dumps(echo).encode())

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _handle  # noqa: N815

    return Handler


@contextmanager
def upstream_server() -> Iterator[Upstream]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    server.daemon_threads = True
    upstream = Upstream(server)
    server.RequestHandlerClass = _handler(upstream)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="upstream", daemon=True)
    thread.start()
    try:
        yield upstream
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def serve(app: Flask) -> Iterator[str]:
    """``app`` under werkzeug's threaded server (real sockets, real streaming)."""
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="app", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def server_config(tmp_path: Path, **overrides: Any) -> ServerConfig:
    storage = StorageConfig(backend="local", local_dir=str(tmp_path / "store"))
    return ServerConfig(storage=storage, cache_dir=tmp_path / "cache", **overrides)


def make_app(config: ServerConfig, live: LiveDirectory) -> Flask:
    """The health and UI blueprints with real Services minus the index cache and
    store (stored-session views are other modules' business)."""
    from runtime.server.views import health, ui

    app = Flask("historyserver-test", static_folder=None)
    app.url_map.strict_slashes = False
    app.extensions[EXTENSION] = Services(
        config=config,
        store=cast(Any, None),
        layout=config.storage.layout,
        indexes=cast(Any, None),
        live=live,
        metrics=ServerMetrics(),
    )
    install_nosniff(app)
    register_error_handlers(app)
    app.register_blueprint(health.bp)
    app.register_blueprint(ui.bp)
    return app


def live_cookies(namespace: str = "default", name: str = "live-demo") -> dict[str, str]:
    return {"cluster_name": name, "cluster_namespace": namespace, "session_name": "live"}


class HangingUpstream:
    """A head dashboard that hangs: ``silent`` never answers; ``headers`` starts a
    chunked log stream (headers and one line) and then sends nothing, like a quiet
    log. Records when each connection ends."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.accepted = 0
        self.ended: list[float] = []
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                data = conn.recv(65536)
                if not data:
                    break
                head += data
            if self.mode == "headers":
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n5\r\ntick\n\r\n"
                )
            while conn.recv(65536):  # hold the connection until the proxy lets go
                pass
            self.ended.append(time.monotonic())

    def close(self) -> None:
        self._stop.set()
        self.listener.close()
