"""The health probes, the Grafana proxy and the Prometheus query API over HTTP, against
a stand-in HTTP server that records what it receives (Grafana cannot be installed on
this machine; the real Prometheus is in tests/integration/server/test_metrics_dead_session.py).

Session A (namespace ``default``) is stored; with no live cluster listed it has ended.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import orjson
import pytest
from flask import Flask
from flask.testing import FlaskClient

from runtime.server.app import create_app
from runtime.server.auth import build_access_control, parse_auth
from runtime.server.config import MetricsConfig
from runtime.server.selection import COOKIE_CLUSTER, COOKIE_NAMESPACE, COOKIE_SESSION, LIVE
from runtime.storage.layout import KeyLayout
from tests.support.app_world import (
    DEMO,
    JOB_CLUSTER,
    JOB_SESSION,
    FakeLive,
    live_cluster,
    server_config,
    stored_session_a,
)
from tests.support.k8s_auth_stub import AuthApiStub, auth_api_stub
from tests.support.recording_http import RecordingServer, recording_server
from tests.support.sample_session import SESSION_A, StoredSample

TOKEN = "grafana-service-account-secret"
PAGE = "/grafana/d-solo/rayDefaultDashboard/default-dashboard"
#: What the Overview's node-count card appends to grafanaHost (Ray 2.60's NodeCountCard.tsx).
RAY_QUERY = (
    "orgId=1&theme=light&panelId=24&var-datasource=Prometheus&refresh&timezone=UTC&from=now-1h&to=now"
    f"&var-SessionName={SESSION_A}"
)


@dataclasses.dataclass
class World:
    app: Flask
    upstream: RecordingServer
    live: FakeLive
    sample: StoredSample
    stub: AuthApiStub | None = None

    def client(self, *, select: str | None = SESSION_A, token: str | None = None) -> FlaskClient:
        client = self.app.test_client()
        if select is not None:
            client.set_cookie(COOKIE_NAMESPACE, DEMO.namespace)
            client.set_cookie(COOKIE_CLUSTER, DEMO.name)
            client.set_cookie(COOKIE_SESSION, select)
        if token is not None:
            client.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {token}"
        return client


def _world(tmp_path: Path, upstream: RecordingServer, *, guarded: bool = False) -> Iterator[World]:
    upstream.routes["/grafana/api/health"] = (200, {"Content-Type": "application/json"}, b'{"database":"ok"}')
    upstream.routes["/api/v1/query"] = (200, {"Content-Type": "application/json"}, b'{"status":"success","data":{}}')
    config = server_config(tmp_path, sessions_ttl_seconds="0")
    metrics = MetricsConfig(prometheus_url=upstream.url, grafana_url=upstream.url, grafana_token=TOKEN)
    config = dataclasses.replace(config, metrics=metrics)
    store, sample = stored_session_a(config)
    store.put_bytes(KeyLayout("").marker_key(JOB_CLUSTER, JOB_SESSION), b"")
    live = FakeLive()
    if not guarded:
        yield World(create_app(config, store=store, live=live), upstream, live, sample)
        return
    with auth_api_stub() as stub:
        stub.tokens = {
            "bob-token": ("bob@example.com", ("default-devs",)),
            "carol-token": ("carol@example.com", ("default-devs",)),
        }
        stub.access = {("default-devs", "default")}
        control = build_access_control(parse_auth("kubernetes", "kubernetes"), stub.api_client)
        yield World(create_app(config, store=store, live=live, access=control), upstream, live, sample, stub)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with recording_server() as upstream:
        yield from _world(tmp_path, upstream)


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[World]:
    with recording_server() as upstream:
        yield from _world(tmp_path, upstream, guarded=True)


def _json(answer: Any, status: int = 200) -> Any:
    assert answer.status_code == status, (status, answer.status_code, answer.get_data(as_text=True)[:300])
    return orjson.loads(answer.get_data())


def _session_window(client: FlaskClient) -> tuple[int, int]:
    """First node start and last node end as /nodes shows the ended session (independent of the proxy)."""
    nodes = _json(client.get("/nodes?view=summary"))["data"]["summary"]
    starts = [int(n["raylet"]["startTimeMs"]) for n in nodes if int(n["raylet"]["startTimeMs"])]
    ends = [int(n["raylet"]["endTimeMs"]) for n in nodes]
    return min(starts), max(ends)


# --------------------------------------------------------------------- probes
def test_health_probes_answer_as_rays_metrics_head_when_configured(world: World) -> None:
    client = world.client()
    grafana = _json(client.get("/api/grafana_health"))
    assert grafana == {
        "result": True,
        "msg": "Grafana running",
        "data": {
            "grafanaHost": "/grafana",
            "grafanaOrgId": "1",
            "sessionName": SESSION_A,
            "dashboardUids": {
                "default": "rayDefaultDashboard",
                "serve": "rayServeDashboard",
                "serveDeployment": "rayServeDeploymentDashboard",
                "serveLlm": "rayServeLlmDashboard",
                "serveLlmSglang": "rayServeLlmSglangDashboard",
                "data": "rayDataDashboard",
                "dataLlm": "rayDataLlmDashboard",
                "train": "rayTrainDashboard",
            },
            "dashboardDatasource": "Prometheus",
            "grafanaClusterFilter": None,
        },
    }
    assert world.upstream.last("/grafana/api/health").headers["authorization"] == f"Bearer {TOKEN}"
    assert _json(client.get("/api/prometheus_health")) == {"result": True, "msg": "prometheus running", "data": {}}
    assert world.upstream.last("/api/v1/query").target == "/api/v1/query?query=vector(1)"


def test_a_live_selection_gets_its_newest_stored_session(world: World) -> None:
    world.live.clusters.append(live_cluster())
    body = _json(world.client(select=LIVE).get("/api/grafana_health"))
    assert body["result"] is True and body["data"]["sessionName"] == SESSION_A


def test_a_session_url_gets_its_own_session_without_cookies(world: World) -> None:
    client = world.client(select=None)
    body = _json(client.get(f"/sessions/{DEMO.namespace}/{DEMO.name}/{SESSION_A}/api/grafana_health"))
    assert body["data"]["sessionName"] == SESSION_A and body["data"]["grafanaHost"] == "/grafana"


@pytest.mark.parametrize(
    ("route", "status", "body", "msg"),
    [
        ("/grafana/api/health", 200, b'{"database":"failing"}', "Grafana healthcheck failed. Database not ok."),
        ("/grafana/api/health", 503, b"{}", "Grafana healthcheck failed"),
        ("/api/v1/query", 200, b'{"status":"error"}', "prometheus healthcheck failed."),
        ("/api/v1/query", 500, b"oops", "prometheus healthcheck failed."),
    ],
)
def test_an_unhealthy_service_gets_rays_failure(world: World, route: str, status: int, body: bytes, msg: str) -> None:
    world.upstream.routes[route] = (status, {"Content-Type": "application/json"}, body)
    probe = "/api/grafana_health" if "grafana" in route else "/api/prometheus_health"
    answer = _json(world.client().get(probe), 500)
    assert answer["result"] is False and answer["msg"] == msg


def test_an_unreachable_service_is_a_failure_not_a_hang(world: World) -> None:
    app = world.app
    svc = app.extensions["historyserver"]
    svc.config = dataclasses.replace(
        svc.config, metrics=MetricsConfig(prometheus_url="http://127.0.0.1:9", grafana_url="http://127.0.0.1:9")
    )
    client = world.client()
    assert _json(client.get("/api/grafana_health"), 500)["data"] == {"exception": "ConnectionError"}
    assert _json(client.get("/api/prometheus_health"), 500)["data"] == {"reason": "ConnectionError"}


# ---------------------------------------------------------------- Grafana pages
def test_a_dead_sessions_page_is_redirected_to_its_absolute_window(world: World) -> None:
    client = world.client()
    first, last = _session_window(client)
    answer = client.get(f"{PAGE}?{RAY_QUERY}")
    assert answer.status_code == 302
    location = urlsplit(answer.headers["Location"])
    assert location.path == PAGE
    got = dict(parse_qsl(location.query, keep_blank_values=True))
    assert (int(got["from"]), int(got["to"])) == (first - 30_000, last + 30_000)
    assert got["var-SessionName"] == SESSION_A and "refresh" not in got
    assert not world.upstream.requests  # nothing was asked of Grafana yet

    followed = client.get(answer.headers["Location"])
    assert followed.status_code == 200 and b"stand-in page" in followed.data
    sent = world.upstream.last(PAGE)
    assert sent.target == f"{PAGE}?{location.query}"


def test_headers_credentials_and_cookies(world: World) -> None:
    client = world.client()
    client.set_cookie("grafana_session", "from-the-browser")
    location = client.get(f"{PAGE}?{RAY_QUERY}").headers["Location"]
    answer = client.get(location, headers={"Authorization": "Bearer the-callers-own", "X-Grafana-Org-Id": "1"})
    sent = world.upstream.last(PAGE).headers
    assert sent["authorization"] == f"Bearer {TOKEN}"  # ours, never the caller's
    assert "cookie" not in sent and sent["x-grafana-org-id"] == "1"
    assert "Set-Cookie" not in answer.headers
    assert answer.headers["X-Frame-Options"] == "SAMEORIGIN"
    assert TOKEN not in answer.get_data(as_text=True)
    # The stand-in set a cookie: the pooled upstream session must not keep it for the next caller.
    world.client().get(location)
    assert all("cookie" not in r.headers for r in world.upstream.requests)


def test_a_running_sessions_page_passes_through_unchanged(world: World) -> None:
    world.live.clusters.append(live_cluster())
    answer = world.client().get(f"{PAGE}?{RAY_QUERY}")
    assert answer.status_code == 200
    assert world.upstream.last(PAGE).target == f"{PAGE}?{RAY_QUERY}"


@pytest.mark.parametrize(
    ("query", "status", "text"),
    [
        ("orgId=1&from=now-1h&to=now", 400, "needs var-SessionName"),
        ("var-SessionName=session_2020-01-01_00-00-00_000000_1", 404, "no stored session"),
        ("var-SessionName=../../etc", 400, "SessionName"),
    ],
)
def test_page_errors(world: World, query: str, status: int, text: str) -> None:
    assert text in _json(world.client().get(f"{PAGE}?{query}"), status)["msg"]
    assert not world.upstream.requests


def test_static_assets_pass_and_other_paths_are_refused(world: World) -> None:
    client = world.client(select=None)
    assert client.get("/grafana/public/build/app.js").status_code == 200
    assert client.get("/grafana/api/dashboards/uid/rayDefaultDashboard").status_code == 200
    for path in (
        "/grafana/api/datasources/proxy/1/api/v1/series",
        "/grafana/api/datasources/uid/x/resources/api/v1/query_range",
        "/grafana/admin/users",
    ):
        assert "is not served through the history server" in _json(client.get(path), 403)["msg"]
    assert [r.path for r in world.upstream.requests] == [
        "/grafana/public/build/app.js",
        "/grafana/api/dashboards/uid/rayDefaultDashboard",
    ]


@pytest.mark.parametrize(
    "path",
    [
        "/grafana/public/../api/datasources/proxy/uid/prom/api/v1/query",
        "/grafana/public/%2e%2e/api/datasources/proxy/uid/prom/api/v1/query",
        "/grafana/public/./build/../../api/users",
        "/grafana/public//api/users",
        "/grafana/public/build\\..\\..\\api/users",
    ],
)
def test_dot_segments_never_reach_grafana(guarded: World, path: str) -> None:
    """``public/..`` passed the static allow-list as written and reached Grafana's
    datasource proxy resolved: every session's series, no session check."""
    bob = guarded.client(select=None, token="bob-token")
    answer = bob.get(path, query_string={"query": "ray_node_mem_used"})
    assert "is not served" in _json(answer, 400)["msg"]
    assert not [r for r in guarded.upstream.requests if r.path != "/grafana/api/health"]


LOOKUP = "/grafana/api/datasources/uid/prom/resources/api/v1/label/ray_io_cluster/values"


def test_label_lookups_are_pinned_to_the_framing_pages_session(world: World) -> None:
    client = world.client(select=None)
    page = f"http://localhost{PAGE}?from=1&to=2&var-SessionName={SESSION_A}"
    answer = client.get(
        LOOKUP,
        query_string={"match[]": "ray_node_network_receive_speed{}", "start": "1", "end": "2"},
        headers={"Referer": page},
    )
    assert answer.status_code == 200
    sent = parse_qsl(urlsplit(world.upstream.last(LOOKUP).target).query)
    assert sent == [
        ("start", "1"),
        ("end", "2"),
        ("match[]", f'ray_node_network_receive_speed{{SessionName="{SESSION_A}"}}'),
    ]
    posted = client.post(LOOKUP, data={"start": "1"}, headers={"Referer": page})
    assert posted.status_code == 200
    assert parse_qsl(world.upstream.last(LOOKUP).body.decode()) == [
        ("start", "1"),
        ("match[]", f'{{SessionName="{SESSION_A}"}}'),
    ]
    assert "its Referer" in _json(client.get(LOOKUP), 403)["msg"]
    other = f"http://localhost{PAGE}?var-SessionName=session_2020-01-01_00-00-00_000000_1"
    assert _json(client.get(LOOKUP, headers={"Referer": other}), 404)
    refused = client.get(LOOKUP, query_string={"match[]": "a or b"}, headers={"Referer": page})
    assert "one series selector" in _json(refused, 403)["msg"]


def _ds_query(*exprs: str) -> bytes:
    return orjson.dumps(
        {
            "queries": [{"refId": "A", "datasource": {"type": "prometheus", "uid": "p"}, "expr": e} for e in exprs],
            "from": "1",
            "to": "2",
        }
    )


def test_panel_data_queries_must_be_pinned_to_a_readable_session(world: World) -> None:
    client = world.client()
    body = _ds_query(f'sum(ray_node_mem_used{{SessionName=~"{SESSION_A}"}}) by (instance)')
    assert client.post("/grafana/api/ds/query", data=body, content_type="application/json").status_code == 200
    assert world.upstream.last("/grafana/api/ds/query").body == body
    refused = client.post("/grafana/api/ds/query", data=_ds_query("ray_node_mem_used"), content_type="application/json")
    assert "has no SessionName" in _json(refused, 403)["msg"]
    unknown = _ds_query('x{SessionName="session_2020-01-01_00-00-00_000000_1"}')
    assert _json(client.post("/grafana/api/ds/query", data=unknown, content_type="application/json"), 404)
    assert _json(client.post("/grafana/api/ds/query", data=b"[1]", content_type="application/json"), 400)
    assert len(world.upstream.requests) == 1


def test_prometheus_query_range_through_the_server(world: World) -> None:
    client = world.client(select=None)
    query = f'ray_node_mem_used{{SessionName="{SESSION_A}"}}'
    answer = client.get(
        "/prometheus/api/v1/query_range",
        query_string={"query": query, "start": "1", "end": "2", "step": "15", "x": "y"},
    )
    assert answer.status_code == 200
    sent = world.upstream.last("/api/v1/query_range")
    assert dict(parse_qsl(urlsplit(sent.target).query)) == {"query": query, "start": "1", "end": "2", "step": "15"}
    assert "authorization" not in sent.headers
    assert "has no SessionName" in _json(client.get("/prometheus/api/v1/query_range?query=up"), 403)["msg"]
    assert "query is required" in _json(client.get("/prometheus/api/v1/query"), 400)["msg"]


def test_without_metrics_configured_the_routes_say_which_flag(tmp_path: Path) -> None:
    config = server_config(tmp_path)
    store, _ = stored_session_a(config)
    live = FakeLive([live_cluster()])
    client = create_app(config, store=store, live=live).test_client()
    assert "--grafana-url" in _json(client.get(f"{PAGE}?{RAY_QUERY}"), 404)["msg"]
    assert "--prometheus-url" in _json(client.get("/prometheus/api/v1/query?query=up"), 404)["msg"]
    # A live cluster then answers for itself (it may run its own Grafana): proxied, here unreachable.
    for name, value in ((COOKIE_NAMESPACE, DEMO.namespace), (COOKIE_CLUSTER, DEMO.name), (COOKIE_SESSION, LIVE)):
        client.set_cookie(name, value)
    assert "cannot reach its dashboard" in _json(client.get("/api/grafana_health"), 502)["msg"]


# -------------------------------------------------------------- access control
def test_access_control_applies_to_pages_and_queries(guarded: World) -> None:
    bob = guarded.client(select=None, token="bob-token")
    assert bob.get(f"{PAGE}?{RAY_QUERY}").status_code == 302
    other = f"var-SessionName={JOB_SESSION}&from=now-1h&to=now"
    # Not readable is answered as unknown (404), and the namespace found is not named.
    refused = _json(bob.get(f"{PAGE}?{other}"), 404)["msg"]
    assert "no stored session you may read" in refused and "team-a" not in refused
    query = f'x{{SessionName="{SESSION_A}"}} + y{{SessionName="{JOB_SESSION}"}}'
    assert _json(bob.get("/prometheus/api/v1/query", query_string={"query": query}), 404)
    anonymous = guarded.client(select=None)
    assert anonymous.get(f"{PAGE}?{RAY_QUERY}").status_code == 401
    assert anonymous.get("/grafana/public/build/app.js").status_code == 401
    assert not [r for r in guarded.upstream.requests if r.path != "/grafana/api/health"]
    assert guarded.stub is not None
    guarded.stub.down = True  # a caller not decided before (decisions are cached briefly)
    carol = guarded.client(select=None, token="carol-token")
    assert carol.get(f"{PAGE}?{RAY_QUERY}").status_code == 503
