"""The live proxy against a real upstream HTTP server, through our app under a real
(threaded werkzeug) server: read-only methods, bodies, streaming, timeouts, header
hygiene, failures."""

from __future__ import annotations

import gzip
import http.client
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import requests
from flask import Flask

from runtime.server.config import LiveClusterURL
from runtime.server.context import app_services
from runtime.server.live.discovery import (
    LiveCluster,
    LiveDirectory,
    LiveDiscoveryError,
    LiveListing,
    StaticLiveDirectory,
)
from tests.integration.emulators.base import free_port
from tests.unit.server.live.servers import (
    BIG_SIZE,
    GZIP_BODY,
    Upstream,
    live_cookies,
    make_app,
    serve,
    server_config,
    upstream_server,
)


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with upstream_server() as up:
        yield up


@pytest.fixture
def proxy(tmp_path: Path, upstream: Upstream) -> Iterator[tuple[str, requests.Session]]:
    """Our app proxying ``default/live-demo`` to the upstream; a client holding the
    live selection cookies (plus one cookie of its own)."""
    directory = StaticLiveDirectory([LiveClusterURL("default", "live-demo", upstream.url)])
    app = make_app(server_config(tmp_path, proxy_timeout=0.3), directory)
    with serve(app) as url:
        client = requests.Session()
        for name, value in live_cookies().items():
            client.cookies.set(name, value)
        client.cookies.set("user_cookie", "keep-me")
        client.app = app  # type: ignore[attr-defined]
        yield url, client


def _proxied(app: Flask, outcome: str) -> float:
    metrics = app_services(app).metrics
    value = metrics.registry.get_sample_value("historyserver_live_proxy_requests_total", {"outcome": outcome})
    return float(value or 0.0)


def test_get_keeps_path_and_query_exactly(proxy: tuple[str, requests.Session], upstream: Upstream) -> None:
    url, client = proxy
    query = "filter_keys=job_id&filter_predicates=%3D&filter_values=02000000&x=a+b&y=%2F"
    answer = client.get(f"{url}/api/v0/tasks/summarize?{query}", timeout=10)
    assert answer.status_code == 200
    assert answer.json()["path"] == f"/api/v0/tasks/summarize?{query}"
    seen = upstream.last()
    assert seen.method == "GET"
    assert seen.header("Host") == upstream.url.removeprefix("http://")
    # No cookie reaches the head: the selection cookies mean nothing there, and any
    # other (a login, a cookie of another app on this host) is not the head's business.
    assert seen.header("Cookie") is None
    assert seen.header("X-Forwarded-For") == "127.0.0.1"
    # The selection cookies are refreshed on the way back (sliding expiry).
    assert "session_name=live" in answer.headers["Set-Cookie"]


def test_writes_are_refused_and_never_sent(proxy: tuple[str, requests.Session], upstream: Upstream) -> None:
    """The live proxy is read-only (test_read_only.py has the access-control side)."""
    url, client = proxy
    answer = client.post(f"{url}/api/jobs/raysubmit_abc/stop", json={"reason": "test"}, timeout=10)
    assert answer.status_code == 403
    assert "proxies live clusters read-only: POST /api/jobs/raysubmit_abc/stop" in answer.json()["msg"]
    assert client.delete(f"{url}/api/jobs/raysubmit_abc", timeout=10).status_code == 403
    assert client.patch(f"{url}/api/thing", data=b"x", timeout=10).status_code == 403
    assert upstream.seen == []
    assert _proxied(client.app, "read_only") == 3  # type: ignore[attr-defined]


def test_large_put_is_refused_and_the_connection_stays_usable(
    proxy: tuple[str, requests.Session], upstream: Upstream
) -> None:
    url, client = proxy
    payload = bytes(range(256)) * 20_000  # 5 MB, like a runtime-env package upload
    answer = client.put(f"{url}/api/packages/gcs/_ray_pkg_x.zip", data=payload, timeout=30)
    assert answer.status_code == 403
    assert client.get(f"{url}/api/version", timeout=10).status_code == 200
    assert [s.method for s in upstream.seen] == ["GET"]


def test_a_read_with_a_body_is_sent_with_its_length(proxy: tuple[str, requests.Session], upstream: Upstream) -> None:
    url, client = proxy
    payload = bytes(range(256)) * 20_000
    answer = client.request("GET", f"{url}/api/v0/tasks", data=payload, timeout=30)
    assert answer.status_code == 200
    seen = upstream.last()
    assert seen.body == payload
    assert seen.header("Content-Length") == str(len(payload))
    assert seen.header("Transfer-Encoding") is None


def test_chunked_request_body_is_forwarded(proxy: tuple[str, requests.Session], upstream: Upstream) -> None:
    url, client = proxy
    answer = client.request("GET", f"{url}/api/v0/tasks", data=iter([b'{"limit":', b" 1}"]), timeout=10)
    assert answer.status_code == 200
    assert json.loads(upstream.last().body) == {"limit": 1}


def test_head_has_headers_but_no_body(proxy: tuple[str, requests.Session], upstream: Upstream) -> None:
    url, client = proxy
    answer = client.head(f"{url}/api/v0/platform_events", timeout=10)
    assert answer.status_code == 200 and answer.content == b""
    assert upstream.last().method == "HEAD"


def test_large_body_streams_through(proxy: tuple[str, requests.Session]) -> None:
    url, client = proxy
    with client.get(f"{url}/big", stream=True, timeout=30) as answer:
        assert answer.headers["Content-Length"] == str(BIG_SIZE)
        total = 0
        block = bytes(range(256)) * 4096
        for chunk in answer.iter_content(1024 * 1024):
            assert chunk == block[: len(chunk)]
            total += len(chunk)
    assert total == BIG_SIZE


def test_slow_chunked_stream_is_not_buffered(tmp_path: Path, upstream: Upstream) -> None:
    upstream.gap = 0.5
    directory = StaticLiveDirectory([LiveClusterURL("default", "live-demo", upstream.url)])
    with serve(make_app(server_config(tmp_path, proxy_timeout=5), directory)) as url:
        started = time.monotonic()
        arrivals = []
        with requests.get(f"{url}/slow", cookies=live_cookies(), stream=True, timeout=10) as answer:
            for line in answer.iter_lines():
                arrivals.append((line, time.monotonic() - started))
    assert [line for line, _ in arrivals] == [b"tick 0", b"tick 1", b"tick 2"]
    assert arrivals[0][1] < 0.4, "the first chunk must arrive before the upstream has finished"
    assert arrivals[2][1] >= 0.9


def test_log_stream_has_no_read_timeout(proxy: tuple[str, requests.Session], upstream: Upstream) -> None:
    """Gaps longer than --proxy-timeout (0.3 s here) are fine for log streams..."""
    url, client = proxy
    upstream.gap = 0.6
    answer = client.get(f"{url}/api/v0/logs/stream?node_id=abc&filename=raylet.out", timeout=10)
    assert answer.status_code == 200
    assert answer.text == "tick 0\ntick 1\ntick 2\n"
    assert answer.headers["X-Accel-Buffering"] == "no"


def test_other_streams_are_cut_at_the_timeout(proxy: tuple[str, requests.Session], upstream: Upstream) -> None:
    """...but not for anything else: the body stops at the first gap."""
    url, client = proxy
    upstream.gap = 0.8
    with client.get(f"{url}/slow", stream=True, timeout=10) as answer:
        assert answer.status_code == 200
        received = b""
        with pytest.raises(requests.exceptions.ChunkedEncodingError):
            for chunk in answer.iter_content(None):
                received += chunk
    assert received == b"tick 0\n"
    assert _proxied(client.app, "stream_error") == 1  # type: ignore[attr-defined]


def test_slow_upstream_headers_give_504(proxy: tuple[str, requests.Session], upstream: Upstream) -> None:
    url, client = proxy
    upstream.gap = 1.0
    answer = client.get(f"{url}/slow-headers", timeout=10)
    assert answer.status_code == 504
    assert "default/live-demo" in answer.json()["msg"]


def test_stalled_body_with_length_is_truncated(proxy: tuple[str, requests.Session], upstream: Upstream) -> None:
    url, client = proxy
    upstream.gap = 0.8
    with pytest.raises(requests.exceptions.RequestException):
        client.get(f"{url}/stall", timeout=10).content  # noqa: B018 - reading is the point


def test_upstream_down_is_502_naming_cluster_and_url(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    directory = StaticLiveDirectory([LiveClusterURL("default", "live-demo", dead)])
    app = make_app(server_config(tmp_path), directory)
    with serve(app) as url:
        answer = requests.get(f"{url}/api/jobs/", cookies=live_cookies(), timeout=10)
    assert answer.status_code == 502
    body = answer.json()
    assert body["result"] is False
    assert "default/live-demo" in body["msg"] and f"{dead}/api/jobs/" in body["msg"]
    assert _proxied(app, "upstream_error") == 1


def test_hop_by_hop_headers_dropped_both_ways(proxy: tuple[str, requests.Session], upstream: Upstream) -> None:
    url, client = proxy
    answer = client.get(
        f"{url}/hop",
        headers={
            "Connection": "keep-alive, X-Client-Hop",
            "X-Client-Hop": "secret",
            "Proxy-Authorization": "Basic Zm9v",
            "TE": "trailers",
            "Authorization": "Bearer ray-token",
            "X-Custom-Client": "kept",
        },
        timeout=10,
    )
    seen = upstream.last()
    for name in ("X-Client-Hop", "Proxy-Authorization", "TE"):
        assert seen.header(name) is None, name
    # The caller's credentials are the history server's, never the cluster's (#16):
    # token-auth clusters get theirs from the Secret (test_token_auth.py).
    assert seen.header("Authorization") is None
    # Request and response headers are allow-lists: a header neither side needs stays behind.
    assert seen.header("X-Custom-Client") is None
    assert "X-Hop-Header" not in answer.headers and "Keep-Alive" not in answer.headers
    assert "X-Custom" not in answer.headers
    assert answer.headers["Content-Type"] == "text/plain"
    assert len(answer.raw.headers.getlist("Date")) == 1  # ours, not ours + upstream's
    raw_cookies = answer.raw.headers.getlist("Set-Cookie")
    assert not [c for c in raw_cookies if c.startswith(("a=", "b="))], raw_cookies


def test_a_cookie_one_caller_got_never_rides_on_anothers_requests(
    proxy: tuple[str, requests.Session], upstream: Upstream
) -> None:
    """The pooled upstream session is shared by every caller of the worker: an upstream's
    ``Set-Cookie`` goes to the browser that asked, and is never kept for the next one."""
    url, client = proxy
    assert client.get(f"{url}/hop", timeout=10).status_code == 200  # the upstream sets a=1, b=2
    stranger = requests.Session()
    for name, value in live_cookies().items():
        stranger.cookies.set(name, value)
    assert stranger.get(f"{url}/api/v0/nodes", timeout=10).status_code == 200
    assert upstream.last().header("Cookie") is None


def test_gzip_passes_through_untouched(proxy: tuple[str, requests.Session], upstream: Upstream) -> None:
    url, client = proxy
    with client.get(f"{url}/gzip", headers={"Accept-Encoding": "gzip"}, stream=True, timeout=10) as answer:
        raw = answer.raw.read(decode_content=False)
    assert answer.headers["Content-Encoding"] == "gzip"
    assert answer.headers["Content-Length"] == str(len(GZIP_BODY))
    assert raw == GZIP_BODY
    assert gzip.decompress(raw).startswith(b'{"compressed": true}')
    assert upstream.last().header("Accept-Encoding") == "gzip"


def test_no_accept_encoding_means_identity(proxy: tuple[str, requests.Session], upstream: Upstream) -> None:
    url, _client = proxy
    conn = http.client.HTTPConnection(url.removeprefix("http://"), timeout=10)
    conn.request("GET", "/api/x", headers={"Cookie": "cluster_name=live-demo; cluster_namespace=default; "
                                            "session_name=live"})  # fmt: skip
    assert conn.getresponse().status == 200
    assert upstream.last().header("Accept-Encoding") == "identity"


def test_redirect_location_is_rewritten(proxy: tuple[str, requests.Session]) -> None:
    url, client = proxy
    answer = client.get(f"{url}/redirect", allow_redirects=False, timeout=10)
    assert answer.status_code == 302
    assert answer.headers["Location"] == "/target?x=1"


@pytest.mark.parametrize("status", [404, 500, 503])
def test_upstream_status_is_kept(proxy: tuple[str, requests.Session], status: int) -> None:
    url, client = proxy
    answer = client.get(f"{url}/status/{status}", timeout=10)
    assert answer.status_code == status
    assert answer.json() == {"from": "upstream"}


class _Failing(LiveDirectory):
    def __init__(self, result: LiveCluster | Exception | None) -> None:
        self.result = result

    def list_clusters(self) -> LiveListing:
        return LiveListing([])

    def get(self, namespace: str, name: str) -> LiveCluster | None:
        if isinstance(self.result, Exception):
            raise self.result
        return self.result

    def find_for_owner(self, namespace: str, kind: str, name: str) -> LiveCluster | None:
        return self.get(namespace, name)


@pytest.mark.parametrize(
    ("result", "status", "text", "outcome"),
    [
        (None, 404, "no longer exists", "cluster_gone"),
        (LiveDiscoveryError("API down"), 503, "API down", "discovery_error"),
        (
            LiveCluster("default", "live-demo", "raycluster", "", datetime.now(UTC), ""),
            503,
            "head service not ready",
            "not_ready",
        ),
    ],
)
def test_discovery_outcomes(
    tmp_path: Path, result: LiveCluster | Exception | None, status: int, text: str, outcome: str
) -> None:
    app = make_app(server_config(tmp_path), _Failing(result))
    client = app.test_client()
    for name, value in live_cookies().items():
        client.set_cookie(name, value)
    answer = client.get("/api/jobs/")
    assert answer.status_code == status
    assert text in answer.get_json()["msg"]
    assert _proxied(app, outcome) == 1


def test_session_route_views_proxy_live_selections(tmp_path: Path, upstream: Upstream) -> None:
    """The stored-session views (context.session_route) hand live selections here too."""
    from flask import Response

    from runtime.server.context import SessionContext, session_route

    directory = StaticLiveDirectory([LiveClusterURL("default", "live-demo", upstream.url)])
    app = make_app(server_config(tmp_path), directory)

    @app.get("/api/jobs/")
    @session_route
    def jobs(ctx: SessionContext) -> Response:
        raise AssertionError("a live selection must never reach a stored-session view")

    with serve(app) as url:
        answer = requests.get(f"{url}/api/jobs/?limit=5", cookies=live_cookies(), timeout=10)
    assert answer.status_code == 200
    assert upstream.last().path == "/api/jobs/?limit=5"
