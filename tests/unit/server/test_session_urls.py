"""The session URL format: building, parsing, disambiguation, the /enter_cluster redirect target."""

from __future__ import annotations

import posixpath

import pytest

from runtime.server.errors import ApiError
from runtime.server.selection import Selection
from runtime.server.session_urls import SessionTarget, enter_location, parse_session_path, session_path
from runtime.storage.layout import ClusterRef

SESSION = "session_2026-11-22_01-45-25_333080_9264"


def test_raycluster_path() -> None:
    assert session_path(ClusterRef("default", "quickstart"), SESSION) == f"/sessions/default/quickstart/{SESSION}/"


def test_owner_paths_use_the_owner_name() -> None:
    job = ClusterRef("ml", "train-x7k2p", "rayjob", "train")
    service = ClusterRef("ml", "serve-abc", "rayservice", "serve")
    assert session_path(job, "latest") == "/sessions/ml/rayjob/train/latest/"
    assert session_path(service, "live") == "/sessions/ml/rayservice/serve/live/"


def test_owner_kind_without_owner_name_is_a_raycluster() -> None:
    assert session_path(ClusterRef("ml", "c", "rayjob", ""), SESSION) == f"/sessions/ml/c/{SESSION}/"


@pytest.mark.parametrize(
    ("cluster", "session"),
    [
        (ClusterRef("default", "quickstart"), SESSION),
        (ClusterRef("default", "rayjob"), SESSION),  # a RayCluster named like a kind
        (ClusterRef("ml", "c-1", "rayjob", "train"), "latest"),
        (ClusterRef("ml", "c-1", "rayservice", "serve.v2"), "live"),
    ],
)
def test_paths_parse_back(cluster: ClusterRef, session: str) -> None:
    path = session_path(cluster, session)
    target, rest = parse_session_path(path + "api/jobs/")
    assert target.path == path
    assert target.session == session
    assert rest == "/api/jobs/"


def test_rayjob_disambiguation() -> None:
    owner, rest = parse_session_path(f"/sessions/ns/rayjob/x/{SESSION}/logical/actors")
    assert owner == SessionTarget("ns", "rayjob", "x", SESSION)
    assert rest == "/logical/actors"
    named, rest = parse_session_path(f"/sessions/ns/rayjob/{SESSION}/")
    assert named == SessionTarget("ns", "raycluster", "rayjob", SESSION)
    assert rest == "/"


def test_rest_forms() -> None:
    assert parse_session_path("/sessions/ns/c/latest")[1] == ""
    assert parse_session_path("/sessions/ns/c/latest/")[1] == "/"
    assert parse_session_path("/sessions/ns/c/live/static/js/main.js")[1] == "/static/js/main.js"
    assert parse_session_path("/sessions/ns/RayJob/j/latest/")[0].kind == "rayjob"


@pytest.mark.parametrize(
    ("path", "named"),
    [
        ("/sessions/Bad_NS/c/latest/", "namespace segment"),
        ("/sessions/ns/Bad_Name/latest/", "cluster name segment"),
        ("/sessions/ns/rayjob/Bad_Name/latest/", "rayjob name segment"),
        ("/sessions/ns/c/session_not-a-date/", "session segment"),
        ("/sessions/ns/c/session_a..b/", "session segment"),
        ("/sessions/ns/c/", "without a session segment"),
        ("/sessions/ns/c/yesterday/", "without a session segment"),
        ("/sessions/", "without a session segment"),
    ],
)
def test_bad_paths_name_the_segment(path: str, named: str) -> None:
    with pytest.raises(ApiError) as info:
        parse_session_path(path)
    assert info.value.status == 400
    assert named in info.value.msg


@pytest.mark.parametrize(
    "path",
    [
        "/enter_cluster/default/quickstart",
        "/enter_cluster/default/raycluster/quickstart/latest",
        f"/enter_cluster/default/quickstart/{SESSION}",
        "/enter_cluster/ml/rayjob/train/",
    ],
)
def test_enter_location_is_relative_and_has_no_fragment(path: str) -> None:
    selection = Selection("ml", "train-x7k2p", SESSION, "rayjob", "train")
    location = enter_location(path, selection, "latest")
    assert "#" not in location
    assert not location.startswith("/")
    # Resolved against the request URL (RFC 3986 section 5.2), also under a path prefix.
    for prefix in ("", "/history"):
        base = posixpath.dirname(prefix + path)
        landed = posixpath.normpath(posixpath.join(base, location)) + "/"
        assert landed == f"{prefix}/sessions/ml/rayjob/train/{SESSION}/"


def test_enter_location_keeps_latest_for_a_running_cluster() -> None:
    live = Selection("default", "demo", "live")
    assert enter_location("/enter_cluster/default/demo", live) == "../../sessions/default/demo/latest/"
    assert enter_location("/enter_cluster/default/raycluster/demo/live", live, "live").endswith("/demo/live/")
    stored = Selection("default", "demo", SESSION)
    assert enter_location("/enter_cluster/default/demo", stored).endswith(f"/demo/{SESSION}/")
