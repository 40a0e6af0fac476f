"""Every route the server serves x every kind of caller -> the exact status, and no leak.

The history server holds stored sessions of two namespaces (``default`` and ``team-a``,
from the views' shared fixture). Callers: anonymous, a bad token, an expired token, the
user of ``team-a`` carrying forged cookies that select ``default``'s session, and the user
of ``default``. The expected answer for an allowed caller is the answer of the same
server without access control (same status, same body); every refusal carries nothing of
the session. The Kubernetes API going away turns decisions into 503, never 200.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.test import EnvironBuilder, run_wsgi_app

from runtime.server.app import create_app
from runtime.server.auth import build_access_control, parse_auth
from runtime.server.selection import COOKIE_CLUSTER, COOKIE_NAMESPACE, COOKIE_SESSION
from runtime.storage.base import ObjectStore
from runtime.storage.layout import KeyLayout
from tests.support.app_world import (
    DEMO,
    JOB_CLUSTER,
    JOB_SESSION,
    FakeLive,
    server_config,
    stored_session_a,
)
from tests.support.k8s_auth_stub import AuthApiStub, auth_api_stub
from tests.support.sample_session import SESSION_A, StoredSample

DEFAULT_USER = "bob-token"
TEAM_A_USER = "alice-token"
EXPIRED = "expired-token"

#: Every Dashboard route a browser calls for a selected session (cookies select DEMO / SESSION_A).
SESSION_ROUTES = (
    "/api/v0/tasks?limit=10",
    "/api/v0/tasks/summarize",
    "/api/v0/tasks/timeline",
    "/logical/actors",
    "/logical/actors/0123",
    "/api/jobs/",
    "/api/jobs/01000000",
    "/nodes?view=summary",
    "/nodes/abc",
    "/events",
    "/api/cluster_status",
    "/timezone",
    "/api/v0/cluster_metadata",
    "/api/grafana_health",
    "/api/prometheus_health",
    "/api/v0/logs?node_id=abc",
    "/api/v0/logs/file?node_id=abc&filename=raylet.out&lines=10",
    "/api/v0/logs/stream?node_id=abc&filename=raylet.out",
    "/api/actors",
    "/api/serve/applications/",
    "/some/live/only/route",
)
ENTER = f"/enter_cluster/{DEMO.namespace}/raycluster/{DEMO.name}/{SESSION_A}"
OPEN_ROUTES = ("/livez", "/readz", "/metrics")
#: Routes that need a login but serve no namespace's data.
UI_ROUTES = ("/", "/select_cluster", "/select_cluster.js", "/select_cluster.css")


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Flask, Flask, AuthApiStub, StoredSample]]:
    config = server_config(tmp_path, sessions_ttl_seconds="0")
    store, sample = stored_session_a(config)
    _add_team_a(store, sample)
    with auth_api_stub() as stub:
        stub.tokens = {
            DEFAULT_USER: ("bob@example.com", ("default-devs",)),
            TEAM_A_USER: ("alice@example.com", ("team-a-devs",)),
        }
        stub.access = {("default-devs", "default"), ("team-a-devs", "team-a")}
        control = build_access_control(parse_auth("kubernetes", "kubernetes"), stub.api_client)
        guarded = create_app(config, store=store, live=FakeLive(), access=control)
        open_app = create_app(config, store=store, live=FakeLive())
        yield guarded, open_app, stub, sample


def _add_team_a(store: ObjectStore, sample: StoredSample) -> None:
    layout = KeyLayout("")
    store.put_bytes(layout.marker_key(JOB_CLUSTER, JOB_SESSION), b"")
    store.put_bytes(layout.log_key(JOB_CLUSTER, JOB_SESSION, sample.node_id, "raylet.out"), b"team-a secret line\n")


def _client(app: Flask, *, select_default: bool) -> FlaskClient:
    client = app.test_client()
    if select_default:
        client.set_cookie(COOKIE_NAMESPACE, DEMO.namespace)
        client.set_cookie(COOKIE_CLUSTER, DEMO.name)
        client.set_cookie(COOKIE_SESSION, SESSION_A)
    return client


def _headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def _assert_no_leak(body: str) -> None:
    for secret in (SESSION_A, DEMO.name, JOB_SESSION, "team-a secret line", "raylet"):
        assert secret not in body, secret


@pytest.mark.parametrize("path", [*SESSION_ROUTES, ENTER, "/clusters", *UI_ROUTES])
@pytest.mark.parametrize("token", [None, "not-a-token", EXPIRED], ids=["anonymous", "bad-token", "expired-token"])
def test_without_valid_credentials_every_data_route_is_401(
    world: tuple[Flask, Flask, AuthApiStub, StoredSample], path: str, token: str | None
) -> None:
    guarded = world[0]
    answer = _client(guarded, select_default=True).get(path, headers=_headers(token))
    assert answer.status_code == 401, (path, answer.status_code)
    _assert_no_leak(answer.get_data(as_text=True))


@pytest.mark.parametrize("path", [*SESSION_ROUTES, ENTER])
def test_forged_cookies_for_another_namespace_are_403(
    world: tuple[Flask, Flask, AuthApiStub, StoredSample], path: str
) -> None:
    guarded = world[0]
    answer = _client(guarded, select_default=True).get(path, headers=_headers(TEAM_A_USER))
    assert answer.status_code == 403, (path, answer.status_code, answer.get_data(as_text=True)[:200])
    body = answer.get_data(as_text=True)
    assert "may not read namespace default" in body
    _assert_no_leak(body.replace("namespace default", ""))


@pytest.mark.parametrize("path", [*SESSION_ROUTES, ENTER, *UI_ROUTES, *OPEN_ROUTES])
def test_the_allowed_user_gets_exactly_what_an_open_server_gives(
    world: tuple[Flask, Flask, AuthApiStub, StoredSample], path: str
) -> None:
    guarded, open_app = world[0], world[1]
    expected = _client(open_app, select_default=True).get(path)
    answer = _client(guarded, select_default=True).get(path, headers=_headers(DEFAULT_USER))
    assert answer.status_code == expected.status_code, (path, answer.get_data(as_text=True)[:300])
    if path not in ("/metrics",):  # counters move between the two calls
        assert answer.get_data() == expected.get_data(), path


def test_clusters_lists_only_readable_namespaces(world: tuple[Flask, Flask, AuthApiStub, StoredSample]) -> None:
    guarded = world[0]
    for token, namespace, other in ((DEFAULT_USER, "default", "team-a"), (TEAM_A_USER, "team-a", "default")):
        answer = _client(guarded, select_default=False).get("/clusters", headers=_headers(token))
        assert answer.status_code == 200
        entries = answer.get_json()
        assert entries and {e["namespace"] for e in entries} == {namespace}, entries
        assert other not in json.dumps(entries)


def test_clusters_lists_readable_namespaces_whatever_the_selection_cookie(
    world: tuple[Flask, Flask, AuthApiStub, StoredSample],
) -> None:
    """The picker's list filters; a selection cookie naming a namespace the caller may not
    read (a stale one after access was revoked, or planted) must not lock them out of it.
    Every other route still refuses that cookie (test_forged_cookies_for_another_namespace_are_403)."""
    guarded = world[0]
    client = _client(guarded, select_default=True)  # cookies select a session in "default"
    answer = client.get("/clusters", headers=_headers(TEAM_A_USER))
    assert answer.status_code == 200, (answer.status_code, answer.get_data(as_text=True)[:200])
    entries = answer.get_json()
    assert entries and {e["namespace"] for e in entries} == {"team-a"}, entries
    assert client.get(SESSION_ROUTES[0], headers=_headers(TEAM_A_USER)).status_code == 403
    assert client.get("/clusters").status_code == 401  # still authenticated on every request


@pytest.mark.parametrize("path", OPEN_ROUTES)
def test_probes_and_metrics_stay_open_and_carry_no_session_data(
    world: tuple[Flask, Flask, AuthApiStub, StoredSample], path: str
) -> None:
    guarded, _, stub, _ = world
    stub.down = True
    answer = _client(guarded, select_default=True).get(path)
    assert answer.status_code == 200
    _assert_no_leak(answer.get_data(as_text=True))


@pytest.mark.parametrize("path", [*SESSION_ROUTES, ENTER, "/clusters"])
def test_kubernetes_api_down_is_503_never_200(world: tuple[Flask, Flask, AuthApiStub, StoredSample], path: str) -> None:
    guarded, _, stub, _ = world
    stub.down = True
    answer = _client(guarded, select_default=True).get(path, headers=_headers(DEFAULT_USER))
    assert answer.status_code == 503, (path, answer.status_code)
    assert answer.headers["Retry-After"]
    _assert_no_leak(answer.get_data(as_text=True))


def test_every_route_of_the_app_is_in_the_matrix(world: tuple[Flask, Flask, AuthApiStub, StoredSample]) -> None:
    """A new route must be added here (and so be checked) before it can ship."""
    rules = {rule.rule for rule in world[0].url_map.iter_rules() if rule.endpoint != "static"}
    covered = {
        "/livez",
        "/readz",
        "/metrics",
        "/",
        "/index.html",
        "/static/<path:filename>",
        "/<path:path>",
        "/select_cluster",
        "/select_cluster.js",
        "/select_cluster.css",
        "/clusters",
        "/enter_cluster/<namespace>/<name>",
        "/enter_cluster/<namespace>/<kind>/<name>",
        "/enter_cluster/<namespace>/<kind>/<name>/<session>",
        "/api/v0/tasks",
        "/api/v0/tasks/summarize",
        "/api/v0/tasks/timeline",
        "/logical/actors",
        "/logical/actors/<path:actor_id>",
        "/api/jobs/",
        "/api/jobs/<job_id>",
        "/nodes",
        "/nodes/<node_id>",
        "/events",
        "/api/cluster_status",
        "/timezone",
        "/api/v0/cluster_metadata",
        "/api/grafana_health",
        "/api/prometheus_health",
        "/api/v0/logs",
        "/api/v0/logs/<media_type>",
        "/api/<path:rest>",
        # Metrics of dead clusters: decided per session, tests/unit/server/grafana/test_proxy.py.
        "/grafana/",
        "/grafana/<path:path>",
        "/prometheus/api/v1/query",
        "/prometheus/api/v1/query_range",
    }
    assert rules <= covered, sorted(rules - covered)


@pytest.mark.parametrize("path", ["//clusters", "//api/jobs/", "//select_cluster", "///api/v0/tasks"])
@pytest.mark.parametrize("token", [None, DEFAULT_USER], ids=["anonymous", "allowed"])
def test_double_slash_redirect_is_the_same_with_access_control(
    world: tuple[Flask, Flask, AuthApiStub, StoredSample], path: str, token: str | None
) -> None:
    """The guard's 308 to the single-slash path carries no data: the fail-closed check lets it through."""
    guarded, open_app = world[0], world[1]

    def get(app: Flask) -> tuple[int, str | None, str]:
        environ = EnvironBuilder(path="/", headers=_headers(token)).get_environ()
        environ.update(PATH_INFO=path, RAW_URI=path, QUERY_STRING="", HTTP_HOST="localhost")
        body, status, headers = run_wsgi_app(app, environ)
        return int(status.split()[0]), dict(headers).get("Location"), b"".join(body).decode()

    expected = get(open_app)
    assert expected[:2] == (308, "/" + path.lstrip("/"))
    assert get(guarded) == expected
