"""The key layout must be byte-compatible with KubeRay's Go history server ("the reference")."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime.storage.errors import InvalidKeyError
from runtime.storage.layout import (
    ClusterRef,
    KeyLayout,
    endpoint_storage_name,
    event_file_name,
    is_event_file_name,
    normalise_root,
    session_created_at,
    validate_log_path,
)

SESSION = "session_2026-08-19_09-21-52_123456_1"
HEAD = "38c1a130345a92aec0f1d560631f8f204b302a19688ad187f5415429"
RAYJOB = ClusterRef(
    namespace="default", name="rayjob-historyserver-x7k2p", owner_kind="RayJob", owner_name="rayjob-historyserver"
)
BARE = ClusterRef(namespace="ns", name="cluster")


def test_worked_example_from_the_reference() -> None:
    layout = KeyLayout("")
    prefix = "cluster-history/rayjob/default/rayjob-historyserver/rayjob-historyserver-x7k2p"
    assert layout.cluster_prefix(RAYJOB) == prefix
    assert layout.marker_key(RAYJOB, SESSION) == (
        "cluster-metadata/rayjob/default_rayjob-historyserver_rayjob-historyserver-x7k2p/" + SESSION
    )
    assert (
        layout.log_key(RAYJOB, SESSION, HEAD, "events/event_GCS.log")
        == f"{prefix}/{SESSION}/{HEAD}/logs/events/event_GCS.log"
    )
    name = f"{HEAD}-2026-08-19-09-1787131561123456789.jsonl"
    assert layout.node_events_key(RAYJOB, SESSION, HEAD, name) == f"{prefix}/{SESSION}/{HEAD}/node_events/{name}"
    assert layout.job_events_key(RAYJOB, SESSION, HEAD, "AQAAAA==", name) == (
        f"{prefix}/{SESSION}/{HEAD}/job_events/01000000/{name}"
    )
    assert layout.endpoint_key(RAYJOB, SESSION, "/api/v0/placement_groups?detail=1&limit=10000") == (
        f"{prefix}/{SESSION}/fetched_endpoints/restful__api__v0__placement_groups?detail=1&limit=10000"
    )


def test_marker_keys_match_reference_tests() -> None:
    assert (
        KeyLayout("myroot").marker_key(BARE, "session-123")
        == "myroot/cluster-metadata/raycluster/ns_cluster/session-123"
    )
    job = ClusterRef(namespace="ns", name="cluster", owner_kind="RaYjOb", owner_name="job1")
    assert KeyLayout("").marker_key(job, "session-456") == "cluster-metadata/rayjob/ns_job1_cluster/session-456"


def test_owner_kind_without_owner_name_files_under_raycluster() -> None:
    ref = ClusterRef(namespace="ns", name="c", owner_kind="rayjob", owner_name="")
    assert ref.owner_kind == "raycluster"
    assert KeyLayout().cluster_prefix(ref) == "cluster-history/raycluster/ns/c"


def test_raycluster_owner_kind_is_accepted_unlike_the_reference() -> None:
    ref = ClusterRef(namespace="ns", name="c", owner_kind="RayCluster", owner_name="c")
    assert KeyLayout().cluster_prefix(ref) == "cluster-history/raycluster/ns/c"


@pytest.mark.parametrize("root", ["", "log", "/log/", "a/b"])
def test_root_is_joined_without_double_slashes(root: str) -> None:
    key = KeyLayout(root).marker_key(BARE, SESSION)
    assert "//" not in key and not key.startswith("/")
    assert key.endswith(f"cluster-metadata/raycluster/ns_cluster/{SESSION}")


@pytest.mark.parametrize("root", ["..", "a/../b", "a//b", "a b", "a/./b"])
def test_bad_roots_are_rejected(root: str) -> None:
    with pytest.raises(InvalidKeyError):
        normalise_root(root)


def test_parse_marker_round_trips_and_reads_the_session_time() -> None:
    layout = KeyLayout("log")
    for cluster in (BARE, RAYJOB, ClusterRef("ns", "svc-raycluster-abc", "rayservice", "svc")):
        marker = layout.parse_marker_key(layout.marker_key(cluster, SESSION))
        assert marker.cluster == cluster
        assert marker.session == SESSION
        assert marker.created_at == datetime(2026, 8, 19, 9, 21, 52, 123456, tzinfo=UTC)


@pytest.mark.parametrize(
    "key",
    [
        "cluster-metadata/raycluster/ns_cluster/" + SESSION,  # wrong root
        "log/cluster-metadata/raycluster/ns_owner_cluster/" + SESSION,  # 3 parts for raycluster
        "log/cluster-metadata/rayjob/ns_cluster/" + SESSION,  # 2 parts for rayjob
        "log/cluster-metadata/rayjob/ns__cluster/" + SESSION,  # empty owner
        "log/cluster-metadata/raycluster/ns_cluster",  # missing session
        "log/cluster-metadata/raycluster/ns_cluster/session-no-time",
        "log/cluster-metadata/foo/ns_cluster/" + SESSION,
        "log/cluster-metadata/raycluster/NS_cluster/" + SESSION,  # not a DNS label
        "log/cluster-metadata/raycluster/ns_cluster/" + SESSION + "/extra",
    ],
)
def test_parse_marker_rejects_what_is_not_a_marker(key: str) -> None:
    with pytest.raises(InvalidKeyError):
        KeyLayout("log").parse_marker_key(key)


@pytest.mark.parametrize(
    ("uri", "name"),
    [
        ("/api/v0/cluster_metadata", "restful__api__v0__cluster_metadata"),
        ("/timezone", "restful__timezone"),
        ("/api/serve/applications/", "restful__api__serve__applications"),
        ("/api/v0/placement_groups?detail=1&limit=10000", "restful__api__v0__placement_groups?detail=1&limit=10000"),
        ("/api/data/datasets/01000000", "restful__api__data__datasets__01000000"),
        ("/api/train/v2/runs/v1", "restful__api__train__v2__runs__v1"),
    ],
)
def test_endpoint_storage_names(uri: str, name: str) -> None:
    assert endpoint_storage_name(uri) == name


@pytest.mark.parametrize("uri", ["api/v0/x", "/api/../secret", "/api//x", "/a b", "/x\n", "/api/./x"])
def test_bad_endpoints_are_rejected(uri: str) -> None:
    with pytest.raises(InvalidKeyError):
        endpoint_storage_name(uri)


def test_event_file_name_shape_and_reader_regex() -> None:
    ns = 1787131561123456789  # 2026-08-19 09:26:01 UTC
    name = event_file_name(HEAD.upper(), ns)
    assert name == f"{HEAD}-2026-08-19-09-{ns}.jsonl"
    assert event_file_name(HEAD, ns, compressed=True).endswith(".jsonl.gz")
    assert is_event_file_name(name)


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("node-abcd-2026-05-13-10", True),
        ("node-abcd-2026-05-13-10.jsonl.gz", True),
        ("node-1-2026-05-13-10-1747123200000000000.jsonl.gz", True),
        ("node-1-2026-05-13-1", False),
        ("foo.txt", False),
        ("node-1-2026-05-13-10\n", False),
    ],
)
def test_reader_file_name_filter(name: str, valid: bool) -> None:
    assert is_event_file_name(name) is valid


def test_session_time_is_utc_and_optional() -> None:
    assert session_created_at("session_2026-11-22_01-45-25_333080_9264") == datetime(
        2026, 11, 22, 1, 45, 25, 333080, tzinfo=UTC
    )
    assert session_created_at("session_latest") is None
    assert session_created_at("session_2026-13-40_99-99-99_000000_1") is None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("namespace", "../etc"),
        ("namespace", "Ns"),
        ("namespace", "a/b"),
        ("namespace", ""),
        ("name", ".."),
        ("name", "a/b"),
        ("name", "/abs"),
        ("name", "x" * 254),
    ],
)
def test_cluster_components_are_whitelisted(field: str, value: str) -> None:
    kwargs = {"namespace": "ns", "name": "c", field: value}
    with pytest.raises(InvalidKeyError):
        ClusterRef(**kwargs)


@pytest.mark.parametrize(
    ("method", "args"),
    [
        ("session_prefix", ("..",)),
        ("session_prefix", ("session/x",)),
        ("node_prefix", (SESSION, "../x")),
        ("node_prefix", (SESSION, "zz!")),
        ("log_key", (SESSION, HEAD, "../../secret")),
        ("log_key", (SESSION, HEAD, "/etc/passwd")),
        ("log_key", (SESSION, HEAD, "a//b")),
        ("log_key", (SESSION, HEAD, "a\\b")),
        ("job_events_key", (SESSION, HEAD, "../x", "f")),
        ("job_events_key", (SESSION, HEAD, "01000000", "a/b")),
        ("node_events_key", (SESSION, HEAD, "..")),
    ],
)
def test_traversal_is_rejected_everywhere(method: str, args: tuple[str, ...]) -> None:
    with pytest.raises(InvalidKeyError):
        getattr(KeyLayout("root"), method)(BARE, *args)


@given(st.text(max_size=40))
def test_accepted_log_paths_never_escape_the_logs_prefix(path: str) -> None:
    layout = KeyLayout("root")
    try:
        validate_log_path(path)
    except InvalidKeyError:
        return
    key = layout.log_key(BARE, SESSION, HEAD, path)
    prefix = layout.logs_prefix(BARE, SESSION, HEAD)
    assert key.startswith(prefix)
    assert not ({"..", ".", ""} & set(key.split("/")))
