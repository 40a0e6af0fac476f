"""Access control on ``/sessions/...``: the path's namespace is authorized on every request
exactly as the cookie's is (Kubernetes TokenReview/SubjectAccessReview stand-in, as the
route matrix): 401 without credentials, 403 for another namespace (whatever the cookies
say), 503 when the API server is down, and the allowed user gets the open server's answer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from runtime.server.app import create_app
from runtime.server.auth import build_access_control, parse_auth
from runtime.server.selection import COOKIE_CLUSTER, COOKIE_NAMESPACE, COOKIE_SESSION
from runtime.server.session_urls import session_path
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
A_URL = session_path(DEMO, SESSION_A)
JOB_URL = session_path(JOB_CLUSTER, JOB_SESSION)
#: What a Dashboard page under a session URL asks for, the page itself first.
RESTS = (
    "",
    "index.html",
    "favicon.ico",
    "api/jobs/",
    "api/v0/tasks?limit=10",
    "logical/actors",
    "nodes?view=summary",
    "api/v0/logs?node_id=abc",
    "some/live/only/route",
)
DEFAULT_URLS = [A_URL + rest for rest in RESTS] + [
    f"/sessions/{DEMO.namespace}/{DEMO.name}/latest/api/jobs/",
    f"/sessions/{DEMO.namespace}/{DEMO.name}/{SESSION_A}",  # the trailing-slash redirect
    f"/sessions/{DEMO.namespace}/{DEMO.name}/session_2026-01-01_00-00-00_000000_1/api/jobs/",  # unknown session
]


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Flask, Flask, AuthApiStub, StoredSample]]:
    config = server_config(tmp_path, sessions_ttl_seconds="0")
    store, sample = stored_session_a(config)
    layout = KeyLayout("")
    store.put_bytes(layout.marker_key(JOB_CLUSTER, JOB_SESSION), b"")
    store.put_bytes(layout.log_key(JOB_CLUSTER, JOB_SESSION, sample.node_id, "raylet.out"), b"team-a secret line\n")
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


def _headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def _assert_no_leak(body: str) -> None:
    for secret in ("team-a secret line", "raylet", "<html", "Ray Dashboard"):
        assert secret not in body, secret


@pytest.mark.parametrize("url", DEFAULT_URLS)
@pytest.mark.parametrize("token", [None, "not-a-token"], ids=["anonymous", "bad-token"])
def test_without_valid_credentials_401(
    world: tuple[Flask, Flask, AuthApiStub, StoredSample], url: str, token: str | None
) -> None:
    answer = world[0].test_client().get(url, headers=_headers(token))
    assert answer.status_code == 401, (url, answer.status_code)
    _assert_no_leak(answer.get_data(as_text=True))


@pytest.mark.parametrize("url", DEFAULT_URLS)
def test_another_namespace_is_403(world: tuple[Flask, Flask, AuthApiStub, StoredSample], url: str) -> None:
    answer = world[0].test_client().get(url, headers=_headers(TEAM_A_USER))
    assert answer.status_code == 403, (url, answer.status_code, answer.get_data(as_text=True)[:200])
    body = answer.get_data(as_text=True)
    assert "may not read namespace default" in body
    _assert_no_leak(body)


def _with_cookies_for(client: FlaskClient, namespace: str, cluster: str, session: str) -> FlaskClient:
    client.set_cookie(COOKIE_NAMESPACE, namespace)
    client.set_cookie(COOKIE_CLUSTER, cluster)
    client.set_cookie(COOKIE_SESSION, session)
    return client


def test_cookies_of_a_readable_namespace_do_not_open_the_path(
    world: tuple[Flask, Flask, AuthApiStub, StoredSample],
) -> None:
    client = _with_cookies_for(world[0].test_client(), JOB_CLUSTER.namespace, JOB_CLUSTER.name, JOB_SESSION)
    answer = client.get(A_URL + "api/jobs/", headers=_headers(TEAM_A_USER))
    assert answer.status_code == 403
    # ... and cookies the caller may not read do not close a path they may read.
    client = _with_cookies_for(world[0].test_client(), DEMO.namespace, DEMO.name, SESSION_A)
    answer = client.get(JOB_URL + f"api/v0/logs/file?node_id={world[3].node_id}&filename=raylet.out")
    assert answer.status_code == 401  # no token yet
    answer = client.get(
        JOB_URL + f"api/v0/logs/file?node_id={world[3].node_id}&filename=raylet.out", headers=_headers(TEAM_A_USER)
    )
    assert answer.status_code == 200 and b"team-a secret line" in answer.data


@pytest.mark.parametrize("url", DEFAULT_URLS)
def test_the_allowed_user_gets_what_an_open_server_gives(
    world: tuple[Flask, Flask, AuthApiStub, StoredSample], url: str
) -> None:
    guarded, open_app = world[0], world[1]
    expected = open_app.test_client().get(url)
    answer = guarded.test_client().get(url, headers=_headers(DEFAULT_USER))
    assert (answer.status_code, answer.data) == (expected.status_code, expected.data), url


@pytest.mark.parametrize("url", [A_URL, A_URL + "api/jobs/", A_URL + "favicon.ico"])
def test_kubernetes_api_down_is_503(world: tuple[Flask, Flask, AuthApiStub, StoredSample], url: str) -> None:
    guarded, _, stub, _ = world
    stub.down = True
    answer = guarded.test_client().get(url, headers=_headers(DEFAULT_USER))
    assert answer.status_code == 503, (url, answer.status_code)
    _assert_no_leak(answer.get_data(as_text=True))


@pytest.mark.parametrize("rest", ["livez", "readz", "metrics"])
@pytest.mark.parametrize("token", [None, DEFAULT_USER], ids=["anonymous", "allowed"])
def test_server_routes_are_not_served_under_a_session_url(
    world: tuple[Flask, Flask, AuthApiStub, StoredSample], rest: str, token: str | None
) -> None:
    """Probes, metrics and login skip authentication: under a session URL they are 404, so
    nothing there is answered (nor a session looked up) for a caller nobody authenticated."""
    for app in world[:2]:
        answer = app.test_client().get(A_URL + rest, headers=_headers(token))
        assert answer.status_code == 404, (rest, answer.status_code)
        assert "not served under a session URL" in answer.get_json()["msg"]
