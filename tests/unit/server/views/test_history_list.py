"""The history list (#19 item 2): ``/clusters`` summaries, pagination, filters and
access control, through Flask's test client over a local store holding the real
session A plus many marker-only sessions.

Expected summary figures come from the live Dashboard's own answers saved with
session A (``tests/fixtures/ray-samples/api``), not from our index.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import orjson
import pytest
from flask import Flask
from flask.testing import FlaskClient

from runtime.server.app import create_app
from runtime.server.auth import build_access_control, parse_auth
from runtime.storage.base import ObjectStore
from runtime.storage.layout import ClusterRef, KeyLayout
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
from tests.support.k8s_auth_stub import auth_api_stub
from tests.support.sample_session import API, SESSION_A, StoredSample

BULK = ClusterRef("bulk", "raycluster-bulk")
LAYOUT = KeyLayout("")


def bulk_session(i: int) -> str:
    # Several sessions share a second: the list's order must still be total.
    return f"session_2026-10-{1 + i // 100:02d}_00-00-{(i // 4) % 60:02d}_000000_{i}"


@pytest.fixture
def live() -> FakeLive:
    return FakeLive()


@pytest.fixture
def world(tmp_path: Path, live: FakeLive) -> tuple[Flask, ObjectStore, StoredSample]:
    return app_world(tmp_path, live, logs=False)


@pytest.fixture
def client(world: tuple[Flask, ObjectStore, StoredSample]) -> FlaskClient:
    return world[0].test_client()


def _enter_a(client: FlaskClient) -> None:
    answer = client.get(f"/enter_cluster/default/raycluster/raycluster-demo/{SESSION_A}")
    assert answer.status_code == 200, answer.get_data(as_text=True)


def _by_session(client: FlaskClient, query: str = "") -> dict[str, dict[str, object]]:
    answer = client.get("/clusters" + query)
    assert answer.status_code == 200, answer.get_data(as_text=True)
    return {e["sessionName"]: e for e in answer.get_json()}


# ------------------------------------------------------------------ summaries
def test_summary_of_an_indexed_session_matches_the_live_dashboard(
    client: FlaskClient, world: tuple[Flask, ObjectStore, StoredSample], tmp_path: Path
) -> None:
    before = _by_session(client)
    assert before[SESSION_A]["summary"] is None and before[SESSION_A]["indexed"] is False
    assert not list((tmp_path / "cache").glob("*.sqlite")), "listing must not build an index"
    _enter_a(client)
    entries = _by_session(client)
    summary = entries[SESSION_A]["summary"]
    assert isinstance(summary, dict) and entries[SESSION_A]["indexed"] is True
    jobs = orjson.loads((API / "api_jobs.json").read_bytes())
    tasks = orjson.loads((API / "api_v0_tasks_detail_limit10000.json").read_bytes())["data"]["result"]["result"]
    nodes = orjson.loads((API / "nodes_view=summary.json").read_bytes())["data"]["summary"]
    by_status: dict[str, int] = {}
    for job in jobs:
        by_status[job["status"]] = by_status.get(job["status"], 0) + 1
    assert summary["jobs"] == by_status == {"FAILED": 2, "SUCCEEDED": 2}
    assert summary["failedTasks"] == sum(1 for t in tasks if t["state"] == "FAILED") == 7
    assert summary["nodes"] == len(nodes) == 1
    assert summary["failed"] is True
    first_start = min([j["start_time"] for j in jobs] + [int(n["raylet"]["startTimeMs"]) for n in nodes])
    assert summary["start"] == first_start
    assert summary["end"] is not None and summary["end"] >= max(j["end_time"] for j in jobs)
    assert summary["durationSeconds"] == round((summary["end"] - summary["start"]) / 1000, 3)
    assert "ownerKind" not in summary
    # Sessions without an index are listed as such, never built.
    assert entries[OLDER]["summary"] is None and entries[JOB_SESSION]["summary"] is None
    assert entries[SESSION_A]["url"] == f"/sessions/default/raycluster-demo/{SESSION_A}/"
    assert entries[JOB_SESSION]["url"] == f"/sessions/team-a/rayjob/rayjob-nightly/{JOB_SESSION}/"


def test_a_rebuilt_index_gives_a_fresh_summary(client: FlaskClient, tmp_path: Path) -> None:
    import shutil
    import sqlite3

    _enter_a(client)
    assert _by_session(client)[SESSION_A]["summary"]["failedTasks"] == 7  # type: ignore[index]
    # A rebuild renames a new file into place: the cached summary must not survive it.
    (index,) = (tmp_path / "cache").glob("*.sqlite")
    copy = index.with_name("rebuilt.tmp")
    shutil.copyfile(index, copy)
    conn = sqlite3.connect(copy)
    with conn:
        conn.execute("UPDATE task_counts SET state = 'FINISHED' WHERE state = 'FAILED'")
        conn.execute("""DELETE FROM jobs WHERE instr(CAST(job_json AS TEXT), '"status":"FAILED"')""")
    conn.close()  # the last connection checkpoints the WAL into the file
    copy.replace(index)
    summary = _by_session(client)[SESSION_A]["summary"]
    assert summary == {**summary, "failedTasks": 0, "failed": False, "jobs": {"SUCCEEDED": 2}}  # type: ignore[dict-item]


def test_a_session_being_indexed_reports_its_progress(
    client: FlaskClient, world: tuple[Flask, ObjectStore, StoredSample]
) -> None:
    from runtime.server.context import services
    from runtime.server.index.progress import progress_path

    with world[0].app_context():
        path = services().indexes.path_for(DEMO, OLDER)
    progress_path(path).write_bytes(b'{"phase": "reading events", "done": 3, "total": 10}')
    entry = _by_session(client)[OLDER]
    assert entry["summary"] is None and entry["indexed"] is False
    assert entry["indexing"] == {"phase": "reading events", "done": 3, "total": 10}


# ------------------------------------------------------------------ pagination
def _add_bulk(store: ObjectStore, count: int, start: int = 0) -> list[str]:
    names = [bulk_session(i) for i in range(start, start + count)]
    for name in names:
        store.put_bytes(LAYOUT.marker_key(BULK, name), b"")
    return names


def _pages(client: FlaskClient, first: str) -> list[list[dict[str, object]]]:
    pages = []
    url: str | None = first
    while url is not None:
        answer = client.get(url)
        assert answer.status_code == 200, answer.get_data(as_text=True)
        pages.append(answer.get_json())
        cursor = answer.headers.get("X-Next-Cursor")
        if cursor is None:
            assert "Link" not in answer.headers
            url = None
        else:
            link = answer.headers["Link"]
            assert link.startswith("<clusters?") and link.endswith('>; rel="next"') and cursor in link
            url = "/" + link[1 : link.index(">")]
    return pages


def test_pages_chain_without_duplicates_or_gaps(
    client: FlaskClient, world: tuple[Flask, ObjectStore, StoredSample], live: FakeLive
) -> None:
    _add_bulk(world[1], 250)
    live.clusters = [live_cluster()]
    everything = client.get("/clusters?limit=1000").get_json()
    assert "X-Next-Cursor" not in client.get("/clusters?limit=1000").headers
    pages = _pages(client, "/clusters?limit=40&namespace=bulk")
    assert [len(p) for p in pages] == [40] * 6 + [10]
    listed = [(e["namespace"], e["name"], e["sessionName"]) for p in pages for e in p]
    assert len(set(listed)) == len(listed) == 250
    expected = [(e["namespace"], e["name"], e["sessionName"]) for e in everything if e["namespace"] == "bulk"]
    assert listed == expected  # same order as one big page
    # Live clusters come first, on the first page only.
    all_pages = _pages(client, "/clusters?limit=100")
    assert all_pages[0][0]["sessionName"] == "live"
    assert all("live" not in [e["sessionName"] for e in p] for p in all_pages[1:])
    assert sum(len(p) for p in all_pages) == 1 + 253


def test_pages_stay_stable_while_new_sessions_arrive(
    client: FlaskClient, world: tuple[Flask, ObjectStore, StoredSample]
) -> None:
    store = world[1]
    _add_bulk(store, 120)
    first = client.get("/clusters?namespace=bulk&limit=50")
    seen = [e["sessionName"] for e in first.get_json()]
    # Newer sessions (and one deleted) between page requests do not shift the next page.
    newer = [f"session_2026-12-0{d}_00-00-00_000000_1" for d in range(1, 6)]
    for name in newer:
        store.put_bytes(LAYOUT.marker_key(BULK, name), b"")
    url: str | None = f"/clusters?namespace=bulk&limit=50&cursor={first.headers['X-Next-Cursor']}"
    while url:
        answer = client.get(url)
        seen += [e["sessionName"] for e in answer.get_json()]
        cursor = answer.headers.get("X-Next-Cursor")
        url = f"/clusters?namespace=bulk&limit=50&cursor={cursor}" if cursor else None
    assert sorted(seen) == sorted(bulk_session(i) for i in range(120))
    assert not set(newer) & set(seen)
    # A new first page shows them. A listing that took SLOW_READ_SECONDS or more (a loaded
    # machine) is refreshed in the background while the old one answers: allow for that.
    deadline = time.monotonic() + 15
    while True:
        first_page = [e["sessionName"] for e in client.get("/clusters?namespace=bulk&limit=5").get_json()]
        if first_page == newer[::-1] or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert first_page == newer[::-1]


def test_without_new_parameters_the_answer_is_the_reference_array(client: FlaskClient) -> None:
    answer = client.get("/clusters")
    assert isinstance(orjson.loads(answer.data), list)
    assert "X-Next-Cursor" not in answer.headers
    for entry in answer.get_json():
        assert {"name", "namespace", "sessionName", "createTime", "createTimeStamp"} <= set(entry)


# ------------------------------------------------------------------ filters
def test_filters_failed_owner_and_dates(client: FlaskClient, live: FakeLive) -> None:
    live.clusters = [live_cluster("team-a", "rayjob-nightly-x7k2p", ("rayjob", "rayjob-nightly"))]
    assert list(_by_session(client, "?failed=true")) == []  # nothing indexed yet: nothing judged
    _enter_a(client)
    assert list(_by_session(client, "?failed=true")) == [SESSION_A]
    assert list(_by_session(client, "?failed=false")) == ["live", SESSION_A, OLDER, JOB_SESSION]
    assert list(_by_session(client, "?owner=rayjob-nightly")) == ["live", JOB_SESSION]
    assert list(_by_session(client, "?owner=RayJob/rayjob-nightly")) == ["live", JOB_SESSION]
    assert list(_by_session(client, "?owner=rayservice/rayjob-nightly")) == []
    # OLDER: 2026-11-01 08:00, SESSION_A: 2026-11-22 01:45, JOB_SESSION: 2026-10-05, live: 2026-11-22 03:00.
    assert list(_by_session(client, "?since=2026-11-01&until=2026-11-01")) == [OLDER]
    assert list(_by_session(client, "?since=2026-11-22T02:00:00Z")) == ["live"]
    assert list(_by_session(client, "?until=2026-10-31")) == [JOB_SESSION]
    assert list(_by_session(client, "?since=100000d")) == ["live", SESSION_A, OLDER, JOB_SESSION]


@pytest.mark.parametrize(
    ("query", "param"),
    [
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=ten", "limit"),
        ("cursor=not-a-cursor", "cursor"),
        ("cursor=eyJ2IjoxLCJrIjpbMV19", "cursor"),  # {"v":1,"k":[1]}: valid base64 and JSON, wrong shape
        ("since=yesterday", "since"),
        ("until=2026-13-01", "until"),
        ("since=2026-11-02&until=2026-11-01", "until"),
        ("failed=maybe", "failed"),
    ],
)
def test_bad_parameters_are_400_naming_the_parameter(client: FlaskClient, query: str, param: str) -> None:
    answer = client.get("/clusters?" + query)
    assert answer.status_code == 400
    body = answer.get_json()
    assert body["result"] is False and body["msg"].startswith(param), body


# ------------------------------------------------------------------ access control
def test_pages_and_summaries_only_cover_readable_namespaces(tmp_path: Path) -> None:
    config = server_config(tmp_path, sessions_ttl_seconds="0")
    store, _ = stored_session_a(config)
    store.put_bytes(LAYOUT.marker_key(JOB_CLUSTER, JOB_SESSION), b"")
    secret = ClusterRef("team-a", "raycluster-secret")
    for i in range(30):  # newer than everything in "default": they would fill the first pages
        store.put_bytes(LAYOUT.marker_key(secret, f"session_2026-12-01_00-00-{i:02d}_000000_1"), b"")
    with auth_api_stub() as stub:
        stub.tokens = {"bob": ("bob@example.com", ("default-devs",))}
        stub.access = {("default-devs", "default")}
        control = build_access_control(parse_auth("kubernetes", "kubernetes"), stub.api_client)
        client = create_app(config, store=store, live=FakeLive(), access=control).test_client()
        headers = {"Authorization": "Bearer bob"}
        assert (
            client.get(f"/enter_cluster/default/raycluster/raycluster-demo/{SESSION_A}", headers=headers).status_code
            == 200
        )
        for query in ("?limit=1", "?limit=1&failed=true", "?owner=rayjob-nightly", "?since=2026-01-01"):
            answer = client.get("/clusters" + query, headers=headers)
            assert answer.status_code == 200
            body = answer.get_data(as_text=True)
            assert "team-a" not in body and "secret" not in body and "rayjob-nightly" not in body, query
            # The first readable session is on the first page: nothing hidden fills it.
            if query.startswith("?limit=1") or query == "?since=2026-01-01":
                assert json.loads(body)[0]["sessionName"] == SESSION_A
            assert "X-Next-Cursor" not in answer.headers, query


# ------------------------------------------------------------------ the picker's assets
def test_the_pickers_fonts_are_the_dashboards_own(client: FlaskClient) -> None:
    """The picker loads Roboto from the Ray Dashboard build this server serves (no CDN):
    each font the CSS names must exist in the installed build, else a Ray upgrade
    silently changes the picker's look."""
    import re

    from runtime.server.views.ui import find_dashboard_build

    css = client.get("/select_cluster.css").get_data(as_text=True)
    fonts = re.findall(r'url\("(static/media/[^"]+\.woff2)"\)', css)
    assert len(fonts) == 2 and "http" not in css
    build = find_dashboard_build(None)
    assert build is not None, "the ray package (dev extra) ships the Dashboard build"
    for font in fonts:
        assert (build / font).is_file(), font
        served = client.get("/" + font)
        assert served.status_code == 200 and served.data[:4] == b"wOF2", font
    js = client.get("/select_cluster.js").get_data(as_text=True)
    for needle in ("X-Next-Cursor", "failed", "navigator.clipboard", 'document.execCommand("copy")', "aria-sort"):
        assert needle in js, needle
