"""runtime/storage/retention.py: which sessions whole-session retention deletes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from runtime.storage.base import ObjectInfo
from runtime.storage.layout import ClusterRef, KeyLayout
from runtime.storage.retention import Decision, SessionRecord, select, summarise

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
CUTOFF = NOW - timedelta(days=30)
OLD = CUTOFF - timedelta(days=5)
RECENT = CUTOFF + timedelta(days=5)
DEMO = ClusterRef("default", "raycluster-demo")
OTHER = ClusterRef("team-a", "svc-raycluster-x", owner_kind="rayservice", owner_name="svc")
S1 = "session_2026-01-01_00-00-00_000001_1"
S2 = "session_2026-02-01_00-00-00_000001_1"
S3 = "session_2026-03-01_00-00-00_000001_1"


def _record(cluster: ClusterRef, session: str, newest: datetime | None) -> SessionRecord:
    return SessionRecord(cluster, session, newest=newest, objects=3, bytes=10, has_marker=True)


def _by_session(decisions: list[Decision]) -> dict[tuple[str, str], Decision]:
    return {(d.record.cluster.name, d.record.session): d for d in decisions}


def _deleted(decisions: list[Decision]) -> set[tuple[str, str]]:
    return {key for key, d in _by_session(decisions).items() if d.delete}


# --------------------------------------------------------------- rule (a)
def test_a_newer_session_ends_the_older_ones_and_the_newest_is_kept_without_a_live_check() -> None:
    records = [_record(DEMO, S1, OLD), _record(DEMO, S2, OLD), _record(DEMO, S3, OLD)]
    decisions = _by_session(select(records, cutoff=CUTOFF, live=None))
    assert decisions["raycluster-demo", S1].delete
    assert decisions["raycluster-demo", S2].delete
    assert f"newer session of the cluster exists ({S2})" in decisions["raycluster-demo", S1].reason
    newest = decisions["raycluster-demo", S3]
    assert not newest.delete
    assert "liveness was not checked" in newest.reason


def test_a_newer_session_of_another_cluster_ends_nothing() -> None:
    records = [_record(DEMO, S1, OLD), _record(OTHER, S2, OLD)]
    assert _deleted(select(records, cutoff=CUTOFF)) == set()


def test_a_live_cluster_running_for_months_keeps_its_session_whole() -> None:
    # A RayService running since January: every object is older than the cutoff.
    records = [_record(OTHER, S1, OLD)]
    (decision,) = select(records, cutoff=CUTOFF, live={("team-a", "svc-raycluster-x")})
    assert not decision.delete
    assert decision.reason == "running: the newest session of a live RayCluster"


def test_a_live_clusters_older_sessions_are_ended_by_its_newer_one() -> None:
    records = [_record(DEMO, S1, OLD), _record(DEMO, S2, OLD)]
    decisions = _by_session(select(records, cutoff=CUTOFF, live={("default", "raycluster-demo")}))
    assert decisions["raycluster-demo", S1].delete
    assert not decisions["raycluster-demo", S2].delete


# --------------------------------------------------------------- rule (b)
def test_a_cluster_that_is_not_live_has_ended_all_its_sessions() -> None:
    records = [_record(DEMO, S2, OLD), _record(OTHER, S3, OLD)]
    decisions = _by_session(select(records, cutoff=CUTOFF, live={("team-a", "svc-raycluster-x")}))
    gone = decisions["raycluster-demo", S2]
    assert gone.delete
    assert "RayCluster default/raycluster-demo is not live" in gone.reason
    assert not decisions["svc-raycluster-x", S3].delete


def test_an_empty_live_set_is_known_and_differs_from_no_check() -> None:
    records = [_record(DEMO, S2, OLD)]
    assert _deleted(select(records, cutoff=CUTOFF, live=set())) == {("raycluster-demo", S2)}
    assert _deleted(select(records, cutoff=CUTOFF, live=None)) == set()


def test_liveness_matches_namespace_and_name() -> None:
    records = [_record(DEMO, S2, OLD)]
    assert _deleted(select(records, cutoff=CUTOFF, live={("team-a", "raycluster-demo")})) == {("raycluster-demo", S2)}


# ----------------------------------------------------------------- cutoff
def test_an_ended_session_written_to_recently_is_kept() -> None:
    records = [_record(DEMO, S1, RECENT), _record(DEMO, S2, OLD)]
    decisions = _by_session(select(records, cutoff=CUTOFF))
    kept = decisions["raycluster-demo", S1]
    assert not kept.delete
    assert "within the retention period" in kept.reason


@pytest.mark.parametrize(
    ("newest", "deleted"),
    [
        (CUTOFF - timedelta(microseconds=1), True),
        (CUTOFF, False),  # "ended before the cutoff" is strict
        (CUTOFF + timedelta(microseconds=1), False),
    ],
)
def test_cutoff_edges(newest: datetime, deleted: bool) -> None:
    records = [_record(DEMO, S1, newest), _record(DEMO, S2, RECENT)]
    assert (("raycluster-demo", S1) in _deleted(select(records, cutoff=CUTOFF))) is deleted


def test_an_ended_session_without_modification_times_is_kept() -> None:
    records = [_record(DEMO, S1, None), _record(DEMO, S2, OLD)]
    decisions = _by_session(select(records, cutoff=CUTOFF))
    assert not decisions["raycluster-demo", S1].delete
    assert "no modification times" in decisions["raycluster-demo", S1].reason


def test_a_session_name_without_a_start_time_is_never_ordered_against_others() -> None:
    records = [_record(DEMO, "hand-upload", OLD), _record(DEMO, S2, OLD)]
    decisions = _by_session(select(records, cutoff=CUTOFF))
    assert not decisions["raycluster-demo", "hand-upload"].delete
    assert "no start time" in decisions["raycluster-demo", "hand-upload"].reason
    # ... unless the cluster is known to be gone.
    assert ("raycluster-demo", "hand-upload") in _deleted(select(records, cutoff=CUTOFF, live=set()))


def test_every_session_gets_exactly_one_decision_in_a_stable_order() -> None:
    records = [_record(OTHER, S1, OLD), _record(DEMO, S3, OLD), _record(DEMO, S1, OLD)]
    decisions = select(records, cutoff=CUTOFF)
    assert [(d.record.cluster.name, d.record.session) for d in decisions] == [
        ("raycluster-demo", S1),
        ("raycluster-demo", S3),
        ("svc-raycluster-x", S1),
    ]


# -------------------------------------------------------------- summarise
def test_summarise_folds_every_object_and_the_marker_into_its_session() -> None:
    layout = KeyLayout("root")
    prefix = layout.session_prefix(DEMO, S1)
    node = "ab" * 28
    infos = [
        ObjectInfo(layout.log_key(DEMO, S1, node, "raylet.out"), 100, OLD),
        ObjectInfo(layout.node_events_key(DEMO, S1, node, "x-2026-01-01-00.jsonl"), 50, RECENT),
        ObjectInfo(layout.endpoint_key(DEMO, S1, "/api/jobs/"), 7, OLD),
        ObjectInfo(prefix + "something/else", 1, OLD),  # not a layout kind, still the session's
        ObjectInfo(layout.marker_key(DEMO, S1), 0, OLD - timedelta(days=1)),
        ObjectInfo(layout.marker_key(OTHER, S2), 0, OLD),  # a marker whose objects are gone
        ObjectInfo(KeyLayout("elsewhere").log_key(DEMO, S1, node, "raylet.out"), 5, OLD),
        ObjectInfo("root/cluster-metadata/raycluster/not-a-marker", 0, OLD),
    ]
    records = {(r.cluster, r.session): r for r in summarise(layout, infos)}
    assert set(records) == {(DEMO, S1), (OTHER, S2)}
    demo = records[DEMO, S1]
    assert (demo.objects, demo.bytes, demo.newest, demo.has_marker) == (5, 158, RECENT, True)
    other = records[OTHER, S2]
    assert (other.objects, other.newest, other.has_marker) == (1, OLD, True)


def test_summarise_a_session_whose_marker_is_gone() -> None:
    # What a gc interrupted after the objects but before the marker leaves the other way round.
    layout = KeyLayout()
    infos = [ObjectInfo(layout.log_key(DEMO, S1, "ab", "raylet.out"), 1, OLD)]
    (record,) = summarise(layout, infos)
    assert not record.has_marker
    assert record.newest == OLD
