"""Stored endpoint snapshots (fallback /api/<path>) and /timezone (served by views/state.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from flask import Flask
from flask.testing import FlaskClient

from runtime.server.app import create_app
from runtime.server.views.endpoints import EMPTY_PLACEMENT_GROUPS, backfill_bundles, empty_answer
from runtime.storage.base import ObjectStore
from runtime.storage.layout import ClusterRef, KeyLayout
from tests.support.app_world import FakeLive, enter, server_config, stored_session_a
from tests.support.sample_session import API, StoredSample, write_sample_session

BARE = ClusterRef("default", "raycluster-bare")
PG_URI = "/api/v0/placement_groups?detail=1&limit=10000"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Flask, ObjectStore, StoredSample, StoredSample]]:
    config = server_config(tmp_path_factory.mktemp("endpoints"))
    store, sample = stored_session_a(config)
    layout = KeyLayout("")
    bare = write_sample_session(store, layout, BARE, endpoints=False)
    store.put_bytes(layout.endpoint_key(sample.cluster, sample.session, "/api/v0/workers?detail=1"), b'{"w": 1}')
    pgs = {"result": True, "msg": "", "data": {"result": {"result": [{"placement_group_id": "a"}, {"bundles": [1]}]}}}
    pg_key = layout.endpoint_key(bare.cluster, bare.session, "/api/v0/placement_groups?detail=1")
    store.put_bytes(pg_key, orjson.dumps(pgs))
    yield create_app(config, store=store, live=FakeLive()), store, sample, bare


@pytest.fixture
def client(world: tuple[Flask, ObjectStore, StoredSample, StoredSample]) -> FlaskClient:
    client = world[0].test_client()
    enter(client, world[2])
    return client


@pytest.fixture
def bare_client(world: tuple[Flask, ObjectStore, StoredSample, StoredSample]) -> FlaskClient:
    client = world[0].test_client()
    enter(client, world[3])
    return client


@pytest.mark.parametrize(
    ("path", "saved"),
    [
        ("/api/v0/cluster_metadata", "api_v0_cluster_metadata.json"),
        ("/timezone", "timezone.json"),
        (PG_URI, "api_v0_placement_groups_detail_limit10000.json"),
    ],
)
def test_stored_snapshots_are_served_verbatim(client: FlaskClient, path: str, saved: str) -> None:
    answer = client.get(path)
    assert answer.status_code == 200
    assert answer.mimetype == "application/json"
    assert answer.data == (API / saved).read_bytes()


def test_any_stored_endpoint_by_its_exact_uri(client: FlaskClient) -> None:
    assert client.get("/api/v0/workers?detail=1").data == b'{"w": 1}'
    assert client.get("/api/v0/workers/?detail=1").data == b'{"w": 1}'  # trailing slash ignored
    assert client.get("/api/v0/workers?detail=2").status_code == 404  # the query is part of the key


def test_placement_group_bundles_are_backfilled(bare_client: FlaskClient) -> None:
    groups = bare_client.get("/api/v0/placement_groups?detail=1").get_json()["data"]["result"]["result"]
    assert groups == [{"placement_group_id": "a", "bundles": []}, {"bundles": [1]}]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/serve/applications/", b'{"applications":{}}'),
        ("/api/serve/applications", b'{"applications":{}}'),
        (PG_URI, EMPTY_PLACEMENT_GROUPS),
        ("/api/data/datasets/02000000", b'{"datasets":[]}'),
        ("/timezone", b'{"offset":"","value":""}'),
    ],
)
def test_schema_valid_empty_answers(bare_client: FlaskClient, path: str, body: bytes) -> None:
    answer = bare_client.get(path)
    assert answer.status_code == 200
    assert answer.data == body


@pytest.mark.parametrize(
    ("path", "msg"),
    [
        ("/api/v0/cluster_metadata", "Cluster metadata not found"),
        ("/api/v0/placement_groups/x", "Endpoint data not found in storage"),
        ("/api/data/datasets/", "Endpoint data not found in storage"),
        ("/api/data/datasets/1/x", "Endpoint data not found in storage"),
        ("/api/anything/else?x=1", "Endpoint data not found in storage"),
        ("/api/x?q=<script>", "Endpoint data not found in storage"),
        ("/api/..%2f..%2fcluster-metadata", "Endpoint data not found in storage"),
    ],
)
def test_missing_is_a_json_404(bare_client: FlaskClient, path: str, msg: str) -> None:
    answer = bare_client.get(path)
    assert answer.status_code == 404
    assert answer.get_json() == {"result": False, "msg": msg}


def test_only_get_is_answered_from_storage(client: FlaskClient) -> None:
    # Other methods are left to the UI blueprint's last-resort route (404 for a stored session),
    # never 405, so a Ray head proxying with --proxy-server-url falls back to its own handler.
    assert client.post("/api/v0/workers?detail=1").status_code == 404
    assert client.head("/api/v0/workers?detail=1").status_code == 200


def test_no_cookies_is_400(world: tuple[Flask, ObjectStore, StoredSample, StoredSample]) -> None:
    assert world[0].test_client().get("/api/v0/cluster_metadata").status_code == 400


def test_backfill_leaves_odd_or_complete_payloads_byte_for_byte() -> None:
    complete = (API / "api_v0_placement_groups_detail_limit10000.json").read_bytes()
    assert backfill_bundles(complete) == complete
    for odd in (b"not json", b"[]", b'{"data": {"result": {"result": {}}}}', b'{"data": null}'):
        assert backfill_bundles(odd) == odd


def test_empty_answer_table() -> None:
    assert empty_answer("/api/serve/applications") is not None
    assert empty_answer("/api/data/datasets/abc") == b'{"datasets":[]}'
    assert empty_answer("/api/jobs") is None


def test_extra_endpoint_write_dir_is_never_escaped(tmp_path: Path) -> None:
    """A URI with traversal can never become a key outside fetched_endpoints/."""
    layout = KeyLayout("")
    sample = ClusterRef("default", "x")
    session = "session_2026-01-01_00-00-00_000000_1"
    prefix = layout.endpoints_prefix(sample, session)
    key = layout.endpoint_key(sample, session, "/api/a/b?c=../../d")
    assert key.startswith(prefix) and "/" not in key[len(prefix) :].split("?")[0]
