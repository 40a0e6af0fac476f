"""A stand-in Ray head dashboard: a real HTTP server on loopback with scripted
replies per request URI, for code that talks to the dashboard's HTTP API
(statuses, headers and timing exactly as a client sees them)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

SAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "ray-samples" / "api"

#: A gated answer is sent after this long even if the test never opens the gate.
GATE_LIMIT = 120.0


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    delay: float = 0.0
    #: Held until the test sets it: an answer in flight for as long as the test needs,
    #: without guessing a delay.
    gate: threading.Event | None = None


@dataclass
class FakeDashboard:
    """Scripted replies per request URI (path + query); the last reply repeats."""

    routes: dict[str, list[Reply]] = field(default_factory=dict)
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None

    def script(self, uri: str, *replies: Reply) -> None:
        with self.lock:
            self.routes[uri] = list(replies)

    def reply(self, uri: str, body: bytes | str | object, status: int = 200, delay: float = 0.0) -> None:
        if isinstance(body, str):
            data = body.encode()
        elif isinstance(body, bytes):
            data = body
        else:
            data = json.dumps(body).encode()
        self.script(uri, Reply(status, data, delay=delay))

    def sample(self, uri: str, name: str, status: int = 200) -> bytes:
        data = (SAMPLES / name).read_bytes()
        self.reply(uri, data, status)
        return data

    def hits(self, uri: str) -> int:
        with self.lock:
            return sum(1 for path, _ in self.requests if path == uri)

    def headers_of(self, uri: str) -> list[dict[str, str]]:
        with self.lock:
            return [headers for path, headers in self.requests if path == uri]

    def _next(self, uri: str) -> Reply:
        with self.lock:
            self.requests.append((uri, {}))
            replies = self.routes.get(uri)
            if not replies:
                return Reply(404, b"not found", "text/plain")
            return replies.pop(0) if len(replies) > 1 else replies[0]

    @property
    def url(self) -> str:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> None:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                reply = fake._next(self.path)
                with fake.lock:
                    fake.requests[-1] = (self.path, {k.lower(): v for k, v in self.headers.items()})
                if reply.delay:
                    time.sleep(reply.delay)
                if reply.gate is not None:
                    reply.gate.wait(GATE_LIMIT)
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", reply.content_type)
                    self.send_header("Content-Length", str(len(reply.body)))
                    self.end_headers()
                    self.wfile.write(reply.body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    @classmethod
    @contextmanager
    def running(cls) -> Iterator[FakeDashboard]:
        """A started dashboard, stopped on exit (what each test module's fixture yields)."""
        fake = cls()
        fake.start()
        try:
            yield fake
        finally:
            fake.stop()
