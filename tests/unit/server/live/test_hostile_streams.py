"""Live log streams against a hostile or hung head dashboard (issue #14, item 5):
an upstream socket that never answers, one that sends headers and then nothing,
too many streams, clients that leave. Our app under a real threaded server."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import requests

from runtime.server.config import LiveClusterURL
from runtime.server.live.discovery import StaticLiveDirectory
from tests.unit.server.live.servers import HangingUpstream, live_cookies, make_app, serve, server_config

pytestmark = pytest.mark.hostile

STREAM = "/api/v0/logs/stream?node_id=abc&filename=raylet.out&follow=true"


@contextmanager
def proxy_to(tmp_path: Path, mode: str, **config: Any) -> Iterator[tuple[str, HangingUpstream, Any]]:
    upstream = HangingUpstream(mode)
    directory = StaticLiveDirectory([LiveClusterURL("default", "live-demo", upstream.url)])
    app = make_app(server_config(tmp_path, **config), directory)
    try:
        with serve(app) as url:
            yield url, upstream, app
    finally:
        upstream.close()


def _open_stream(url: str) -> socket.socket:
    """A raw client: the request, then the answer until the stream's first line."""
    port = int(url.rsplit(":", 1)[1])
    client = socket.create_connection(("127.0.0.1", port), timeout=10)
    cookie = "; ".join(f"{k}={v}" for k, v in live_cookies().items())
    client.sendall(f"GET {STREAM} HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: {cookie}\r\n\r\n".encode())
    head = b""
    while b"tick" not in head:
        data = client.recv(4096)
        assert data, head
        head += data
    assert head.startswith(b"HTTP/1.1 200"), head
    return client


def _wait(condition: Any, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return bool(condition())


def test_a_stream_waits_for_headers_no_longer_than_the_proxy_timeout(tmp_path: Path) -> None:
    with proxy_to(tmp_path, "silent", proxy_timeout=0.5) as (url, _, _):
        started = time.monotonic()
        answer = requests.get(f"{url}{STREAM}", cookies=live_cookies(), timeout=10)
        took = time.monotonic() - started
    assert answer.status_code == 504 and "within 0.5 s" in answer.json()["msg"]
    assert took < 3.0


def test_streams_over_the_cap_get_503_json(tmp_path: Path) -> None:
    with proxy_to(tmp_path, "headers", max_live_streams=2) as (url, upstream, app):
        first, second = _open_stream(url), _open_stream(url)
        over = requests.get(f"{url}{STREAM}", cookies=live_cookies(), timeout=10)
        assert over.status_code == 503 and over.headers["Retry-After"] == "5"
        assert "too many live log streams" in over.json()["msg"] and "--max-live-streams" in over.json()["msg"]
        assert upstream.accepted == 2  # the refused one never reached the cluster
        # Other proxied requests are not streams: they are not refused.
        first.close()
        slots, _ = app.extensions["historyserver.proxy.streams"]
        assert _wait(lambda: slots.in_use == 1), "a stream whose client left must give its slot back"
        third = _open_stream(url)
        second.close()
        third.close()
        assert _wait(lambda: slots.in_use == 0)


def test_a_client_that_leaves_frees_the_stream_and_the_upstream(tmp_path: Path) -> None:
    with proxy_to(tmp_path, "headers") as (url, upstream, app):
        clients = [_open_stream(url) for _ in range(3)]
        time.sleep(0.2)
        assert upstream.ended == []  # a quiet stream is kept open (no read timeout)...
        left = time.monotonic()
        for client in clients:
            client.close()
        # ...until its client hangs up: then the upstream connection is closed at once.
        assert _wait(lambda: len(upstream.ended) == 3), upstream.ended
        assert max(upstream.ended) - left < 3.0
        slots, watcher = app.extensions["historyserver.proxy.streams"]
        assert _wait(lambda: slots.in_use == 0 and len(watcher) == 0)
