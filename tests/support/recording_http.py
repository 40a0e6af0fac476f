"""A stand-in HTTP server that records every request it receives and answers from a
table: used where the real service cannot run on this machine (Grafana is not
installable here) and to see exactly what the history server sends upstream.

Answers: ``routes`` maps a path (without query) to (status, headers, body); anything
else gets 200 with a small HTML page naming the request it received (so a screenshot
of a framed page shows it), a ``Set-Cookie`` and ``X-Frame-Options: deny``, as
Grafana's pages carry.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from html import escape
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Recorded:
    method: str
    target: str  # path and query as received
    headers: dict[str, str]
    body: bytes

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]


@dataclass
class RecordingServer:
    url: str
    routes: dict[str, tuple[int, dict[str, str], bytes]] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)

    def last(self, path_prefix: str) -> Recorded:
        found = [r for r in self.requests if r.path.startswith(path_prefix)]
        assert found, (path_prefix, [r.target for r in self.requests])
        return found[-1]


DEFAULT_PAGE = b"<html><body><h3>stand-in page</h3><p>received: %s</p></body></html>"


@contextmanager
def recording_server() -> Iterator[RecordingServer]:
    state = RecordingServer(url="")

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            state.requests.append(
                Recorded(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            )
            status, headers, payload = state.routes.get(
                self.path.split("?", 1)[0],
                (
                    200,
                    {
                        "Content-Type": "text/html",
                        "Set-Cookie": "grafana_session=abc; Path=/",
                        "X-Frame-Options": "deny",
                    },
                    DEFAULT_PAGE % escape(f"{self.command} {self.path}").encode(),
                ),
            )
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)

        do_GET = do_POST = do_HEAD = _answer  # noqa: N815 - http.server's names

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
