"""``/sessions/...`` answered by the real app (Flask's test client, a local store holding
session A, an older session of the same cluster and a RayJob's session): no cookies
needed or set, sessions side by side, latest/live resolution, owner forms, bad paths."""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from runtime.server.app import create_app
from runtime.server.config import LiveClusterURL
from runtime.server.live.discovery import StaticLiveDirectory
from runtime.server.selection import COOKIE_CLUSTER, COOKIE_NAMESPACE, COOKIE_SESSION
from runtime.server.session_urls import session_path
from runtime.server.views.ui import find_dashboard_build
from runtime.storage.base import ObjectStore
from tests.support.app_world import (
    DEMO,
    JOB_CLUSTER,
    JOB_SESSION,
    OLDER,
    FakeLive,
    app_world,
    live_cluster,
    server_config,
    stored_session_a,
)
from tests.support.sample_session import SESSION_A, StoredSample
from tests.unit.server.live.servers import Upstream, upstream_server

A_URL = session_path(DEMO, SESSION_A)
OLDER_URL = session_path(DEMO, OLDER)
JOB_URL = session_path(JOB_CLUSTER, JOB_SESSION)


@pytest.fixture
def live() -> FakeLive:
    return FakeLive()


@pytest.fixture
def world(tmp_path: Path, live: FakeLive) -> tuple[Flask, ObjectStore, StoredSample]:
    return app_world(tmp_path, live)


@pytest.fixture
def client(world: tuple[Flask, ObjectStore, StoredSample]) -> FlaskClient:
    return world[0].test_client()


def _log(sample: StoredSample) -> str:
    return f"api/v0/logs/file?node_id={sample.node_id}&filename=raylet.out&lines=5"


def _no_cookies_set(answer: object) -> bool:
    return not answer.headers.getlist("Set-Cookie")  # type: ignore[attr-defined]


def test_api_answers_without_cookies_as_the_cookie_flow_does(
    world: tuple[Flask, ObjectStore, StoredSample], client: FlaskClient
) -> None:
    by_path = client.get(A_URL + "api/jobs/")
    assert by_path.status_code == 200, by_path.get_data(as_text=True)
    assert _no_cookies_set(by_path)
    assert client.get_cookie(COOKIE_SESSION) is None
    cookie_client = world[0].test_client()
    assert cookie_client.get(f"/enter_cluster/{DEMO.namespace}/raycluster/{DEMO.name}/{SESSION_A}").status_code == 200
    for rest in ("api/jobs/", "logical/actors", "api/v0/tasks?limit=5", "nodes?view=summary", "api/cluster_status"):
        expected = cookie_client.get("/" + rest)
        answer = client.get(A_URL + rest)
        assert (answer.status_code, answer.get_json()) == (expected.status_code, expected.get_json()), rest
        assert answer.get_json() is not None


def test_two_sessions_side_by_side(world: tuple[Flask, ObjectStore, StoredSample], client: FlaskClient) -> None:
    sample = world[2]
    answers = {url: client.get(url + _log(sample)) for url in (A_URL, OLDER_URL, JOB_URL)}
    assert all(a.status_code == 200 for a in answers.values()), {u: a.status_code for u, a in answers.items()}
    assert b"older session" in answers[OLDER_URL].data
    assert b"job line" in answers[JOB_URL].data
    assert b"older session" not in answers[A_URL].data and b"job line" not in answers[A_URL].data
    assert answers[A_URL].data  # session A's own raylet.out


def test_path_wins_over_cookies_and_none_are_refreshed(
    world: tuple[Flask, ObjectStore, StoredSample], client: FlaskClient
) -> None:
    client.set_cookie(COOKIE_NAMESPACE, DEMO.namespace)
    client.set_cookie(COOKIE_CLUSTER, DEMO.name)
    client.set_cookie(COOKIE_SESSION, SESSION_A)
    answer = client.get(OLDER_URL + _log(world[2]))
    assert b"older session" in answer.data
    assert _no_cookies_set(answer)


def test_latest_resolves_to_the_newest_stored_session(
    world: tuple[Flask, ObjectStore, StoredSample], client: FlaskClient
) -> None:
    latest = client.get(f"/sessions/{DEMO.namespace}/{DEMO.name}/latest/" + _log(world[2]))
    assert latest.status_code == 200
    assert latest.data == client.get(A_URL + _log(world[2])).data  # A is newer than OLDER


def test_owner_forms(world: tuple[Flask, ObjectStore, StoredSample], client: FlaskClient) -> None:
    assert f"/sessions/team-a/rayjob/rayjob-nightly/{JOB_SESSION}/" == JOB_URL
    for url in (JOB_URL, "/sessions/team-a/rayjob/rayjob-nightly/latest/"):
        answer = client.get(url + _log(world[2]))
        assert answer.status_code == 200 and b"job line" in answer.data, url
    # The RayCluster form with the cluster's own name reaches the same session.
    by_cluster = client.get(f"/sessions/team-a/{JOB_CLUSTER.name}/{JOB_SESSION}/" + _log(world[2]))
    assert b"job line" in by_cluster.data
    assert client.get(f"/sessions/team-a/rayservice/rayjob-nightly/{JOB_SESSION}/api/jobs/").status_code == 404


@pytest.mark.parametrize(
    ("path", "named"),
    [
        ("/sessions/Default/raycluster-demo/latest/api/jobs/", 'invalid namespace segment "Default"'),
        ("/sessions/default/demo_x/latest/api/jobs/", 'invalid cluster name segment "demo_x"'),
        ("/sessions/default/raycluster-demo/session_2026/api/jobs/", 'invalid session segment "session_2026"'),
        ("/sessions/default/raycluster-demo/api/jobs/", "without a session segment"),
        ("/sessions/default", "without a session segment"),
        ("/sessions", "without a session segment"),
    ],
)
def test_bad_paths_are_400_json_naming_the_segment(client: FlaskClient, path: str, named: str) -> None:
    answer = client.get(path)
    assert answer.status_code == 400
    assert answer.mimetype == "application/json"
    assert named in answer.get_json()["msg"]


@pytest.mark.parametrize(
    "path",
    [
        "/sessions/default/raycluster-demo/session_2026-01-01_00-00-00_000000_1/api/jobs/",
        "/sessions/default/nosuch/latest/api/jobs/",
        "/sessions/default/raycluster-demo/live/api/jobs/",  # not running
        "/sessions/other/raycluster-demo/latest/",
    ],
)
def test_unknown_sessions_are_404_json(client: FlaskClient, path: str) -> None:
    answer = client.get(path)
    assert answer.status_code == 404
    assert answer.mimetype == "application/json"
    assert "not" in answer.get_json()["msg"]


def test_the_session_root_without_its_slash_redirects_relatively(client: FlaskClient) -> None:
    answer = client.get(A_URL.rstrip("/") + "?x=1")
    assert answer.status_code == 308
    assert answer.headers["Location"] == f"{SESSION_A}/?x=1"
    assert client.get("/sessions/team-a/rayjob/rayjob-nightly/latest").headers["Location"] == "latest/"


@pytest.mark.skipif(find_dashboard_build() is None, reason="the ray package's Dashboard build is not installed")
def test_the_dashboard_page_and_its_relative_assets(client: FlaskClient) -> None:
    page = client.get(A_URL, headers={"Sec-Fetch-Mode": "navigate"})
    assert page.status_code == 200 and page.mimetype == "text/html"
    assert _no_cookies_set(page)
    assets = re.findall(r'(?:src|href)="\./([^"]+)"', page.get_data(as_text=True))
    assert any(a.startswith("static/js/") for a in assets)
    for asset in assets:  # resolved by the browser under the session URL
        answer = client.get(A_URL + asset)
        if answer.status_code == 308:  # a hashed file: shared by all sessions (below)
            base = posixpath.dirname(A_URL + asset)
            answer = client.get(posixpath.normpath(posixpath.join(base, answer.headers["Location"])))
        assert answer.status_code == 200, asset
    assert client.get(A_URL + "index.html").status_code == 200


@pytest.mark.skipif(find_dashboard_build() is None, reason="the ray package's Dashboard build is not installed")
@pytest.mark.parametrize("url", [A_URL, JOB_URL, "/sessions/default/nosuch/latest/"])
def test_hashed_assets_are_shared_by_every_session(client: FlaskClient, url: str) -> None:
    """One download of main.js (over 1 MB) for all sessions: a cacheable relative redirect
    to the server's own static/ (which serves them immutable)."""
    page = client.get(A_URL).get_data(as_text=True)
    script = re.search(r'src="\./(static/js/[^"]+)"', page)
    assert script is not None
    answer = client.get(url + script.group(1))
    assert answer.status_code == 308
    location = answer.headers["Location"]
    assert location.startswith("../") and location.endswith(script.group(1))
    for prefix in ("", "/history"):  # resolves to <prefix>/static/..., behind a path prefix too
        base = posixpath.dirname(prefix + url + script.group(1))
        assert posixpath.normpath(posixpath.join(base, location)) == f"{prefix}/{script.group(1)}"
    shared = client.get("/" + script.group(1))
    assert shared.status_code == 200 and "immutable" in shared.headers["Cache-Control"]


def test_live_sessions_go_through_the_live_proxy(tmp_path: Path) -> None:
    with upstream_server() as upstream:
        app = _live_app(tmp_path, upstream)
        client = app.test_client()
        for url in ("/sessions/default/live-demo/live/", "/sessions/default/live-demo/latest/"):
            answer = client.get(url + "worker/traceback?pid=1&node_id=n")
            assert answer.status_code == 200, answer.get_data(as_text=True)
            assert answer.get_json()["path"] == "/worker/traceback?pid=1&node_id=n"
            assert _no_cookies_set(answer)
            assert client.get(url + "api/jobs/").get_json()["path"] == "/api/jobs/"
            refused = client.post(url + "api/jobs/raysubmit_x/stop", data=b"{}", content_type="application/json")
            assert refused.status_code == 403 and "read-only" in refused.get_json()["msg"]
            assert _no_cookies_set(refused)
        assert {s.method for s in upstream.seen} == {"GET"}


def _live_app(tmp_path: Path, upstream: Upstream) -> Flask:
    config = server_config(tmp_path, sessions_ttl_seconds="0")
    store, _ = stored_session_a(config)
    directory = StaticLiveDirectory([LiveClusterURL("default", "live-demo", upstream.url)])
    return create_app(config, store=store, live=directory)


def test_latest_of_a_running_cluster_is_live(
    world: tuple[Flask, ObjectStore, StoredSample], client: FlaskClient, live: FakeLive
) -> None:
    live.clusters = [live_cluster()]  # its base URL refuses connections
    answer = client.get(f"/sessions/{DEMO.namespace}/{DEMO.name}/latest/api/jobs/")
    assert answer.status_code in (502, 503, 504)  # proxied, not the stored session
    assert client.get(A_URL + "api/jobs/").status_code == 200  # a stored session by name stays stored
    live.fail = True
    unsure = client.get(f"/sessions/{DEMO.namespace}/{DEMO.name}/latest/api/jobs/")
    assert unsure.status_code == 503 and "cannot tell whether" in unsure.get_json()["msg"]


@pytest.mark.parametrize(
    "rest",
    [
        "../../../../etc/passwd",
        "static/../../../../../../etc/passwd",
        "%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        "static/..%2f..%2f..%2f..%2fetc%2fpasswd",
        "api/v0/logs/file?node_id=../../x&filename=../../../etc/passwd",
    ],
)
def test_no_escape_through_a_session_url(client: FlaskClient, rest: str) -> None:
    answer = client.get(A_URL + rest)
    assert answer.status_code in (400, 404), (rest, answer.status_code)
    assert b"root:" not in answer.data


def test_cookie_header_keeps_other_cookies() -> None:
    from runtime.server.session_scope import without_selection_cookies

    header = "cluster_name=a; hs_login=sealed==; session_name=s;cluster_namespace=n ; owner_kind=; theme=dark"
    assert without_selection_cookies(header) == "hs_login=sealed==; theme=dark"
