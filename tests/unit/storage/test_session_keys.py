"""Parsing stored keys (runtime.storage.session_keys) undoes building them (layout)."""

from __future__ import annotations

from datetime import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime.storage.layout import ClusterRef, KeyLayout, SessionMarker, event_file_name, validate_job_id
from runtime.storage.session_keys import (
    EndpointSnapshot,
    JobEventFile,
    LogFile,
    NodeEventFile,
    SessionKey,
    StoredObject,
    event_dir_parts,
    is_node_dir,
    is_readable_event_file,
    log_rel_key,
    logs_rel_prefix,
    parse_key,
    parse_session_key,
    relative_key,
    split_event_path,
)

SESSION = "session_2026-08-19_09-21-52_123456_1"
NODE = "38c1a130345a92aec0f1d560631f8f204b302a19688ad187f5415429"

_label = st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,10}[a-z0-9])?\Z")
_subdomain = st.builds(".".join, st.lists(_label, min_size=1, max_size=3))
_owner_kind = st.sampled_from(["raycluster", "rayjob", "rayservice", "RayJob"])
clusters = st.builds(
    ClusterRef, namespace=_label, name=_subdomain, owner_kind=_owner_kind, owner_name=_subdomain | st.just("")
)
roots = st.sampled_from(["", "root", "a/b", "job_events", "x/node_events/logs"])
# Ray names a session after the moment it started: real calendar times only (a marker's
# time is what lists sessions, so a name without one cannot be a marker).
sessions = st.builds(
    lambda moment, pid: moment.strftime("session_%Y-%m-%d_%H-%M-%S_%f") + f"_{pid}",
    st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2099, 12, 31)),
    st.integers(min_value=1, max_value=99999),
)
odd_sessions = st.from_regex(r"\A[A-Za-z0-9._-]{1,30}\Z").filter(lambda s: s not in (".", ".."))
nodes = st.from_regex(r"\A[0-9a-f]{1,56}\Z")
jobs = st.from_regex(r"\A[0-9a-f]{8}\Z") | st.from_regex(r"\A[A-Za-z0-9._-]{1,20}\Z").filter(
    lambda s: s not in (".", "..")
)
segments = st.from_regex(r"\A[A-Za-z0-9._@+=,:~%-]{1,20}\Z").filter(lambda s: s not in (".", ".."))
log_paths = st.lists(segments, min_size=1, max_size=8).map("/".join)
event_names = st.builds(
    lambda node, ns, gz: event_file_name(node, ns, compressed=gz),
    nodes,
    st.integers(min_value=0, max_value=4_000_000_000_000_000_000),
    st.booleans(),
)
uris = st.from_regex(r"\A/[A-Za-z0-9._~%,:+-]{1,12}(/[A-Za-z0-9._~%,:+-]{1,12}){0,3}/?(\?[a-z]=[0-9a-z&=]{0,10})?\Z")


@st.composite
def built_keys(draw: st.DrawFn) -> tuple[KeyLayout, str, ClusterRef, str, SessionKey]:
    """(layout, full key, cluster, session, expected item) from one builder."""
    layout = KeyLayout(draw(roots))
    cluster, session, node = draw(clusters), draw(sessions | odd_sessions), draw(nodes)
    kind = draw(st.sampled_from(["log", "node_events", "job_events", "endpoint"]))
    item: SessionKey
    if kind == "log":
        path = draw(log_paths)
        key, item = layout.log_key(cluster, session, node, path), LogFile(node, path)
    elif kind == "node_events":
        name = draw(event_names | segments)
        key, item = layout.node_events_key(cluster, session, node, name), NodeEventFile(node, name)
    elif kind == "job_events":
        job, name = draw(jobs), draw(event_names | segments)
        key, item = (
            layout.job_events_key(cluster, session, node, job, name),
            JobEventFile(node, validate_job_id(job), name),
        )
    else:
        uri = draw(uris)
        key = layout.endpoint_key(cluster, session, uri)
        item = EndpointSnapshot(key.rsplit("/", 1)[1])
        assert item.is_snapshot_of(uri)
    return layout, key, cluster, session, item


@given(built_keys())
def test_every_built_key_parses_back(built: tuple[KeyLayout, str, ClusterRef, str, SessionKey]) -> None:
    layout, key, cluster, session, item = built
    assert parse_session_key(relative_key(key, layout.session_prefix(cluster, session))) == item
    assert parse_key(layout, key) == StoredObject(cluster, session, item)


@given(clusters, sessions, roots)
def test_markers_parse_back(cluster: ClusterRef, session: str, root: str) -> None:
    layout = KeyLayout(root)
    parsed = parse_key(layout, layout.marker_key(cluster, session))
    assert isinstance(parsed, SessionMarker) and (parsed.cluster, parsed.session) == (cluster, session)


def test_a_marker_needs_a_real_session_time() -> None:
    layout = KeyLayout("r")
    key = layout.marker_key(ClusterRef("ns", "c"), "session_2001-02-29_01-02-03_000004_5")
    assert parse_key(layout, key) is None  # 29 February 2001 never was: not a session marker


@given(nodes, st.none() | jobs, event_names)
def test_spool_paths_and_keys_share_one_rule(node: str, job: str | None, name: str) -> None:
    assert split_event_path([node, *event_dir_parts(job), name]) == (node, job, name)


@given(nodes, log_paths)
def test_lookup_keys_match_the_builder(node: str, path: str) -> None:
    layout = KeyLayout("r")
    cluster = ClusterRef("ns", "c")
    prefix = layout.session_prefix(cluster, SESSION)
    assert prefix + log_rel_key(node, path) == layout.log_key(cluster, SESSION, node, path)
    assert prefix + logs_rel_prefix(node) == layout.logs_prefix(cluster, SESSION, node)


@pytest.mark.parametrize(
    ("rel", "item"),
    [
        (f"{NODE}/logs/raylet.out", LogFile(NODE, "raylet.out")),
        (f"{NODE}/logs/events/event_GCS.log", LogFile(NODE, "events/event_GCS.log")),
        ("n1/node_events/n1-2026-11-22-01", NodeEventFile("n1", "n1-2026-11-22-01")),  # any node dir is read
        ("n1/job_events/02000000/x", JobEventFile("n1", "02000000", "x")),
        ("fetched_endpoints/restful__api__jobs", EndpointSnapshot("restful__api__jobs")),
        # Edge cases: the builder never writes an empty node, job or name segment.
        ("/node_events/n1-2026-11-22-01", None),
        ("n1/job_events//n1-2026-11-22-01", None),
        ("/logs/raylet.out", None),
        ("n1/logs", None),
        ("fetched_endpoints/", None),
        # Wrong depth for its directory.
        ("n1/job_events/n1-2026-11-22-01.jsonl", None),
        ("n1/node_events/sub/n1-2026-11-22-01", None),
        ("fetched_endpoints/a/b", None),
        ("n1/raylet.out", None),
    ],
)
def test_session_key_kinds(rel: str, item: SessionKey | None) -> None:
    assert parse_session_key(rel) == item


def test_readable_event_files_need_the_writers_name_shape() -> None:
    assert is_readable_event_file(parse_session_key("n1/job_events/02000000/n1-2026-11-22-01-1795311940.jsonl.gz"))
    assert not is_readable_event_file(parse_session_key("n1/node_events/foo.txt"))
    assert not is_readable_event_file(parse_session_key(f"{NODE}/logs/node_events/{NODE}-2026-11-22-01.jsonl"))


def test_log_event_files_and_node_dirs() -> None:
    assert LogFile("n", "events/event_.log").is_log_events
    assert not LogFile("n", "events/event.log").is_log_events
    assert not LogFile("n", "events/sub/event_X.log").is_log_events
    assert not LogFile("n", "events/event_X.log.gz").is_log_events
    assert is_node_dir(NODE) and not is_node_dir("") and not is_node_dir("ABC") and not is_node_dir("_unknown")


@pytest.mark.parametrize(
    "key",
    [
        "cluster-history/raycluster/ns/c",  # no session
        "cluster-history/raycluster/ns/c/session_x",  # the session itself, no object
        "cluster-history/rayjob/ns//c/session_x/n/logs/a",  # owner kind without an owner
        "cluster-history/raycluster/NS/c/session_x/n/logs/a",  # not a namespace
        "cluster-history/other/ns/c/session_x/n/logs/a",
        "cluster-history/raycluster/ns/c/../n/logs/a",
        "elsewhere/raycluster/ns/c/session_x/n/logs/a",
        "cluster-metadata/raycluster/ns_c/not-a-session",
    ],
)
def test_keys_the_layout_does_not_build(key: str) -> None:
    assert parse_key(KeyLayout(""), key) is None


def test_unknown_objects_of_a_session_keep_their_session() -> None:
    parsed = parse_key(KeyLayout(""), "cluster-history/raycluster/ns/c/session_x/n/other/file")
    assert parsed == StoredObject(ClusterRef("ns", "c"), "session_x", None)
