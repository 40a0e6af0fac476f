"""The ACR token exchange against a real HTTP endpoint on loopback (the registry's /oauth2/exchange stand-in)."""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from ray_history_pulumi import acr_token
from tests.unit.infra.conftest import REAL_EXCHANGE


class _Registry(BaseHTTPRequestHandler):
    answers: ClassVar[list[tuple[int, bytes]]] = []
    seen: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        form = urllib.parse.parse_qs(self.rfile.read(length).decode())
        self.seen.append({"path": self.path, "form": {k: v[0] for k, v in form.items()}})
        status, body = self.answers.pop(0)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def registry() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Registry)
    _Registry.answers, _Registry.seen = [], []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_exchange_sends_the_arm_token_and_returns_the_refresh_token(registry: str) -> None:
    _Registry.answers = [(200, json.dumps({"refresh_token": "acr-refresh"}).encode())]
    token = REAL_EXCHANGE(registry, "tenant-1", "arm-token", scheme="http")
    assert token == "acr-refresh"
    assert _Registry.seen == [
        {
            "path": "/oauth2/exchange",
            "form": {
                "grant_type": "access_token",
                "service": registry,
                "tenant": "tenant-1",
                "access_token": "arm-token",
            },
        }
    ]


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (401, b'{"errors": []}', "refused the token exchange (HTTP 401)"),
        (200, b'{"access_token": "x"}', "answered without a refresh_token"),
        (200, b"not json", "token exchange failed"),
    ],
)
def test_failures_name_the_registry_never_the_token(registry: str, status: int, body: bytes, message: str) -> None:
    _Registry.answers = [(status, body)]
    with pytest.raises(acr_token.AcrTokenError) as error:
        REAL_EXCHANGE(registry, "tenant-1", "arm-secret-token", scheme="http")
    assert message in str(error.value)
    assert registry in str(error.value)
    assert "arm-secret-token" not in str(error.value)
