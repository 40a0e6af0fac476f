"""/clusters, /enter_cluster and /select_cluster through Flask's test client.

The app and its fake LiveDirectory: :mod:`tests.support.app_world`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest
from flask import Flask
from flask.testing import FlaskClient

from runtime.server.app import create_app
from runtime.server.live.discovery import LiveListing
from runtime.server.selection import COOKIE_NAMES
from runtime.storage.base import Listing, ObjectStore
from runtime.storage.config import open_store
from runtime.storage.layout import KeyLayout
from tests.support.app_world import (
    DEMO,
    JOB_SESSION,
    OLDER,
    FakeLive,
    app_world,
    live_cluster,
    server_config,
    stored_session_a,
)
from tests.support.sample_session import SESSION_A, StoredSample


# ------------------------------------------------------------------ fixtures
@pytest.fixture
def live() -> FakeLive:
    return FakeLive()


@pytest.fixture
def world(tmp_path: Path, live: FakeLive) -> tuple[Flask, ObjectStore, StoredSample]:
    return app_world(tmp_path, live)


@pytest.fixture
def client(world: tuple[Flask, ObjectStore, StoredSample]) -> FlaskClient:
    return world[0].test_client()


# ------------------------------------------------------------------ /clusters
def test_clusters_lists_live_first_then_stored_newest_first(client: FlaskClient, live: FakeLive) -> None:
    live.clusters = [live_cluster(), live_cluster("team-a", "rayjob-nightly-x7k2p", ("rayjob", "rayjob-nightly"))]
    answer = client.get("/clusters")
    assert answer.status_code == 200
    assert answer.mimetype == "application/json"
    assert "X-Live-Discovery" not in answer.headers
    entries = answer.get_json()
    assert [(e["namespace"], e["name"], e["sessionName"]) for e in entries] == [
        ("default", "raycluster-demo", "live"),
        ("team-a", "rayjob-nightly-x7k2p", "live"),
        ("default", "raycluster-demo", SESSION_A),
        ("default", "raycluster-demo", OLDER),
        ("team-a", "rayjob-nightly-x7k2p", JOB_SESSION),
    ]
    assert entries[0] == {
        "name": "raycluster-demo",
        "namespace": "default",
        "sessionName": "live",
        "createTime": "2026-11-22 03:00:00 +0000 UTC",
        "createTimeStamp": 1795316400,
        "url": "/sessions/default/raycluster-demo/live/",  # the history list's additions (#19)
        "summary": None,
    }
    assert (entries[1]["ownerKind"], entries[1]["ownerName"]) == ("rayjob", "rayjob-nightly")
    assert entries[2]["createTime"] == "2026-11-22T01:45:25Z"
    assert entries[2]["createTimeStamp"] == int(datetime(2026, 11, 22, 1, 45, 25, tzinfo=UTC).timestamp())
    assert "ownerKind" not in entries[2]
    assert (entries[4]["ownerKind"], entries[4]["ownerName"]) == ("rayjob", "rayjob-nightly")


def test_clusters_says_when_live_discovery_is_unavailable(client: FlaskClient, live: FakeLive) -> None:
    live.available = False
    answer = client.get("/clusters")
    assert answer.status_code == 200
    assert answer.headers["X-Live-Discovery"] == "unavailable"
    assert [e["sessionName"] for e in answer.get_json()] == [SESSION_A, OLDER, JOB_SESSION]


def test_clusters_filters_and_limit(tmp_path: Path, client: FlaskClient, live: FakeLive) -> None:
    live.clusters = [live_cluster()]
    assert [e["sessionName"] for e in client.get("/clusters?namespace=team-a").get_json()] == [JOB_SESSION]
    by_owner = client.get("/clusters?name=rayjob-nightly").get_json()
    assert [e["name"] for e in by_owner] == ["rayjob-nightly-x7k2p"]
    assert len(client.get("/clusters?name=raycluster-demo").get_json()) == 3
    assert client.get("/clusters?namespace=../../etc").get_json() == []


def test_clusters_limit_applies_to_stored_sessions(tmp_path: Path) -> None:
    from dataclasses import replace

    config = replace(server_config(tmp_path), clusters_limit=1)
    store, _ = stored_session_a(config)
    store.put_bytes(KeyLayout("").marker_key(DEMO, OLDER), b"")
    app = create_app(config, store=store, live=FakeLive([live_cluster()]))
    assert [e["sessionName"] for e in app.test_client().get("/clusters").get_json()] == ["live", SESSION_A]


def test_new_sessions_show_up_after_the_ttl(tmp_path: Path) -> None:
    config = server_config(tmp_path, sessions_ttl_seconds="3600")
    store, sample = stored_session_a(config)
    client = create_app(config, store=store, live=FakeLive()).test_client()
    assert len(client.get("/clusters").get_json()) == 1
    store.put_bytes(KeyLayout("").log_key(DEMO, OLDER, sample.node_id, "raylet.out"), b"x\n")
    store.put_bytes(KeyLayout("").marker_key(DEMO, OLDER), b"")
    assert len(client.get("/clusters").get_json()) == 1  # cached listing
    # ... but entering it works at once: a miss re-reads the markers.
    assert client.get(f"/enter_cluster/default/raycluster/raycluster-demo/{OLDER}").status_code == 200
    assert len(client.get("/clusters").get_json()) == 2


def test_invalid_markers_are_skipped(world: tuple[Flask, ObjectStore, StoredSample], client: FlaskClient) -> None:
    store = world[1]
    store.put_bytes("cluster-metadata/raycluster/no-underscore/session_2026-01-01_00-00-00_000000_1", b"")
    store.put_bytes("cluster-metadata/raycluster/default_x/not-a-session", b"")
    store.put_bytes("cluster-metadata/weird/default_x/session_2026-01-01_00-00-00_000000_1", b"")
    assert len(client.get("/clusters").get_json()) == 3


# ------------------------------------------------------------- /enter_cluster
def _cookies(client: FlaskClient) -> dict[str, str]:
    return {name: cookie.value for name in COOKIE_NAMES if (cookie := client.get_cookie(name)) is not None}


def test_enter_latest_stored_builds_the_index_and_sets_cookies(client: FlaskClient) -> None:
    answer = client.get("/enter_cluster/default/raycluster/raycluster-demo")
    assert answer.status_code == 200, answer.get_data(as_text=True)
    assert answer.get_json() == {
        "result": "success",
        "name": "raycluster-demo",
        "namespace": "default",
        "session": SESSION_A,
    }
    assert _cookies(client) == {
        "cluster_name": "raycluster-demo",
        "cluster_namespace": "default",
        "session_name": SESSION_A,
        "owner_kind": "",
        "owner_name": "",
    }
    set_cookie = answer.headers.getlist("Set-Cookie")
    assert len(set_cookie) == 5
    assert all("HttpOnly" in c and "SameSite=Lax" in c and "Max-Age=600" in c and "Path=/" in c for c in set_cookie)
    # The index exists already: a data route answers at once.
    logs = client.get("/api/v0/logs")
    assert logs.status_code == 200 and logs.get_json()["data"]["result"]["raylet"]


@pytest.mark.parametrize(
    ("headers", "location"),
    [
        (
            {"Sec-Fetch-Mode": "navigate", "Accept": "text/html"},
            f"../../../../sessions/default/raycluster-demo/{SESSION_A}/",
        ),
        (
            {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"},
            f"../../../../sessions/default/raycluster-demo/{SESSION_A}/",
        ),
    ],
)
def test_a_browser_opening_enter_cluster_lands_in_the_dashboard(
    client: FlaskClient, headers: dict[str, str], location: str
) -> None:
    answer = client.get(f"/enter_cluster/default/raycluster/raycluster-demo/{SESSION_A}", headers=headers)
    assert answer.status_code == 302 and answer.headers["Location"] == location
    assert _cookies(client)["session_name"] == SESSION_A
    # The session URL, relative (a path prefix keeps working), no fragment (the browser keeps its own).
    short = client.get("/enter_cluster/default/raycluster-demo", headers=headers)
    assert (
        short.status_code == 302 and short.headers["Location"] == f"../../sessions/default/raycluster-demo/{SESSION_A}/"
    )


def test_kind_less_forms_mean_a_raycluster(client: FlaskClient) -> None:
    explicit = client.get(f"/enter_cluster/default/raycluster-demo/{SESSION_A}")
    assert explicit.status_code == 200 and explicit.get_json()["session"] == SESSION_A
    latest = client.get("/enter_cluster/default/raycluster-demo/latest")
    assert latest.status_code == 200 and latest.get_json()["name"] == "raycluster-demo"
    short = client.get("/enter_cluster/default/raycluster-demo")
    assert short.status_code == 200 and short.get_json()["session"] == SESSION_A
    wrong = client.get("/enter_cluster/default/raycluster-demo/yesterday")
    assert wrong.status_code == 400 and "unsupported resource kind" in wrong.get_json()["msg"]


def test_scripts_and_the_pickers_fetch_get_json(client: FlaskClient) -> None:
    fetch = client.get("/enter_cluster/default/raycluster/raycluster-demo", headers={"Sec-Fetch-Mode": "cors"})
    assert fetch.status_code == 200 and fetch.get_json()["result"] == "success"
    plain = client.get("/enter_cluster/default/raycluster/raycluster-demo", headers={"Accept": "*/*"})
    assert plain.status_code == 200 and plain.get_json()["session"] == SESSION_A


def test_enter_latest_prefers_the_live_cluster(client: FlaskClient, live: FakeLive) -> None:
    live.clusters = [live_cluster()]
    for path in (
        "/enter_cluster/default/raycluster/raycluster-demo",
        "/enter_cluster/default/RayCluster/raycluster-demo/live",
    ):
        answer = client.get(path)
        assert answer.status_code == 200
        assert answer.get_json()["session"] == "live"
        assert _cookies(client)["session_name"] == "live"


def test_an_old_session_of_a_running_cluster_can_be_entered(
    world: tuple[Flask, ObjectStore, StoredSample], client: FlaskClient, live: FakeLive
) -> None:
    live.clusters = [live_cluster()]
    answer = client.get(f"/enter_cluster/default/raycluster/raycluster-demo/{OLDER}")
    assert answer.status_code == 200
    assert answer.get_json()["session"] == OLDER
    node = world[2].node_id
    assert client.get(f"/api/v0/logs/file?node_id={node}&filename=raylet.out").data == b"older session\n"


def test_enter_by_rayjob_owner_and_by_the_cluster_name(client: FlaskClient, live: FakeLive) -> None:
    answer = client.get("/enter_cluster/team-a/RayJob/rayjob-nightly")
    assert answer.status_code == 200, answer.get_data(as_text=True)
    assert answer.get_json() == {
        "result": "success",
        "name": "rayjob-nightly-x7k2p",
        "namespace": "team-a",
        "session": JOB_SESSION,
    }
    assert _cookies(client)["owner_kind"] == "rayjob"
    assert _cookies(client)["owner_name"] == "rayjob-nightly"
    # raycluster kind matches a RayJob-owned cluster by its own name
    answer = client.get(f"/enter_cluster/team-a/raycluster/rayjob-nightly-x7k2p/{JOB_SESSION}")
    assert answer.status_code == 200
    assert _cookies(client)["owner_name"] == "rayjob-nightly"
    # live RayJob cluster found by labels, owner filled from the URL when unknown
    live.clusters = [live_cluster("team-a", "rayjob-nightly-x7k2p", ("rayjob", "rayjob-nightly"))]
    assert client.get("/enter_cluster/team-a/rayjob/rayjob-nightly/latest").get_json()["session"] == "live"
    assert _cookies(client)["owner_kind"] == "rayjob"


@pytest.mark.parametrize(
    ("path", "status", "text"),
    [
        ("/enter_cluster/default/deployment/raycluster-demo", 400, "unsupported resource kind"),
        ("/enter_cluster/default/raycluster/raycluster-demo/invalid-session-name", 400, "invalid session name"),
        ("/enter_cluster/default/raycluster/raycluster-demo/session_..", 400, "invalid session name"),
        ("/enter_cluster/Default/raycluster/raycluster-demo", 400, "namespace"),
        ("/enter_cluster/default/raycluster/Bad_Name", 400, "name"),
        ("/enter_cluster/default/raycluster/nope", 404, "default/raycluster/nope with session latest not found"),
        ("/enter_cluster/default/raycluster/raycluster-demo/session_2020-01-01_00-00-00_000000_1", 404, "not found"),
        ("/enter_cluster/default/raycluster/raycluster-demo/live", 404, "not running"),
        ("/enter_cluster/default/rayservice/raycluster-demo", 404, "not found"),
    ],
)
def test_enter_errors(client: FlaskClient, path: str, status: int, text: str) -> None:
    answer = client.get(path)
    assert answer.status_code == status
    assert answer.get_json()["result"] is False
    assert text in answer.get_json()["msg"]
    assert "Set-Cookie" not in answer.headers


def test_live_lookup_failure_is_503_without_storage_fallback(client: FlaskClient, live: FakeLive) -> None:
    live.fail = True
    answer = client.get("/enter_cluster/default/raycluster/raycluster-demo")
    assert answer.status_code == 503
    assert answer.headers["Retry-After"] == "5"
    # an explicit stored session does not need the live lookup
    assert client.get(f"/enter_cluster/default/raycluster/raycluster-demo/{SESSION_A}").status_code == 200


def test_a_removed_session_is_404(world: tuple[Flask, ObjectStore, StoredSample], client: FlaskClient) -> None:
    store = world[1]
    layout = KeyLayout("")
    for info in list(store.walk(layout.session_prefix(DEMO, OLDER))):
        store.delete(info.key)
    answer = client.get(f"/enter_cluster/default/raycluster/raycluster-demo/{OLDER}")
    assert answer.status_code == 404


# ------------------------------------------------------------ /select_cluster
def test_select_cluster_page_and_assets(client: FlaskClient) -> None:
    page = client.get("/select_cluster")
    assert page.status_code == 200
    assert page.mimetype == "text/html"
    assert page.headers["X-Frame-Options"] == "DENY"
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    csp = page.headers["Content-Security-Policy"]
    assert "default-src 'self'" in csp and "connect-src 'self'" in csp and "unsafe-inline" not in csp
    html = page.get_data(as_text=True)
    assert 'src="select_cluster.js"' in html and 'href="select_cluster.css"' in html
    assert "<script>" not in html and "style=" not in html  # nothing inline: the CSP forbids it
    script = client.get("/select_cluster.js")
    assert script.status_code == 200 and script.mimetype == "text/javascript"
    js = script.get_data(as_text=True)
    for needle in ('"clusters"', "enter_cluster/", "#/overview", "X-Live-Discovery", "textContent"):
        assert needle in js
    assert ".innerHTML" not in js
    assert client.get("/select_cluster.css").mimetype == "text/css"
    slash = client.get("/select_cluster/")
    assert slash.status_code == 308 and slash.headers["Location"] == "../select_cluster"


def test_clusters_json_is_an_array_even_when_everything_is_down(tmp_path: Path) -> None:
    config = server_config(tmp_path)
    store = open_store(config.storage)

    class Broken(FakeLive):
        def list_clusters(self) -> LiveListing:
            raise RuntimeError("boom")

    answer = create_app(config, store=store, live=Broken()).test_client().get("/clusters")
    assert answer.status_code == 200
    assert orjson.loads(answer.data) == []
    assert answer.headers["X-Live-Discovery"] == "unavailable"


def test_clusters_keeps_live_entries_when_storage_is_down(tmp_path: Path) -> None:
    from runtime.storage.errors import StorageUnavailableError
    from runtime.storage.local import LocalStore

    class DownStore(LocalStore):
        def _list_page(self, prefix: str, delimiter: str | None, token: str | None) -> tuple[Listing, str | None]:
            raise StorageUnavailableError("unreachable", backend="local", bucket="x")

    config = server_config(tmp_path)
    store = DownStore(tmp_path / "store")
    answer = create_app(config, store=store, live=FakeLive([live_cluster()])).test_client().get("/clusters")
    assert answer.status_code == 200
    assert answer.headers["X-Stored-Sessions"] == "unavailable"
    assert [e["sessionName"] for e in answer.get_json()] == ["live"]
